/* test_objective_golden.c — one step of dtrun's rm and dpo objectives (engine/run/dt_objrun.h,
 * the code the trainer runs) against TRL 1.16's own code in torch on the same tiny Llama / Qwen3
 * and batch (tests/engine/golden/objective/<case>/golden.safetensors from
 * scripts/gen_objective_goldens.py): the loss, TRL's metrics and every parameter's gradient.
 *
 * The batch's pairs go through a pair shard (dt_pairshard_write) and the objective's own loader,
 * which walks them in its shuffled order: the loss and metrics are means and the gradients sums
 * over the pairs, so the order changes only their rounding. rmlora-FAM: rm under LoRA (PEFT's
 * SEQ_CLS: the score head trained whole as modules_to_save), the base read from the golden's
 * model/ and the adapters and score from the adapter/ PEFT saved (read by dt_adapter_read):
 * every adapter's and the score's gradient against PEFT + TRL's.
 * Usage: test_objective_golden SRCDIR GOLDEN_DIR CASE... (CASE: dpo-llama, rm-qwen3, ...) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/golden_util.h"
#include "dt_adapter.h"
#include "dt_ckpt.h"
#include "dt_comm.h"
#include "dt_lm.h"
#include "dt_objrun.h"
#include "dt_pairshard.h"
#include "dt_plan.h"
#include "dt_safetensors.h"

/* fp32 against TRL's fp32: the loss and metrics within 2e-6 relative (+ 1e-7), every gradient
 * within 1e-4 of its tensor's largest element (fp32 summation order over 2N x T rows) */
#define TOL_LOSS 2e-6
#define TOL_GRAD 1e-4

static int failures;

static void fail(const char *c, const char *what) {
    fprintf(stderr, "FAIL %s: %s\n", c, what);
    failures++;
}

static const void *tensor(const dt_st_file *f, const char *name, const char *c) {
    const dt_st_tensor *t = dt_st_find(f, name);
    if (!t) {
        fprintf(stderr, "FAIL %s: golden has no %s\n", c, name);
        exit(1);
    }
    return dt_st_data(f, t);
}

/* The trained set from PEFT's adapter directory: every trained tensor (lora_A / lora_B, the
 * score head of modules_to_save) by its engine name. */
static int load_adapter(dt_lm *g, const char *adir, const char *c, dt_error *err) {
    dt_adapter *a = NULL;
    if (dt_adapter_read(adir, &a, err)) return err->code;
    int rc = dt_adapter_cfg(a)->seq_cls ? DT_OK : dt_errorf(err, DT_EINVAL, "%s: task_type is not SEQ_CLS", adir);
    for (int i = 0; !rc && i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        const dt_adapter_entry *e = dt_adapter_find(a, t->name);
        if (!e || (size_t)(e->shape[0] * e->shape[1]) != t->numel)
            rc = dt_errorf(err, DT_EINVAL, "%s: %s: no %s of %zu elements", c, adir, t->name, t->numel);
        else dt_adapter_entry_f32(e, (float *)dt_lm_params(g) + t->offset);
    }
    dt_adapter_free(a);
    return rc;
}

/* The golden's pairs as a pair shard at path (pad id 0, vocab V). */
static void write_pairs(const dt_st_file *f, int64_t N, int64_t T, int64_t V, const char *path, const char *c) {
    const int32_t *pn = tensor(f, "pair.prompt_n", c), *len = tensor(f, "pair.len", c), *ids = tensor(f, "ids", c);
    dt_pair pairs[8];
    dt_pair_src src[8];
    dt_pairshard_header h = {.vocab = (uint64_t)V, .pad_id = 0, .eot_id = 0};
    dt_error err;
    for (int64_t i = 0; i < N; i++) {
        pairs[i].prompt_n = (size_t)pn[i];
        pairs[i].truncated = 0;
        for (int s = 0; s < 2; s++) {
            pairs[i].ids[s] = (int32_t *)(ids + (s * N + i) * T);
            pairs[i].n[s] = (size_t)len[s * N + i];
        }
        src[i] = (dt_pair_src){.line = (uint64_t)i + 1, .input = 0};
    }
    if (dt_pairshard_write(path, &h, pairs, src, (size_t)N, &err)) {
        fprintf(stderr, "FAIL %s: %s\n", c, err.msg);
        exit(1);
    }
}

static void run_case(const char *srcdir, const char *gdir, const char *c) {
    char gpath[DT_GOLDEN_PATH_MAX], mdir[DT_PATH_MAX], tmp[] = "/tmp/dt_objgold_XXXXXX", shard[64];
    dt_error err;
    dt_st_file *f = NULL;
    snprintf(gpath, sizeof gpath, "%s/%s/golden.safetensors", gdir, c);
    if (dt_st_open(gpath, &f, &err)) {
        fprintf(stderr, "FAIL %s: %s\n", c, err.msg);
        exit(1);
    }
    /* rm-FAM: the sequence classifier saved beside the golden; dpo-FAM[-moved]: the reference is
     * the family's checkpoint, the policy that checkpoint or (moved) the one saved beside it */
    const int lora = !strncmp(c, "rmlora-", 7), rm = lora || !strncmp(c, "rm-", 3), moved = strstr(c, "-moved") != NULL;
    const char *fam0 = strchr(c, '-') + 1;
    char fam[32], rdir[DT_PATH_MAX], adir[DT_PATH_MAX + 16];
    snprintf(fam, sizeof fam, "%.*s", (int)strcspn(fam0, "-"), fam0);
    snprintf(adir, sizeof adir, "%s/%s/adapter", gdir, c);
    snprintf(rdir, sizeof rdir, "%s/tests/kernels/golden/llama/%s", srcdir, fam);
    if (rm) snprintf(mdir, sizeof mdir, "%s/%s/model", gdir, c);
    else if (moved) snprintf(mdir, sizeof mdir, "%s/%s/policy", gdir, c);
    else snprintf(mdir, sizeof mdir, "%s", rdir);
    const dt_st_tensor *ids_t = dt_st_find(f, "ids");
    const int64_t N = ids_t->shape[0] / 2, T = ids_t->shape[1];
    /* the plan: tiny-cpu with this model, N pairs a micro-batch, fp32 */
    dt_plan plan;
    char pp[DT_GOLDEN_PATH_MAX];
    snprintf(pp, sizeof pp, "%s/configs/plans/tiny-cpu.json", srcdir);
    if (dt_plan_load(pp, &plan, &err)) {
        fprintf(stderr, "FAIL %s: %s\n", c, err.msg);
        exit(1);
    }
    golden_model_of(mdir, &plan.model);
    plan.batch.micro_batch = N;
    plan.batch.seq_len = T;
    plan.batch.grad_accum = 1;
    dt_precision_from_preset(DT_PREC_FP32, &plan.precision);
    dt_objective_defaults(rm ? DT_OBJ_RM : DT_OBJ_DPO, &plan.objective);
    if (lora) {   /* the golden's LoraConfig: r, alpha, dropout 0, the seven block linears */
        dt_finetune_defaults(DT_FT_LORA, &plan.finetune);
        plan.finetune.lora_rank = (int64_t)atof(dt_st_metadata(f, "lora_r"));
        plan.finetune.lora_alpha = atof(dt_st_metadata(f, "lora_alpha"));
        plan.finetune.lora_dropout = 0;
        plan.finetune.lora_target_all = 1;
    }
    snprintf(plan.output.init, sizeof plan.output.init, "%s", rm ? mdir : rdir);   /* dpo: the reference */
    if (!mkdtemp(tmp)) exit(1);
    snprintf(shard, sizeof shard, "%s/train-000000.bin", tmp);
    write_pairs(f, N, T, plan.model.vocab, shard, c);

    const dt_objrun_ops *ops = dt_objrun_for(plan.objective.kind);
    dt_model model = plan.model;
    ops->configure(&plan, &model);
    const dt_lm_options lo = {.B = 2 * N, .T = T, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU,
                              .finetune = lora ? &plan.finetune : NULL};
    dt_lm *g = NULL;
    dt_comm *comm = NULL;
    dt_objrun *o = NULL;
    double loss = 0;
    dt_objrun_metrics m = {0};
    int rc = dt_lm_create_opts(&model, &plan.precision, &lo, &g, &err);
    if (!rc && !lora) rc = dt_weights_load(g, &model, DT_DTYPE_FP32, mdir, &err);
    if (!rc && lora) rc = dt_weights_load_base(g, &model, DT_DTYPE_FP32, mdir, &err);
    if (!rc && lora) rc = load_adapter(g, adir, c, &err);
    if (!rc && ops->check(&plan, &err)) rc = err.code;
    if (!rc) rc = dt_comm_init_self(&comm, &err);
    const dt_objrun_ctx ctx = {.plan = &plan, .model = &model, .comm = comm, .rank = 0, .world = 1,
                               .train_path = tmp, .valid_path = ""};
    if (!rc) rc = ops->open(&ctx, g, &o, &err);
    if (!rc) {
        dt_lm_zero_grad(g);
        rc = ops->micro(o, g, 1.0f, &loss, &err);
    }
    if (!rc) rc = ops->step_metrics(o, &m, &err);
    if (rc) {
        fprintf(stderr, "FAIL %s: %s\n", c, err.msg);
        exit(1);
    }
    /* loss and metrics (m.value[0] is the loss, then TRL's metrics in the golden's order) */
    const float *gl = tensor(f, "loss", c), *gm = tensor(f, "metrics", c);
    const dt_st_tensor *mt = dt_st_find(f, "metrics");
    char msg[DT_ST_NAME_MAX * 2];
    if (fabs(loss - gl[0]) > TOL_LOSS * fabs(gl[0]) + 1e-7) {
        snprintf(msg, sizeof msg, "loss %.9g vs TRL's %.9g", loss, (double)gl[0]);
        fail(c, msg);
    }
    double worst_m = 0;
    for (int64_t i = 0; i < mt->shape[0]; i++) {
        double e = fabs(m.value[1 + i] - gm[i]);
        if (e > TOL_LOSS * fabs(gm[i]) + 1e-6) {
            snprintf(msg, sizeof msg, "%s %.9g vs TRL's %.9g", m.name[1 + i], m.value[1 + i], (double)gm[i]);
            fail(c, msg);
        }
        if (e > worst_m) worst_m = e;
    }
    /* every parameter's gradient */
    const float *grads = dt_lm_grads(g);
    double worst = 0;
    int ntens = 0;
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        char name[DT_ST_NAME_MAX + 16];
        snprintf(name, sizeof name, "grad.%s%s", dt_lm_hf_prefix(g), t->name);
        const dt_st_tensor *gt = dt_st_find(f, name);
        if (!gt && !strcmp(t->name, "lm_head.weight"))   /* tied in transformers: one tensor */
            continue;
        if (!gt || (size_t)((gt->end - gt->begin) / sizeof(float)) != t->numel) {
            snprintf(msg, sizeof msg, "golden has no %s of %zu elements", name, t->numel);
            fail(c, msg);
            continue;
        }
        double ref_max = 0, e = golden_max_abs_diff(grads + t->offset, dt_st_data(f, gt), t->numel, &ref_max);
        double rel = ref_max > 0 ? e / ref_max : e;
        if (!(rel <= TOL_GRAD)) {
            snprintf(msg, sizeof msg, "%s: max |diff| %.3g, %.3g of its largest element %.3g", t->name, e, rel, ref_max);
            fail(c, msg);
        }
        if (rel > worst) worst = rel;
        ntens++;
    }
    printf("%s %s: loss %.9g (TRL %.9g), %lld metrics within %.2g, %d gradients within %.2g of their largest "
           "element\n", failures ? "FAIL" : "ok  ", c, loss, (double)gl[0], (long long)mt->shape[0], worst_m, ntens,
           worst);
    ops->free(o);
    dt_comm_free(comm);
    dt_lm_free(g);
    dt_st_close(f);
    unlink(shard);
    rmdir(tmp);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s SRCDIR GOLDEN_DIR CASE...\n", argv[0]);
        return 2;
    }
    for (int i = 3; i < argc; i++) run_case(argv[1], argv[2], argv[i]);
    if (failures) return 1;
    printf("PASS\n");
    return 0;
}
