/* Precision presets: bytes per parameter (docs/models.md "Precision presets"), names,
 * DeepSpeed fp16 defaults. */
#include "dt_precision.h"
#include "dt_test.h"

int main(void) {
    dt_error err = {0};
    dt_precision p;
    /* preset, param / grad / optimizer bytes */
    static const struct { dt_precision_preset preset; const char *name; int pb, gb, ob, master; } t[] = {
        {DT_PREC_MIXED_BF16, "mixed-bf16", 2, 2, 12, 1},
        {DT_PREC_MIXED_FP16, "mixed-fp16", 2, 2, 12, 1},
        {DT_PREC_PURE_BF16, "pure-bf16", 2, 2, 4, 0},
        {DT_PREC_FP32, "fp32", 4, 4, 8, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        dt_precision_from_preset(t[i].preset, &p);
        CHECK(p.preset == t[i].preset);
        CHECK_EQ_I64(dt_precision_param_bytes(&p), t[i].pb);
        CHECK_EQ_I64(dt_precision_grad_bytes(&p), t[i].gb);
        CHECK_EQ_I64(dt_precision_optimizer_bytes(&p), t[i].ob);
        CHECK_EQ_I64(p.has_master, t[i].master);
        CHECK_EQ_I64(dt_dtype_size(p.activation), dt_dtype_size(p.param));
        CHECK_STR(dt_precision_preset_name(t[i].preset), t[i].name);
        dt_precision_preset back;
        CHECK_EQ_I64(dt_precision_parse_preset(t[i].name, &back, &err), DT_OK);
        CHECK(back == t[i].preset);
    }
    /* ZeRO paper: 2 + 2 + K = 16 bytes per parameter with K = 12 */
    dt_precision_from_preset(DT_PREC_MIXED_FP16, &p);
    CHECK_EQ_I64(dt_precision_param_bytes(&p) + dt_precision_grad_bytes(&p) +
                     dt_precision_optimizer_bytes(&p), 16);
    CHECK(p.param == DT_DTYPE_FP16 && p.master == DT_DTYPE_FP32 && p.moment == DT_DTYPE_FP32);
    /* DeepSpeed fp16 defaults: dynamic scaling from 2^16, window 1000, hysteresis 2, floor 1 */
    CHECK_NEAR(p.loss_scale, 0.0, 0);
    CHECK_EQ_I64(p.initial_scale_power, 16);
    CHECK_EQ_I64(p.loss_scale_window, 1000);
    CHECK_EQ_I64(p.hysteresis, 2);
    CHECK_NEAR(p.min_loss_scale, 1.0, 0);
    /* bf16 / fp32: no loss scaling (static 1.0) */
    dt_precision_from_preset(DT_PREC_MIXED_BF16, &p);
    CHECK_NEAR(p.loss_scale, 1.0, 0);
    CHECK(p.param == DT_DTYPE_BF16 && p.grad == DT_DTYPE_BF16);
    dt_precision_from_preset(DT_PREC_PURE_BF16, &p);
    CHECK(p.moment == DT_DTYPE_BF16);

    /* overrides: fp32 gradient accumulation with bf16 params */
    dt_precision_from_preset(DT_PREC_MIXED_BF16, &p);
    p.grad = DT_DTYPE_FP32;
    CHECK_EQ_I64(dt_precision_grad_bytes(&p), 4);
    CHECK_EQ_I64(dt_precision_param_bytes(&p), 2);

    dt_precision_preset pp;
    CHECK_EQ_I64(dt_precision_parse_preset("Mixed-BF16", &pp, &err), DT_OK);
    CHECK(pp == DT_PREC_MIXED_BF16);
    CHECK_EQ_I64(dt_precision_parse_preset("PURE-bf16", &pp, &err), DT_OK);
    CHECK(pp == DT_PREC_PURE_BF16);
    CHECK_EQ_I64(dt_precision_parse_preset("bf16", &pp, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "'bf16'") && strstr(err.msg, "mixed-bf16, mixed-fp16, pure-bf16, fp32"));
    CHECK_EQ_I64(dt_precision_parse_preset(NULL, &pp, &err), DT_EINVAL);

    dt_dtype d;
    CHECK_EQ_I64(dt_dtype_parse("FP32", &d, &err), DT_OK);
    CHECK(d == DT_DTYPE_FP32);
    CHECK_EQ_I64(dt_dtype_parse("bfloat16", &d, &err), DT_OK);
    CHECK(d == DT_DTYPE_BF16);
    CHECK_EQ_I64(dt_dtype_parse("fp16", &d, &err), DT_OK);
    CHECK(d == DT_DTYPE_FP16);
    CHECK_EQ_I64(dt_dtype_parse("int8", &d, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "'int8'") != NULL);
    CHECK_STR(dt_dtype_name(DT_DTYPE_BF16), "bf16");
    CHECK_EQ_I64(dt_dtype_size(DT_DTYPE_FP16), 2);
    CHECK_EQ_I64(dt_dtype_size(DT_DTYPE_FP32), 4);

    TEST_MAIN_END();
}
