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
 * wte [V, C], wpe [maxT, C], out [B*T, C] */
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

/* ---- bias gradient: db[OC] += sum_n dout[n, :] ------------------------------- */
void dt_op_bias_backward(float *db, const float *dout, int64_t N, int64_t OC);

/* ---- fused classifier + cross-entropy ---------------------------------------
 * Tied classifier: logits[N, V] = x[N, C] @ wte[V, C]^T (the caller runs the GEMM,
 * possibly in chunks over V). These two ops work on the fp32 logits buffer.
 * Forward: lse[n] = log sum_v exp(logits[n, v]); losses[n] = lse[n] - logits[n, target]
 * (targets may be NULL: only lse). Returns the mean loss over N (double accumulation). */
double dt_op_crossentropy_forward(float *lse, float *losses, const float *logits,
                                  const int32_t *targets, int64_t N, int64_t V);
/* In place: logits[n, v] <- dloss * (softmax(logits[n])[v] - [v == target[n]]). */
void dt_op_crossentropy_backward_inplace(float *logits, const float *lse, const int32_t *targets,
                                         float dloss, int64_t N, int64_t V);

/* ---- misc -------------------------------------------------------------------- */
/* y += alpha * x */
void dt_op_axpy(float *y, const float *x, float alpha, int64_t n);
/* 1 if every element is finite */
int dt_op_all_finite(const float *x, int64_t n);

#endif
