/* dt_precision.h — precision presets and the bytes they imply.
 *
 * Bytes per parameter (param / grad / optimizer state), docs/models.md "Precision presets":
 *   mixed-bf16, mixed-fp16 : 2 / 2 / 12  (fp32 master + fp32 m + fp32 v; ZeRO paper K=12)
 *   pure-bf16              : 2 / 2 / 4   (bf16 m and v, no master; the users' 32B / 8-GPU
 *                                        table, docs/memory-model.md)
 *   fp32                   : 4 / 4 / 8   (params are the master; fp32 m and v)
 * Any width can be overridden (e.g. fp32 gradient accumulation with bf16 params). */
#ifndef DT_PRECISION_H
#define DT_PRECISION_H

#include "dt_error.h"

typedef enum { DT_DTYPE_FP32 = 0, DT_DTYPE_BF16 = 1, DT_DTYPE_FP16 = 2 } dt_dtype;

typedef enum {
    DT_PREC_MIXED_BF16 = 0,
    DT_PREC_MIXED_FP16 = 1,
    DT_PREC_PURE_BF16 = 2,
    DT_PREC_FP32 = 3
} dt_precision_preset;

typedef struct dt_precision {
    dt_precision_preset preset;
    dt_dtype param;       /* working weights used by forward/backward */
    dt_dtype grad;        /* gradient storage / accumulation */
    int has_master;       /* 1: a separate fp32 master copy lives in the optimizer state */
    dt_dtype master;      /* meaningful only when has_master */
    dt_dtype moment;      /* AdamW m and v */
    dt_dtype activation;  /* saved activations (== param dtype for the presets) */
    /* fp16 dynamic loss scaling, DeepSpeed "fp16" section semantics and defaults */
    double loss_scale;            /* 0 = dynamic; > 0 static scale */
    int initial_scale_power;      /* initial scale = 2^power (DeepSpeed default 16) */
    int loss_scale_window;        /* steps without overflow before doubling (1000) */
    int hysteresis;               /* overflows tolerated before halving (2) */
    double min_loss_scale;        /* floor (1) */
} dt_precision;

/* Fills every field from a preset (loss-scaling fields get DeepSpeed's defaults). */
void dt_precision_from_preset(dt_precision_preset preset, dt_precision *out);
int dt_precision_parse_preset(const char *s, dt_precision_preset *out, dt_error *err);
const char *dt_precision_preset_name(dt_precision_preset p);  /* "mixed-bf16", ... */
int dt_dtype_parse(const char *s, dt_dtype *out, dt_error *err); /* fp32|bf16|fp16 */
const char *dt_dtype_name(dt_dtype t);
int dt_dtype_size(dt_dtype t);                                 /* bytes per element */

/* Bytes per parameter of each model-state category under p. */
int dt_precision_param_bytes(const dt_precision *p);
int dt_precision_grad_bytes(const dt_precision *p);
int dt_precision_optimizer_bytes(const dt_precision *p);       /* master (if any) + 2 moments */

#endif
