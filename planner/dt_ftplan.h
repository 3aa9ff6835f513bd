/* dt_ftplan.h — what a plan's fine-tuning method (plan.finetune, common/dt_finetune.h)
 * does to memory and time: the parameter groups (models/dt_pgroup.h) turned into bytes
 * per rank and seconds per micro-step. Every term and its source: docs/finetune.md and
 * docs/memory-model.md "Fine-tuning". memory.c and timeterms.c call these for plans whose
 * method is not full; full plans never reach them (their predictions are unchanged). The
 * method's arithmetic stands on dt_activations.h (a block's and the head's activations)
 * and dt_gemmtime.h (a GEMM on its shape); nothing here calls back into either caller. */
#ifndef DT_FTPLAN_H
#define DT_FTPLAN_H

#include "dt_pgroup.h"
#include "dt_plan.h"
#include "dt_timeterms.h"

typedef struct dt_ftplan {
    dt_pgroups g;                       /* the language model's (role policy) */
    dt_pgroups tower, projector;        /* a vision-language plan's (role vision; n 0 otherwise) */
    int64_t trained, adapter, frozen;   /* elements */
    int64_t frozen_bytes;               /* as stored: quantisation state included */
    int64_t first_layer;                /* the first block backward reaches (n_layer: none) */
    int grad_into_first;                /* a gradient flows into that block's input */
    int64_t dequant_elems;              /* the largest quantised weight: what one use dequantises */
} dt_ftplan;

/* 1 when p's method is not full fine-tuning, or p has a vision tower (its stage freezes parts). */
int dt_ftplan_active(const dt_plan *p);
/* The groups and sums of p's method; fails (DT_EINVAL, one line) on settings the model
 * cannot take. Backward reaches the input of every block when the embeddings are trained
 * or, under the deepspeed / fsdp runtimes with checkpointing, because Hugging Face's
 * gradient checkpointing makes the embeddings' output require a gradient
 * (enable_input_require_grads: PEFT prepare_model_for_kbit_training, LLaMA-Factory
 * model_utils/checkpointing.py). */
int dt_ftplan_of(const dt_plan *p, dt_ftplan *out, dt_error *err);
/* A vision-language plan (docs/vlm.md): the tower's and projector's groups join the sums
 * (trained ones the ZeRO-partitioned state, frozen ones the frozen base), the stage pretrain
 * freezes every group of the language model, and backward reaches the input of the first
 * block (the projected image features there need a gradient), as LLaVA's stage 1 runs. */
/* Elements that carry a gradient and optimizer state (trained + adapter); 0 for full. */
int64_t dt_ftplan_state_elems(const dt_plan *p);

/* The terms the method changes, bytes per rank (device) unless named host. */
typedef struct dt_ft_terms {
    int64_t frozen_weights;      /* the frozen base in its storage, ZeRO-3: this rank's partition */
    int64_t frozen_host;         /* per node, ZeRO-3 with offload_param: the frozen partitions on the host */
    int64_t adapter_weights, adapter_grads, adapter_optimizer;   /* the adapters' state (dtrun: PEFT's fp32) */
    int64_t adapter_delta[3];    /* what the adapters' dtype adds to params / grads / optimizer beyond the
                                  * precision's bytes the state terms were counted with (dtrun only) */
    int64_t act_skipped;         /* activations of the blocks below the first trainable one: not kept */
    int64_t act_dropped;         /* linear inputs and norm outputs no gradient needs: not kept */
    int64_t act_lora;            /* x A^T of every adapted linear (lora_B's input) */
    int64_t act_dropout;         /* dropout(x) and its one-byte mask per adapted linear (lora_dropout > 0) */
    int64_t dequant;             /* the transient dequantised weight of a 4-bit / 8-bit linear */
    int64_t lora_scratch;        /* dtrun: LoRA's backward scratch [BT, r] and, with dropout, dropout(x) of the
                                  * widest linear input [BT, max(C, QD, F)], fp32 (engine/model/lm.c) */
} dt_ft_terms;
int dt_ftplan_terms(const dt_plan *p, const dt_ftplan *ft, dt_ft_terms *out);

/* Activations kept for backward, all blocks + head, bytes per rank (dt_memory_activations
 * for a fine-tuning plan). */
int64_t dt_ftplan_activations(const dt_plan *p, const dt_ftplan *ft, int64_t ckpt_layers);
/* Adds the method's device terms to one phase's breakdown whose state terms were counted
 * with dt_ftplan_state_elems parameters: frozen weights, the adapters' dtype, the
 * dequantisation transient (the host's frozen partitions are dt_ft_terms.frozen_host). */
void dt_ftplan_add_memory(const dt_plan *p, const dt_ftplan *ft, dt_mem_breakdown *m);
/* Runtime dtrun on the CPU engine: bytes of the fp32 working copies its 16-bit storage needs
 * under the method (engine/model/lm.c dt_lm_create_opts): pw (a whole block, adapters included,
 * or gpt2's wpe) when the trained set is 16-bit or the base is; pwb (the largest group's frozen
 * part) when the base is 16-bit; gw and the token chains only when the trained gradients are
 * 16-bit (not for LoRA's fp32 adapters); lora_x32 [BT, widest input] for LoRA under bf16
 * linears. 0 under fp32. */
int64_t dt_ftplan_dtrun_convert_bytes(const dt_plan *p, const dt_ftplan *ft);
/* The precision dtrun's trained set runs in (what its ZeRO engine sizes its unit buffers
 * by): the plan's, but fp32 weights and gradients and no master copy for LoRA's fp32 adapters
 * under a 16-bit precision (PEFT's autocast_adapter_dtype; the engine's
 * dt_lm_trained_precision). The plan's for the other runtimes. */
void dt_ftplan_dtrun_trained_precision(const dt_plan *p, dt_precision *out);

/* Compute of one micro-step under the method (docs/finetune.md "Time"): the full model's
 * backward less the blocks below the first trainable one, the frozen linears' weight-gradient
 * GEMMs (on their shapes where the GPU model times GEMMs by shape) and a frozen lm_head's;
 * plus LoRA's GEMMs and their launches and the dequantisation traffic of quantised weights. */
void dt_ftplan_adjust_compute(const dt_plan *p, const dt_ftplan *ft, dt_time_compute *c);

/* Stored bytes of every parameter (frozen as stored, trained and adapter in the precision's
 * weight dtype): what ZeRO-3 with parameter offload fetches per pass, all ranks together. */
int64_t dt_ftplan_param_bytes(const dt_plan *p);
/* The method's training FLOPs over full fine-tuning's (forward + the backward it runs + LoRA's),
 * for MFU; 1 for full. */
double dt_ftplan_flops_ratio(const dt_plan *p);

/* A one-line summary of the method for tables: "lora r16 alpha 32 all", "qlora nf4+dq r16 ...". */
void dt_ftplan_describe(const dt_finetune *ft, char *buf, size_t n);

#endif
