/* precision.c — precision presets and the bytes per parameter they imply.
 * Presets: dt_precision.h and docs/models.md "Precision presets". Loss-scaling
 * defaults: DeepSpeed's "fp16" section (deepspeed/runtime/constants.py). */
#include "dt_precision.h"

#include <stddef.h>
#include <strings.h>

/* DeepSpeed fp16 defaults: loss_scale 0 (dynamic), initial_scale_power 16,
 * loss_scale_window 1000, hysteresis 2, min_loss_scale 1. */
#define DS_FP16_LOSS_SCALE 0.0
#define DS_FP16_INITIAL_SCALE_POWER 16
#define DS_FP16_LOSS_SCALE_WINDOW 1000
#define DS_FP16_HYSTERESIS 2
#define DS_FP16_MIN_LOSS_SCALE 1.0
/* bf16 / fp32 need no scaling: DeepSpeed's bf16 optimizer reports a static loss scale
 * of 1.0 (initial_scale_power 0). */
#define DT_NO_SCALING_LOSS_SCALE 1.0
#define DT_NO_SCALING_POWER 0

/* AdamW keeps two moments (m and v) per parameter. */
#define DT_ADAM_MOMENTS 2

static const char *const preset_names[] = {"mixed-bf16", "mixed-fp16", "pure-bf16", "fp32"};
#define N_PRESETS ((int)(sizeof preset_names / sizeof preset_names[0]))

void dt_precision_from_preset(dt_precision_preset preset, dt_precision *out) {
    dt_precision p = {0};
    p.preset = preset;
    switch (preset) {
    case DT_PREC_MIXED_FP16:   /* fp16 weights/grads, fp32 master + moments (ZeRO paper K = 12) */
        p.param = p.grad = p.activation = DT_DTYPE_FP16;
        p.has_master = 1;
        p.master = p.moment = DT_DTYPE_FP32;
        break;
    case DT_PREC_PURE_BF16:    /* all bf16, no master copy (the users' 32B table, docs/memory-model.md) */
        p.param = p.grad = p.activation = p.moment = DT_DTYPE_BF16;
        p.has_master = 0;
        p.master = DT_DTYPE_BF16;
        break;
    case DT_PREC_FP32:         /* the fp32 params are their own master */
        p.param = p.grad = p.activation = p.moment = DT_DTYPE_FP32;
        p.has_master = 0;
        p.master = DT_DTYPE_FP32;
        break;
    case DT_PREC_MIXED_BF16:
    default:                   /* bf16 weights/grads, fp32 master + moments */
        p.preset = DT_PREC_MIXED_BF16;
        p.param = p.grad = p.activation = DT_DTYPE_BF16;
        p.has_master = 1;
        p.master = p.moment = DT_DTYPE_FP32;
        break;
    }
    int fp16 = p.param == DT_DTYPE_FP16;
    p.loss_scale = fp16 ? DS_FP16_LOSS_SCALE : DT_NO_SCALING_LOSS_SCALE;
    p.initial_scale_power = fp16 ? DS_FP16_INITIAL_SCALE_POWER : DT_NO_SCALING_POWER;
    p.loss_scale_window = DS_FP16_LOSS_SCALE_WINDOW;
    p.hysteresis = DS_FP16_HYSTERESIS;
    p.min_loss_scale = DS_FP16_MIN_LOSS_SCALE;
    *out = p;
}

int dt_precision_parse_preset(const char *s, dt_precision_preset *out, dt_error *err) {
    for (int i = 0; s && i < N_PRESETS; i++) {
        if (strcasecmp(s, preset_names[i]) == 0) {
            *out = (dt_precision_preset)i;
            return DT_OK;
        }
    }
    return dt_errorf(err, DT_EINVAL,
                     "--precision: unknown preset '%s' (choices: mixed-bf16, mixed-fp16, pure-bf16, fp32)",
                     s ? s : "");
}

const char *dt_precision_preset_name(dt_precision_preset p) {
    return (int)p >= 0 && (int)p < N_PRESETS ? preset_names[p] : "?";
}

static const struct {
    const char *name;
    dt_dtype type;
} dtype_names[] = {
    {"fp32", DT_DTYPE_FP32}, {"bf16", DT_DTYPE_BF16}, {"fp16", DT_DTYPE_FP16},
    /* PyTorch / DeepSpeed spellings */
    {"float32", DT_DTYPE_FP32}, {"bfloat16", DT_DTYPE_BF16}, {"float16", DT_DTYPE_FP16},
    {"float", DT_DTYPE_FP32}, {"half", DT_DTYPE_FP16},
};

int dt_dtype_parse(const char *s, dt_dtype *out, dt_error *err) {
    for (size_t i = 0; s && i < sizeof dtype_names / sizeof dtype_names[0]; i++) {
        if (strcasecmp(s, dtype_names[i].name) == 0) {
            *out = dtype_names[i].type;
            return DT_OK;
        }
    }
    return dt_errorf(err, DT_EINVAL, "unknown data type '%s' (choices: fp32, bf16, fp16)",
                     s ? s : "");
}

const char *dt_dtype_name(dt_dtype t) {
    switch (t) {
    case DT_DTYPE_FP32: return "fp32";
    case DT_DTYPE_BF16: return "bf16";
    case DT_DTYPE_FP16: return "fp16";
    }
    return "?";
}

int dt_dtype_size(dt_dtype t) {
    switch (t) {
    case DT_DTYPE_FP32: return 4;
    case DT_DTYPE_BF16: return 2;
    case DT_DTYPE_FP16: return 2;
    }
    return 0;
}

int dt_precision_param_bytes(const dt_precision *p) { return dt_dtype_size(p->param); }

int dt_precision_grad_bytes(const dt_precision *p) { return dt_dtype_size(p->grad); }

int dt_precision_optimizer_bytes(const dt_precision *p) {
    return (p->has_master ? dt_dtype_size(p->master) : 0) + DT_ADAM_MOMENTS * dt_dtype_size(p->moment);
}
