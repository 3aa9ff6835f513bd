/* dt_megatron.h — Megatron-LM's own terms in the layout model (runtime megatron;
 * docs/parallelism.md "Runtimes"). A library header: nothing here prints. */
#ifndef DT_MEGATRON_H
#define DT_MEGATRON_H

#include <stddef.h>
#include <stdint.h>

#include "dt_plan.h"

/* Bytes per element of the gradients a rank keeps: Megatron-LM's grad buffer is fp32 with
 * --bf16 (arguments.py turns --accumulate-allreduce-grads-in-fp32 on), the parameter dtype
 * otherwise; other runtimes: the plan's gradient dtype. */
int64_t dt_mg_grad_bytes(const dt_plan *p);
/* Bytes of the ZeRO gradient bucket the DP collectives stage through: none under Megatron-LM
 * (its collectives run on the contiguous grad buffer itself); reduce_bucket_elems x the
 * gradient bytes (at most psi elements) for ZeRO-1 / 2 elsewhere, 0 for stages 0 and 3. */
int64_t dt_mg_bucket_bytes(const dt_plan *p, int64_t psi);
/* The divisor of the activation a pipeline send carries: t under Megatron-LM (SC21 §4.1
 * scatter-gather: each TP rank sends 1/t) or with sequence parallelism, 1 otherwise. */
int64_t dt_mg_p2p_split(const dt_plan *p, int64_t tp, int sp);
/* Bytes per logit element the last stage keeps for the loss, e the activation bytes: under
 * Megatron-LM only the fp32 copy (vocab_parallel_cross_entropy upcasts, exponentiates and
 * normalises in place and saves that one tensor; nothing saves the 16-bit logits); elsewhere
 * the 16-bit logits plus the fp32 copy when the loss upcasts. */
int64_t dt_mg_logit_bytes(const dt_plan *p, int64_t e);
/* One line for show / estimate: the gradient buffer's dtype and the DP scheme of a megatron
 * plan ("" for other runtimes). */
void dt_mg_describe(const dt_plan *p, char *buf, size_t n);

#endif
