/* activations.c — what full fine-tuning keeps for backward: one block's activations,
 * checkpointed or not, and the head's, bytes per rank (dt_activations.h), under dtrun's
 * engine and under Hugging Face's model code (runtimes deepspeed / fsdp). Every term and
 * its source: docs/activations.md, docs/memory-model.md "Runtime profiles".
 *
 * Notation: B micro-batch, T sequence, H query heads, a activation bytes. */
#include "dt_activations.h"

#include "dt_model.h"
#include "memory_internal.h"

/* Attention bytes kept for backward in one block: flash keeps the fp32
 * log-sum-exp (B·H·T), materialized keeps the probabilities (B·H·T·T), with H the
 * query heads (dt_saved.attn_rows). */
static int64_t attention_saved(const dt_plan *p, int64_t H) {
    const int64_t B = p->batch.micro_batch, T = p->batch.seq_len;
    if (p->activations.attention == DT_ATTN_MATERIALIZED) return smul(smul3(act_bytes(p), B, H), smul(T, T));
    return smul3(STAT_BYTES, smul(B, H), T);
}

/* Per-token elements and statistics of dt_model_block_saved / dt_model_head_saved as
 * bytes for the plan's B·T tokens (docs/activations.md). */
static int64_t saved_bytes(const dt_plan *p, const dt_saved *s) {
    const int64_t BT = smul(p->batch.micro_batch, p->batch.seq_len);
    return sadd(smul3(act_bytes(p), BT, s->elems), smul3(s->stats, STAT_BYTES, BT));
}

/* One full (not checkpointed) block: what the family description says its modules
 * keep (models/family.c), plus the attention kernel's own state. */
static int64_t full_block(const dt_plan *p) {
    dt_saved s;
    dt_model_block_saved(&p->model, &s);
    return sadd(saved_bytes(p, &s), attention_saved(p, s.attn_rows));
}

/* Head: the final norm's input (the last residual) and statistics, and the lm_head's
 * input (the final norm's output). */
static int64_t head_saved(const dt_plan *p) {
    dt_saved s;
    dt_model_head_saved(&p->model, &s);
    return saved_bytes(p, &s);
}

/* ---- runtimes deepspeed / fsdp: Hugging Face Transformers' model code ----
 * (docs/memory-model.md "Runtime profiles"; every term below is what HF's modules keep
 * beyond the family description's "every op keeps its inputs"). */

/* torch's native_dropout keeps a bool mask, one byte per element (aten/src/ATen/native/
 * Dropout.cpp); Korthikanti et al. 2022 §4.1 count the same 1 byte. */
#define DROPOUT_MASK_BYTES 1

/* The eager kernel keeps, per element of the B·H·T² scores (HF eager_attention_forward,
 * modeling_llama.py / modeling_gpt2.py): softmax's result (fp32 with upcast_softmax, else
 * the activation dtype); the PV matmul's input in the activation dtype when it is another
 * tensor (the cast of an fp32 softmax, or dropout's output); dropout's mask. That is
 * Korthikanti et al.'s 5as²b (2 + 1 + 2 bytes) for fp16 with dropout and no upcast.
 * Selective recompute (§5) keeps none of it (q, k, v are kept anyway); sdpa / flash keep
 * the fp32 log-sum-exp (B·H·T), as dtrun's flash attention does. */
static int64_t hf_attention_saved(const dt_plan *p, int64_t H, int selective) {
    const dt_runtime *rt = &p->runtime;
    const int64_t B = p->batch.micro_batch, T = p->batch.seq_len, a = act_bytes(p);
    if (rt->attention != DT_KERNEL_EAGER) return smul3(STAT_BYTES, smul(B, H), T);
    if (selective) return 0;
    int64_t per = rt->upcast_softmax ? FP32_BYTES : a;
    if (rt->dropout) per += DROPOUT_MASK_BYTES;
    if (rt->dropout || rt->upcast_softmax) per += a;
    return smul(smul3(per, B, H), smul(T, T));
}

/* Elements normalised by the RMSNorms of one block (HF LlamaRMSNorm upcasts its input to
 * fp32 and keeps that copy plus the normalised product before the weight: 4 + a bytes in
 * place of the a-byte input the description counts, +4 bytes per element). */
static int64_t block_rms_width(const dt_model_desc *d) {
    const dt_sublayer_desc *subs[2] = {&d->block.attn, &d->block.mlp};
    int64_t w = 0;
    for (int k = 0; k < 2; k++) {
        if (subs[k]->norm.kind == DT_NORM_RMSNORM) w += subs[k]->norm.width * subs[k]->norm.rows;
        for (int i = 0; i < subs[k]->n_in_norm; i++)
            if (subs[k]->in_norm[i].kind == DT_NORM_RMSNORM) w += subs[k]->in_norm[i].width * subs[k]->in_norm[i].rows;
    }
    return w;
}

/* Bytes per token one block keeps beyond the description and the attention kernel:
 * dropout masks on the residual branches, fp32 RMSNorm inputs, the unfused activation's
 * intermediates. */
static int64_t hf_block_extra_per_token(const dt_plan *p) {
    const dt_runtime *rt = &p->runtime;
    dt_model_desc d;
    dt_model_describe(&p->model, &d);
    int64_t bytes = 0;
    if (rt->dropout) bytes += DROPOUT_MASK_BYTES * d.block.resid_dropouts * p->model.hidden;
    if (rt->upcast_norm) bytes += FP32_BYTES * block_rms_width(&d);
    if (rt->unfused_act) bytes += act_bytes(p) * dt_model_block_act_unfused(&p->model);
    return bytes;
}

static int64_t hf_full_block(const dt_plan *p, int selective) {
    dt_saved s;
    dt_model_block_saved(&p->model, &s);
    const int64_t BT = smul(p->batch.micro_batch, p->batch.seq_len);
    return sadd(sadd(saved_bytes(p, &s), hf_attention_saved(p, s.attn_rows, selective)),
                smul(BT, hf_block_extra_per_token(p)));
}

/* Head: the description's, the embedding dropout's mask, the final RMSNorm's fp32 input. */
static int64_t hf_head_saved(const dt_plan *p) {
    dt_model_desc d;
    dt_model_describe(&p->model, &d);
    const int64_t BT = smul(p->batch.micro_batch, p->batch.seq_len);
    int64_t per = 0;
    if (p->runtime.dropout) per += DROPOUT_MASK_BYTES * d.embed_dropout * p->model.hidden;
    if (p->runtime.upcast_norm && d.final_norm.kind == DT_NORM_RMSNORM)
        per += FP32_BYTES * d.final_norm.width * d.final_norm.rows;
    return sadd(head_saved(p), smul(BT, per));
}

/* What one block keeps, by runtime: a checkpointed block only its input x. */
static int64_t block_full(const dt_plan *p) {
    return hf_runtime(p) ? hf_full_block(p, p->activations.selective) : full_block(p);
}

int64_t dt_memory_activations_per_block(const dt_plan *p, int checkpointed) {
    if (checkpointed) /* a checkpointed block keeps only its input x */
        return smul3(act_bytes(p), smul(p->batch.micro_batch, p->batch.seq_len), p->model.hidden);
    return block_full(p);
}

int64_t dt_memory_head_activations(const dt_plan *p) { return hf_runtime(p) ? hf_head_saved(p) : head_saved(p); }
