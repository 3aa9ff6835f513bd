/* dt_ops.h — the device operations a GPT-2 block needs, forward and backward.
 *
 * This is the device-op interface: ops_cpu.c implements it with OpenBLAS
 * (cblas_sgemm) and OpenMP; a CUDA backend implements the same signatures on
 * device pointers. Every op works on fp32 arrays (storage in 16-bit is
 * converted by the caller, see docs/engine.md); statistics (mean, rstd, lse)
 * are fp32. Shapes are in elements and written [outer, ..., inner], row-major.
 *
 * Gradient convention (as llm.c): parameter gradients are ACCUMULATED (+=),
 * activation gradients are written (=) unless the comment says +=.
 * N = B*T rows of tokens throughout. */
#ifndef DT_OPS_H
#define DT_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "dt_precision.h"   /* dt_dtype */

/* ---- GEMM (row-major) -------------------------------------------------------
 * C[M,N] = alpha * op(A) op(B) + beta * C, op = transpose when trans_* != 0.
 * lda/ldb/ldc are row strides in elements. */
void dt_op_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc);

/* Linear layer with Hugging Face Conv1D weight layout:
 *   out[N, OC] = inp[N, IC] @ w[IC, OC] + bias[OC]   (bias may be NULL) */
void dt_op_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                          int64_t N, int64_t IC, int64_t OC);
/* dinp[N, IC] = dout @ w^T  (or += when accumulate_dinp; dinp may be NULL = skip)
 * dw[IC, OC] += inp^T @ dout;  dbias[OC] += sum_n dout[n, :]  (dbias may be NULL) */
void dt_op_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                           const float *inp, const float *w, int64_t N, int64_t IC, int64_t OC,
                           int accumulate_dinp);

/* ---- encoder: out[n, :] = wte[tok[n], :] + wpe[n % T, :] ---------------------
 * wte [V, C], wpe [maxT, C], out [B*T, C]. wpe NULL: no learned positions (the
 * llama family), out = wte[tok]; in the backward dwpe NULL likewise. */
void dt_op_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                           int64_t B, int64_t T, int64_t C);
/* dwte[tok, :] += dout[n, :], dwpe[t, :] += sum_b dout[b, t, :]. Deterministic
 * (parallel over channels, tokens visited in order). */
void dt_op_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                            int64_t B, int64_t T, int64_t C);

/* ---- LayerNorm over the last dim C ------------------------------------------
 * out [N, C], mean [N], rstd [N] (1 / sqrt(var + eps), biased variance) */
void dt_op_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                             const float *w, const float *b, int64_t N, int64_t C, float eps);
/* dinp += (so the residual stream gradient accumulates), dw += , db += */
void dt_op_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, int64_t N, int64_t C);

/* ---- causal self-attention ---------------------------------------------------
 * qkv [B, T, 3C] (q | k | v, head h is the slice h*hs .. (h+1)*hs of each), out [B, T, C],
 * scale 1/sqrt(hs).
 * Flash: tiled over keys with an online softmax; saves lse [B, H, T] (natural log
 * of the softmax denominator, including the running max). */
void dt_op_attention_forward_flash(float *out, float *lse, const float *qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t H);
/* dqkv [B, T, 3C] written (=); recomputes probabilities from q, k and lse. */
void dt_op_attention_backward_flash(float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *lse, int64_t B, int64_t T,
                                    int64_t C, int64_t H);
/* Materialized: saves probs [B, H, T, T] (entries above the diagonal are 0). */
void dt_op_attention_forward_probs(float *out, float *probs, const float *qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t H);
void dt_op_attention_backward_probs(float *dqkv, const float *dout, const float *qkv,
                                    const float *probs, int64_t B, int64_t T, int64_t C,
                                    int64_t H);

/* ---- GELU, tanh approximation (GPT-2's "gelu_new") --------------------------
 * gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void dt_op_gelu_forward(float *out, const float *inp, int64_t n);
/* dinp = dout * gelu'(inp) (written) */
void dt_op_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n);

/* ---- residual: out = a + b ---------------------------------------------------- */
void dt_op_residual_forward(float *out, const float *a, const float *b, int64_t n);

/* ---- dropout by a counter-based mask (dt_device_ops.dropout_mask) --------------- */
void dt_op_dropout_mask(float *y, const float *x, int64_t n, uint64_t stream, double p);

/* ---- store and round: dst[i] = x[i] in 16-bit dtype t (round to nearest even,
 * as dt_convert), and x[i] = that stored value widened back to fp32, in one pass
 * over x [n] (dst [n] of t). Bit for bit the pair dt_convert(dst, t, x, fp32, n);
 * dt_convert(x, fp32, dst, t, n) (tests/kernels/test_ops.c), with one read of x
 * instead of x and dst. t fp32: dst = x (a copy; x unchanged). What the model does
 * after an op wrote a 16-bit activation's fp32 view (lm_act_commit). ---------- */
void dt_op_store_round(void *dst, dt_dtype t, float *x, size_t n);

/* ---- 16-bit accumulate: dst[i] = round(dst[i] + acc[i]) in dtype t (bf16 or fp16),
 * one rounding per element: bit for bit dt_convert to fp32, an fp32 add and dt_convert
 * back (tests/kernels/test_ops.c), so dt_add_16 (dt_devmath.h) for every finite or
 * infinite value; AVX-512 where the compiler targets it. What the model does with a
 * group's fp32 gradients into 16-bit gradient storage. ----------------------------- */
void dt_op_accumulate_16(uint16_t *dst, dt_dtype t, const float *acc, size_t n);

/* ---- bias rows: out[n, :] = bias[:] for every n < N (out [N, OC], bias [OC]); the
 * start of a linear whose GEMM then adds its product (beta = 1) ----------------- */
void dt_op_broadcast_rows(float *out, const float *bias, int64_t N, int64_t OC);

/* ---- bias gradient: db[OC] += sum_n dout[n, :] ------------------------------- */
void dt_op_bias_backward(float *db, const float *dout, int64_t N, int64_t OC);

/* ---- fused classifier + cross-entropy ---------------------------------------
 * Tied classifier: logits[N, V] = x[N, C] @ wte[V, C]^T (the caller runs the GEMM,
 * possibly in chunks over V). These two ops work on the fp32 logits buffer.
 * Forward: lse[n] = log sum_v exp(logits[n, v]); losses[n] = lse[n] - logits[n, target]
 * (targets may be NULL: only lse). Returns the mean loss over N (double accumulation).
 * A target DT_IGNORE_INDEX (dt_devmath.h) has loss 0 (still counted in N) and, in the
 * backward, a zero gradient row. */
double dt_op_crossentropy_forward(float *lse, float *losses, const float *logits,
                                  const int32_t *targets, int64_t N, int64_t V);
/* In place: logits[n, v] <- dloss * (softmax(logits[n])[v] - [v == target[n]]). */
void dt_op_crossentropy_backward_inplace(float *logits, const float *lse, const int32_t *targets,
                                         float dloss, int64_t N, int64_t V);

/* ---- the llama family (Llama, Qwen2, Qwen3; docs/engine.md "The llama family") ----
 * Linear layers there store weights as torch.nn.Linear does, [out, in]:
 *   out[N, OC] = inp[N, IC] @ w[OC, IC]^T + bias[OC]   (bias may be NULL) */
void dt_op_linear_t_forward(float *out, const float *inp, const float *w, const float *bias,
                            int64_t N, int64_t IC, int64_t OC);
/* dinp[N, IC] = dout @ w (or += when accumulate_dinp; dinp may be NULL = skip)
 * dw[OC, IC] += dout^T @ inp;  dbias[OC] += sum_n dout[n, :]  (dbias may be NULL) */
void dt_op_linear_t_backward(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int64_t N, int64_t IC, int64_t OC,
                             int accumulate_dinp);

/* RMSNorm over groups of D elements: row n holds nh groups, group h at
 * inp + n*stride + h*D (a whole row: nh = 1, D = C, stride = C; Qwen3's per-head
 * q / k norm: nh heads of D inside a packed qkv row). w [D] is shared by the nh
 * groups. out uses the same addressing (elements outside the groups untouched;
 * out may equal inp). rstd [N, nh] = 1 / sqrt(mean(x^2) + eps). */
void dt_op_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                           int64_t nh, int64_t D, int64_t stride, float eps);
/* dinp (same addressing) = or += (accumulate_dinp) the input gradient; dw [D] +=.
 * dinp may equal dout only when accumulate_dinp is 0. Deterministic: dw summed
 * over rows in a fixed order independent of the thread count. */
void dt_op_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, const float *rstd, int64_t N, int64_t nh, int64_t D,
                            int64_t stride, int accumulate_dinp);

/* Rotary position embedding (Su et al. 2021), HF's rotate-half convention: in
 * each of the first nh heads (D elements, D even) of every row of x [B, T, stride]
 * (row b*T + t at position t), for i < D/2 with c = cos[t, i], s = sin[t, i]:
 *   (x[i], x[i + D/2]) <- (x[i] c - x[i + D/2] s, x[i + D/2] c + x[i] s).
 * In place; cos, sin [T, D/2]. The backward is the inverse rotation (s -> -s),
 * applied in place to the gradient. */
void dt_op_rope_forward(float *x, const float *cos, const float *sin, int64_t B, int64_t T,
                        int64_t nh, int64_t D, int64_t stride);
void dt_op_rope_backward(float *dx, const float *cos, const float *sin, int64_t B, int64_t T,
                         int64_t nh, int64_t D, int64_t stride);

/* SwiGLU on the packed output of the fused gate | up projection:
 * gu [N, 2F] (row n: gate[0..F) then up[0..F)), out [N, F] = silu(gate) * up
 * (dt_swiglu). Backward: dgu [N, 2F] written (=) from dout [N, F]. */
void dt_op_swiglu_forward(float *out, const float *gu, int64_t N, int64_t F);
void dt_op_swiglu_backward(float *dgu, const float *dout, const float *gu, int64_t N, int64_t F);

/* Causal grouped-query attention (Ainslie et al. 2023) on SEPARATE q, k, v
 * tensors, each addressed by its own row stride (elements between token rows):
 *   q [B, T, Hq, D] at q + (b*T + t)*sq + h*D,  k, v [B, T, Hkv, D] likewise
 *   with sk, sv (a packed qkv row [q | k | v] is q = qkv, k = qkv + Hq*D,
 *   v = qkv + (Hq + Hkv)*D, sq = sk = sv = (Hq + 2 Hkv) D).
 * Query head h reads kv head h / (Hq / Hkv) (Hkv divides Hq). out [B, T, Hq*D]
 * (contiguous), scale 1 / sqrt(D). With Hq = Hkv = H, D = C / H and a packed
 * qkv this is dt_op_attention_forward_flash.
 * Flash: lse [B, Hq, T] as there. Backward: dq, dk, dv written (=), addressed
 * with the same strides as q, k, v (they may be one packed buffer); the k / v
 * gradients sum over the query heads of a group in head order (deterministic). */
void dt_op_attention_gqa_forward_flash(float *out, float *lse, const float *q, int64_t sq,
                                       const float *k, int64_t sk, const float *v, int64_t sv,
                                       int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
void dt_op_attention_gqa_backward_flash(float *dq, float *dk, float *dv, const float *dout,
                                        const float *q, int64_t sq, const float *k, int64_t sk,
                                        const float *v, int64_t sv, const float *out,
                                        const float *lse, int64_t B, int64_t T, int64_t Hq,
                                        int64_t Hkv, int64_t D);
/* Materialized: probs [B, Hq, T, T] saved (entries above the diagonal 0). */
void dt_op_attention_gqa_forward_probs(float *out, float *probs, const float *q, int64_t sq,
                                       const float *k, int64_t sk, const float *v, int64_t sv,
                                       int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
void dt_op_attention_gqa_backward_probs(float *dq, float *dk, float *dv, const float *dout,
                                        const float *q, int64_t sq, const float *k, int64_t sk,
                                        const float *v, int64_t sv, const float *probs, int64_t B,
                                        int64_t T, int64_t Hq, int64_t Hkv, int64_t D);

/* ---- misc -------------------------------------------------------------------- */
/* y += alpha * x */
void dt_op_axpy(float *y, const float *x, float alpha, int64_t n);
/* 1 if every element is finite */
int dt_op_all_finite(const float *x, int64_t n);

#endif
