/* megatron.c — Megatron-LM's own terms in the layout model (dt_megatron.h).
 * Sources: NVIDIA/Megatron-LM megatron/training/arguments.py (--bf16 forces
 * accumulate_allreduce_grads_in_fp32), megatron/core/distributed/param_and_grad_buffer.py
 * (the contiguous grad buffer the DP collectives run on, in fp32 or the param dtype),
 * megatron/training/theoretical_memory_usage.py (18 bytes / parameter, 6 + 12/d with the
 * distributed optimizer: 2 bf16 weights + 4 fp32 grads + 12 optimizer bytes sharded);
 * Narayanan et al. SC'21 (arXiv 2104.04473) §4.1 (scatter-gather pipeline sends). */
#include "dt_megatron.h"

#include <stdio.h>

/* fp32: Megatron-LM's main gradients with --bf16 (arguments.py) and its loss's logits. */
#define DT_MG_FP32_BYTES 4

static int is_megatron(const dt_plan *p) { return p->runtime.kind == DT_RUNTIME_MEGATRON; }

int64_t dt_mg_grad_bytes(const dt_plan *p) {
    const dt_precision *pr = &p->precision;
    if (is_megatron(p) && pr->param == DT_DTYPE_BF16) return DT_MG_FP32_BYTES;
    return dt_precision_grad_bytes(pr);
}

int64_t dt_mg_bucket_bytes(const dt_plan *p, int64_t psi) {
    const int st = p->parallel.zero_stage;
    if (is_megatron(p) || (st != 1 && st != 2)) return 0;
    const int64_t elems = p->parallel.reduce_bucket_elems < psi ? p->parallel.reduce_bucket_elems : psi;
    return dt_precision_grad_bytes(&p->precision) * elems;
}

int64_t dt_mg_p2p_split(const dt_plan *p, int64_t tp, int sp) {
    return (is_megatron(p) || sp) && tp > 1 ? tp : 1;
}

int64_t dt_mg_logit_bytes(const dt_plan *p, int64_t e) {
    /* megatron/core/tensor_parallel/cross_entropy.py: .float(), torch.exp(out=), div_,
     * ctx.save_for_backward(exp_logits, ...) */
    if (is_megatron(p) && p->runtime.fused_loss) return p->runtime.upcast_logits ? DT_MG_FP32_BYTES : e;
    return e + (p->runtime.upcast_logits ? DT_MG_FP32_BYTES : 0);
}

void dt_mg_describe(const dt_plan *p, char *buf, size_t n) {
    if (n) buf[0] = 0;
    if (!is_megatron(p)) return;
    const int64_t gb = dt_mg_grad_bytes(p);
    snprintf(buf, n, "gradient buffer %s (%lld B/param%s); data parallelism: %s",
             gb == DT_MG_FP32_BYTES ? "fp32" : dt_dtype_name(p->precision.param), (long long)gb,
             gb == DT_MG_FP32_BYTES && p->precision.param == DT_DTYPE_BF16
                 ? ": --bf16 accumulates and reduces gradients in fp32" : "",
             p->parallel.zero_stage == 1 ? "the distributed optimizer (--use-distributed-optimizer: fp32 main "
                                           "parameters and Adam states sharded over the DP group)"
                                         : "DDP (every DP rank keeps the whole optimizer)");
}
