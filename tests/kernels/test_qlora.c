/* test_qlora.c — dtrun's QLoRA against Hugging Face transformers + bitsandbytes (CPU) + PEFT:
 * tests/kernels/golden/qlora/ (scripts/gen_qlora_goldens.py). The bases are the llama-family
 * goldens' configs with intermediate 128 (tests/kernels/golden/qlora/base-{llama,qwen3}) read by name
 * (dt_weights_load_base): the blocks' linears quantised on load (NF4 with double quantisation,
 * and FP4 without), embeddings, norms and lm_head kept fp32; LoRA r 8, alpha 16 on every linear of
 * the blocks, set to the golden's init.<name>; compute fp32, and (the "-bf16" goldens, NF4 with
 * double quantisation on both bases) compute bf16 under mixed-bf16 as LLaMA-Factory runs it: the
 * base loaded bf16 (embeddings, norms, lm_head bf16, the linears quantised from the bf16-rounded
 * weights), each quantised weight dequantised to bf16 per use, bf16 activations, fp32 adapters.
 * Checked:
 *   q. / absmax. / nested_absmax. / offset.<W>   every quantised weight's bytes, bit for bit
 *                                             bitsandbytes' (Params4bit after the 4-bit load)
 *   dequant.<W>                               its dequantised values, equal (bitsandbytes' CPU
 *                                             kernel writes FP4's code 8 as +0.0, quant4.c -0.0)
 *   serialized.<W>                            the quant state's JSON a checkpoint writes, byte
 *                                             for byte QuantState.as_dict(packed=True)'s
 *   logits, loss, grad.<name>, step_losses, step_norms, after.<name>
 *                                             as test_lora.c (tests/kernels/lora_golden.h),
 *                                             5 steps of 2 micro-batches; the bf16 runs
 *                                             against ref.* (the same model in fp32) with
 *                                             lora_golden.h's bf16 bounds (2 x PEFT + autocast's
 *                                             own distance, capped at 8 x 2^-8 of the size)
 * the bytes of a bf16 checkpoint in three shards, quantised from the bf16 weights transformers
 * loads by default (qwen3-bf16-sharded-nf4-dq-bytes.safetensors); and what the engine holds
 * against what the planner counts (models/dt_pgroup.h): the frozen
 * bytes (quantised storage + the fp32 base set) and the dequantised weight's buffer; a checkpoint's
 * weights written and read back in bitsandbytes' serialised form, checked byte for byte and refused
 * when the quantisation differs.
 * Usage: test_kernels_qlora GOLDEN_DIR (tests/kernels/golden) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_ckpt.h"
#include "dt_device.h"
#include "dt_finetune.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_pgroup.h"
#include "dt_quant4.h"
#include "dt_quantbase.h"
#include "dt_test.h"
#include "lora_golden.h"

#define PATH_MAX_LEN 1024
#define LORA_TENSORS_PER_BLOCK 14   /* A and B of q, k, v, o, gate, up, down */
#define QUANT_TENSORS_PER_BLOCK 7   /* q, k, v, o, gate, up, down */

static void ft_of(dt_st_file *f, dt_finetune *ft) {
    dt_finetune_defaults(DT_FT_QLORA, ft);
    ft->lora_rank = (int64_t)lg_meta(f, "r");
    ft->lora_alpha = lg_meta(f, "alpha");
    ft->quant = strcmp(dt_st_metadata(f, "quant"), "fp4") ? DT_STORAGE_NF4 : DT_STORAGE_FP4;
    ft->double_quant = (int)lg_meta(f, "double_quant");
    ft->quant_block = (int64_t)lg_meta(f, "block");
    const char *cd = dt_st_metadata(f, "compute_dtype");
    ft->compute_dtype = cd && !strcmp(cd, "bf16") ? DT_DTYPE_BF16 : DT_DTYPE_FP32;
}

/* the precision QLoRA with ft's compute dtype runs under: fp32, or mixed-bf16 for bf16 compute */
static void prec_of(const dt_finetune *ft, dt_precision *pr) {
    dt_precision_from_preset(ft->compute_dtype == DT_DTYPE_BF16 ? DT_PREC_MIXED_BF16 : DT_PREC_FP32, pr);
}

/* a QLoRA model of m under ft (prec_of's precision, CPU), B x T; NULL with err set */
static dt_lm *qlora_model(const dt_model *m, const dt_finetune *ft, int64_t B, int64_t T, dt_error *err) {
    dt_precision pr;
    prec_of(ft, &pr);
    const dt_lm_options o = {.B = B, .T = T, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU, .finetune = ft};
    dt_lm *g = NULL;
    return dt_lm_create_opts(m, &pr, &o, &g, err) ? NULL : g;
}

static int bytes_equal(dt_st_file *f, const char *prefix, const char *name, const void *ours, size_t bytes) {
    char key[DT_ST_NAME_MAX];
    snprintf(key, sizeof key, "%s.%s", prefix, name);
    const dt_st_tensor *t = dt_st_find(f, key);
    return t && t->end - t->begin == bytes && !memcmp(dt_st_data(f, t), ours, bytes);
}

/* every quantised weight's state (and want_dequant of them dequantised, in the compute dtype cdt)
 * against bitsandbytes' */
static void check_bytes(dt_lm *g, dt_st_file *f, int want_dequant, dt_dtype cdt) {
    int bad = 0, dequantised = 0;
    for (int i = 0; i < dt_lm_num_quant_tensors(g); i++) {
        const char *w = dt_lm_quant_tensor(g, i)->name;
        dt_lm_qstate s;
        CHECK(dt_lm_quant_state(g, i, &s) == DT_OK);
        bad += !bytes_equal(f, "q", w, s.packed, (size_t)(s.n + 1) / 2);
        if (s.double_quant) {
            bad += !bytes_equal(f, "absmax", w, s.qabsmax, (size_t)s.nb);
            bad += !bytes_equal(f, "nested_absmax", w, s.nested_absmax, sizeof(float) * (size_t)s.nnb);
            bad += !bytes_equal(f, "offset", w, s.offset, sizeof(float));
        } else {
            bad += !bytes_equal(f, "absmax", w, s.absmax, sizeof(float) * (size_t)s.nb);
        }
        char key[DT_ST_NAME_MAX];
        snprintf(key, sizeof key, "dequant.%s", w);
        if (!dt_st_find(f, key)) continue;
        void *v = malloc(sizeof(float) * (size_t)s.n);   /* [n] of cdt */
        if (s.double_quant)
            dt_quant4_dequantize_nested_as(s.packed, s.qabsmax, s.nested_absmax, *s.offset, s.map, s.n,
                                           (dt_storage)s.fmt, s.block, cdt, v);
        else
            dt_quant4_dequantize_as(s.packed, s.absmax, s.n, (dt_storage)s.fmt, s.block, cdt, v);
        const float *want = lg_tensor(f, key, (uint64_t)s.n);   /* bf16 compute: the bf16 values widened */
        for (int64_t k = 0; k < s.n; k++)   /* == : a zero's sign aside (below) */
            bad += (cdt == DT_DTYPE_BF16 ? dt_bf16_to_f32(((const dt_bf16 *)v)[k]) : ((const float *)v)[k]) != want[k];
        free(v);
        dequantised++;
    }
    printf("  %d quantised weights: %d byte differences from bitsandbytes' (%d dequantised compared)\n",
           dt_lm_num_quant_tensors(g), bad, dequantised);
    CHECK_EQ_I64(bad, 0);
    CHECK_EQ_I64(dequantised, want_dequant);
}

/* the engine's memory against the planner's terms: the frozen base (fp32 tensors + quantised
 * storage) and the one dequantised weight */
static void check_memory(dt_lm *g, const dt_model *m, const dt_finetune *ft, const dt_precision *pr,
                         int64_t params_delta, int64_t buffers_delta) {
    dt_pgroups *pg = malloc(sizeof *pg);
    dt_error err = {0};
    CHECK(dt_model_pgroups(m, ft, pr->param, DT_ROLE_POLICY, pg, &err) == DT_OK);
    int64_t qbytes = 0, largest = 0;
    for (int i = 0; i < dt_lm_num_quant_tensors(g); i++) {
        dt_lm_qstate s;
        dt_lm_quant_state(g, i, &s);
        qbytes += dt_storage_tensor_bytes((dt_storage)s.fmt, s.rows, s.cols, s.double_quant, s.block);
        if (s.n > largest) largest = s.n;
    }
    /* the base set in the param dtype, the adapters fp32 (PEFT's autocast_adapter_dtype) */
    const int64_t frozen = (int64_t)dt_lm_num_base_params(g) * (int64_t)dt_dtype_size(pr->param) + qbytes;
    const int64_t dequant = largest * (int64_t)dt_dtype_size(ft->compute_dtype);
    CHECK_EQ_I64(frozen, dt_pgroups_bytes(pg, DT_TRAIN_FROZEN));
    CHECK_EQ_I64(params_delta, frozen + (int64_t)dt_lm_num_params(g) * 4);
    CHECK_EQ_I64(largest, dt_pgroups_largest_quantized(pg));
    CHECK(buffers_delta >= dequant);
    printf("  frozen bytes %lld (quantised %lld) = the planner's; dequantised weight %lld bytes (%s)\n",
           (long long)frozen, (long long)qbytes, (long long)dequant, dt_dtype_name(ft->compute_dtype));
    free(pg);
}

/* a checkpoint's weights: written, read back in bitsandbytes' form into a second model, equal;
 * the JSON beside each weight is bitsandbytes' own; a model quantised otherwise is refused */
static void check_serialised(dt_lm *g, const dt_model *m, const dt_finetune *ft, const lg_case *c) {
    char file[] = "/tmp/dt_test_qlora_XXXXXX";
    int fd = mkstemp(file);
    CHECK(fd >= 0);
    close(fd);
    dt_error err = {0};
    dt_precision pr;
    prec_of(ft, &pr);
    CHECK(dt_weights_save(g, pr.param, file, &err) == DT_OK);
    dt_st_file *w;
    CHECK(dt_st_open(file, &w, &err) == DT_OK);
    int json = 0;
    for (int i = 0; i < dt_lm_num_quant_tensors(g); i++) {
        const char *name = dt_lm_quant_tensor(g, i)->name;
        char key[DT_ST_NAME_MAX], gkey[DT_ST_NAME_MAX];
        snprintf(gkey, sizeof gkey, "serialized.%s", name);
        const dt_st_tensor *gt = dt_st_find(c->f, gkey);
        if (!gt) continue;
        snprintf(key, sizeof key, "%s.quant_state.bitsandbytes__%s", name, dt_storage_name(ft->quant));
        const dt_st_tensor *t = dt_st_find(w, key);
        CHECK(t && t->end - t->begin == gt->end - gt->begin &&
              !memcmp(dt_st_data(w, t), dt_st_data(c->f, gt), (size_t)(t->end - t->begin)));
        json++;
    }
    CHECK_EQ_I64(json, 2);
    dt_st_close(w);
    dt_lm *g2 = qlora_model(m, ft, 1, c->T, &err);
    CHECK(g2 && dt_weights_load_base(g2, m, pr.param, file, &err) == DT_OK);
    CHECK(dt_quantbase_check(g2, pr.param, file, &err) == DT_OK);
    int same = 1;
    for (int i = 0; i < dt_lm_num_quant_tensors(g); i++) {
        dt_lm_qstate a, b;
        dt_lm_quant_state(g, i, &a);
        dt_lm_quant_state(g2, i, &b);
        same &= !memcmp(a.packed, b.packed, (size_t)(a.n + 1) / 2) && !memcmp(a.code, b.code, sizeof(float) * 16);
        if (a.double_quant)
            same &= !memcmp(a.qabsmax, b.qabsmax, (size_t)a.nb) && *a.offset == *b.offset &&
                    !memcmp(a.nested_absmax, b.nested_absmax, sizeof(float) * (size_t)a.nnb);
        else
            same &= !memcmp(a.absmax, b.absmax, sizeof(float) * (size_t)a.nb);
    }
    CHECK(same);
    dt_lm_free(g2);
    /* another format or double quantisation: the stored state is refused by name */
    dt_finetune other = *ft;
    other.quant = ft->quant == DT_STORAGE_NF4 ? DT_STORAGE_FP4 : DT_STORAGE_NF4;
    other.double_quant = !ft->double_quant;
    CHECK((g2 = qlora_model(m, &other, 1, c->T, &err)) != NULL);
    dt_error e2 = {0};
    CHECK(dt_weights_load_base(g2, m, pr.param, file, &e2) == DT_EINVAL);
    printf("  another quantisation refused: %s\n", e2.msg);
    CHECK(strstr(e2.msg, "quant") != NULL);
    CHECK(dt_lm_init_base_random(g2, 1, &err) == DT_OK);
    e2 = (dt_error){0};
    CHECK(dt_quantbase_check(g2, pr.param, file, &e2) == DT_EINVAL);
    dt_lm_free(g2);
    unlink(file);
}

/* the golden case `name`-`quant` over its base (qlora/base-`name`) */
static lg_case open_case(const char *golden_dir, const char *name, const char *quant, dt_model *m, char *dir,
                         char *label) {
    char file[PATH_MAX_LEN];
    snprintf(dir, PATH_MAX_LEN, "%s/qlora/base-%s", golden_dir, name);
    snprintf(file, sizeof file, "%s/qlora/%s-%s.safetensors", golden_dir, name, quant);
    snprintf(label, PATH_MAX_LEN, "%s %s", name, quant);
    return lg_open(dir, file, label, m);
}

static void check_case(const char *golden_dir, const char *name, const char *quant) {
    char dir[PATH_MAX_LEN], label[PATH_MAX_LEN];
    dt_model m;
    const lg_case c = open_case(golden_dir, name, quant, &m, dir, label);
    dt_error err = {0};
    dt_finetune ft;
    ft_of(c.f, &ft);
    dt_precision pr, trained;
    prec_of(&ft, &pr);
    dt_lm_trained_precision(&pr, &ft, &trained);   /* the adapters fp32, no master copy */
    CHECK(trained.param == DT_DTYPE_FP32 && trained.grad == DT_DTYPE_FP32 && !trained.has_master);
    const dt_lm_options o = {.B = c.B, .T = c.T, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU, .finetune = &ft};
    const dt_device_ops *dev;
    CHECK(dt_device_get(DT_DEVICE_CPU, 0, &dev, &err) == DT_OK);
    const int64_t p0 = dev->mem_current(DT_POOL_DEVICE, DT_MEM_PARAMS);
    const int64_t b0 = dev->mem_current(DT_POOL_DEVICE, DT_MEM_BUFFERS);
    dt_lm *g;
    if (dt_lm_create_opts(&m, &pr, &o, &g, &err) || dt_weights_load_base(g, &m, pr.param, dir, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        exit(1);
    }
    printf("%s:\n", label);
    CHECK_EQ_I64(dt_lm_num_tensors(g), LORA_TENSORS_PER_BLOCK * m.n_layer);
    CHECK_EQ_I64(dt_lm_num_quant_tensors(g), QUANT_TENSORS_PER_BLOCK * m.n_layer);
    check_memory(g, &m, &ft, &pr, dev->mem_current(DT_POOL_DEVICE, DT_MEM_PARAMS) - p0,
                 dev->mem_current(DT_POOL_DEVICE, DT_MEM_BUFFERS) - b0);
    check_bytes(g, c.f, 2, ft.compute_dtype);
    lg_set_adapters(g, c.f);
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(c.B * c.T)), *tg = malloc(sizeof(int32_t) * (size_t)(c.B * c.T));
    CHECK(c.bf16 == (ft.compute_dtype == DT_DTYPE_BF16));
    const double loss0 = lg_check_forward(g, &c, in, tg);
    lg_check_training(g, &c, &trained, loss0, in, tg);
    check_serialised(g, &m, &ft, &c);
    free(in);
    free(tg);
    dt_st_close(c.f);
    dt_lm_free(g);
}

/* a bf16 checkpoint in three shards (tests/kernels/golden/llama/qwen3-bf16-sharded) quantised on
 * load: the bytes bitsandbytes gives the bf16 weights transformers loads (its default dtype) */
static void check_bf16(const char *golden_dir) {
    char dir[PATH_MAX_LEN], file[PATH_MAX_LEN];
    snprintf(file, sizeof file, "%s/qlora/qwen3-bf16-sharded-nf4-dq-bytes.safetensors", golden_dir);
    snprintf(dir, sizeof dir, "%s/llama/qwen3-bf16-sharded", golden_dir);
    dt_finetune ft;   /* the defaults: nf4, double quantisation, block 64 */
    dt_finetune_defaults(DT_FT_QLORA, &ft);
    ft.compute_dtype = DT_DTYPE_FP32;
    dt_model m;
    golden_model_of(dir, &m);
    dt_error err = {0};
    dt_st_file *f = NULL;
    CHECK(dt_st_open(file, &f, &err) == DT_OK);
    dt_lm *g = qlora_model(&m, &ft, 1, 4, &err);
    CHECK(g && dt_weights_load_base(g, &m, DT_DTYPE_FP32, dir, &err) == DT_OK);
    if (f && g && !err.code) {
        printf("qwen3 bf16, 3 shards:\n");
        check_bytes(g, f, 0, DT_DTYPE_FP32);
    }
    dt_st_close(f);
    dt_lm_free(g);
}

/* what of QLoRA is not built: one line each naming the setting and the fix */
static void check_refusals(void) {
    const struct {
        dt_storage quant;
        dt_dtype compute;
        dt_precision_preset prec;
        dt_device device;
        int upcast;
        const char *want;
    } cases[] = {{DT_STORAGE_INT8, DT_DTYPE_FP32, DT_PREC_FP32, DT_DEVICE_CPU, 0, "--quant nf4 or fp4"},
                 /* PEFT's prepare_model_for_kbit_training upcast: fp32 parameters, bf16 compute */
                 {DT_STORAGE_NF4, DT_DTYPE_BF16, DT_PREC_FP32, DT_DEVICE_CPU, 0, "--precision mixed-bf16"},
                 {DT_STORAGE_NF4, DT_DTYPE_FP16, DT_PREC_MIXED_FP16, DT_DEVICE_CPU, 0, "--compute-dtype bf16"},
                 {DT_STORAGE_NF4, DT_DTYPE_FP32, DT_PREC_MIXED_BF16, DT_DEVICE_CPU, 0, "--compute-dtype bf16"},
                 {DT_STORAGE_NF4, DT_DTYPE_BF16, DT_PREC_MIXED_BF16, DT_DEVICE_CPU, 1, "drop --prepare-kbit"},
                 {DT_STORAGE_NF4, DT_DTYPE_FP32, DT_PREC_FP32, DT_DEVICE_CUDA, 0, "QLoRA on the CUDA device"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_finetune ft;
        dt_precision pr;
        dt_precision_from_preset(cases[i].prec, &pr);
        dt_finetune_defaults(DT_FT_QLORA, &ft);
        ft.quant = cases[i].quant;
        ft.compute_dtype = cases[i].compute;
        ft.upcast_unquantized = cases[i].upcast;
        dt_error err = {0};
        CHECK(dt_lm_check_method(&pr, cases[i].device, &ft, &err) == DT_EINVAL);
        CHECK(strstr(err.msg, cases[i].want) != NULL);
        CHECK(strchr(err.msg, '\n') == NULL);
        printf("refused: %s\n", err.msg);
    }
    /* built: fp32 compute over fp32, bf16 compute over mixed-bf16 */
    const struct {
        dt_dtype compute;
        dt_precision_preset prec;
    } built[] = {{DT_DTYPE_FP32, DT_PREC_FP32}, {DT_DTYPE_BF16, DT_PREC_MIXED_BF16}};
    for (size_t i = 0; i < sizeof built / sizeof built[0]; i++) {
        dt_finetune ft;
        dt_precision pr;
        dt_finetune_defaults(DT_FT_QLORA, &ft);
        ft.compute_dtype = built[i].compute;
        dt_precision_from_preset(built[i].prec, &pr);
        dt_error err = {0};
        CHECK(dt_lm_check_method(&pr, DT_DEVICE_CPU, &ft, &err) == DT_OK);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_kernels_qlora GOLDEN_DIR\n");
        return 2;
    }
    check_case(argv[1], "llama", "nf4-dq");
    check_case(argv[1], "qwen3", "nf4-dq");
    check_case(argv[1], "llama", "fp4");
    check_case(argv[1], "llama", "nf4-dq-bf16");
    check_case(argv[1], "qwen3", "nf4-dq-bf16");
    check_bf16(argv[1]);
    check_refusals();
    TEST_MAIN_END();
}
