/* test_pgroup.c — a model's parameter groups under each fine-tuning method
 * (models/pgroup.c): LoRA counts against PEFT's get_nb_trainable_parameters
 * (tests/models/golden/peft_counts.txt, scripts/gen_peft_count_goldens.py), full
 * fine-tuning against dt_model_params for every catalog model, freeze's layer ranges and
 * modules, QLoRA's storage split and bytes, the activation rules, and the one-line
 * refusals of settings a model cannot take. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_model.h"
#include "dt_pgroup.h"
#include "dt_test.h"

static dt_model model(const char *name) {
    dt_model m;
    dt_error e = {0};
    if (dt_model_resolve(name, &m, &e)) fprintf(stderr, "%s\n", e.msg);
    return m;
}

static int64_t trainable(const dt_pgroups *g) {
    return dt_pgroups_elems(g, DT_TRAIN_TRAINED) + dt_pgroups_elems(g, DT_TRAIN_ADAPTER);
}
static int64_t all(const dt_pgroups *g) { return trainable(g) + dt_pgroups_elems(g, DT_TRAIN_FROZEN); }

static void lora(dt_finetune *ft, int64_t r, const char *targets, const char *save) {
    dt_error e = {0};
    dt_finetune_defaults(DT_FT_LORA, ft);
    ft->lora_rank = r;
    ft->lora_target_all = !strcmp(targets, "all");
    if (!ft->lora_target_all) CHECK(dt_ft_names_parse(targets, "targets", &ft->lora_target, &e) == DT_OK);
    if (strcmp(save, "-")) CHECK(dt_ft_names_parse(save, "save", &ft->modules_to_save, &e) == DT_OK);
}

static void peft_golden(const char *path) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[512];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char name[64], targets[256], save[256];
        long long r, tr, tot;
        if (sscanf(line, "%63s %lld %255s %255s %lld %lld", name, &r, targets, save, &tr, &tot) != 6) continue;
        dt_model m = model(name);
        dt_finetune ft;
        lora(&ft, r, targets, save);
        dt_pgroups g;
        dt_error e = {0};
        int rc = dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e);
        if (rc) fprintf(stderr, "%s: %s\n", name, e.msg);
        CHECK(rc == DT_OK);
        if (trainable(&g) != tr || all(&g) != tot)
            fprintf(stderr, "%s r%lld %s save %s: ours %" PRId64 " / %" PRId64 ", peft %lld / %lld\n", name, r, targets,
                    save, trainable(&g), all(&g), tr, tot);
        CHECK_EQ_I64(trainable(&g), tr);
        CHECK_EQ_I64(all(&g), tot);
        cases++;
    }
    fclose(f);
    CHECK(cases >= 10);
}

/* full fine-tuning: every parameter trained, exactly the model's count */
static void full_counts(void) {
    dt_finetune ft;
    memset(&ft, 0, sizeof ft);
    for (int i = 0; i < dt_model_catalog_count(); i++) {
        dt_model m = model(dt_model_catalog_name(i));
        dt_pgroups g;
        dt_error e = {0};
        CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
        CHECK_EQ_I64(dt_pgroups_elems(&g, DT_TRAIN_TRAINED), dt_model_params(&m));
        CHECK_EQ_I64(dt_pgroups_elems(&g, DT_TRAIN_FROZEN), 0);
        CHECK_EQ_I64(dt_pgroups_bytes(&g, DT_TRAIN_TRAINED), 2 * dt_model_params(&m));
        CHECK_EQ_I64(dt_pgroups_first_trained_layer(&g), 0);
    }
}

static void freeze(void) {
    dt_model m = model("llama-3.1-8b");
    dt_finetune ft;
    dt_pgroups g;
    dt_error e = {0};
    dt_finetune_defaults(DT_FT_FREEZE, &ft);   /* the last 2 blocks */
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
    CHECK_EQ_I64(dt_pgroups_elems(&g, DT_TRAIN_TRAINED), 2 * dt_model_block_params(&m));
    CHECK_EQ_I64(dt_pgroups_first_trained_layer(&g), 30);
    ft.trainable_layers = -3;   /* the first 3 */
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
    CHECK_EQ_I64(dt_pgroups_elems(&g, DT_TRAIN_TRAINED), 3 * dt_model_block_params(&m));
    CHECK_EQ_I64(dt_pgroups_first_trained_layer(&g), 0);
    /* the MLPs of the last 4 blocks, and lm_head and the final norm whole */
    ft.trainable_layers = 4;
    CHECK(dt_ft_names_parse("mlp,lm_head,norm", "m", &ft.trainable_modules, &e) == DT_OK);
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
    const int64_t mlp = 3 * m.hidden * m.ffn;
    CHECK_EQ_I64(dt_pgroups_elems(&g, DT_TRAIN_TRAINED), 4 * mlp + m.vocab * m.hidden + m.hidden);
    CHECK_EQ_I64(dt_pgroups_elems(&g, DT_TRAIN_TRAINED) + dt_pgroups_elems(&g, DT_TRAIN_FROZEN), dt_model_params(&m));
    /* out of range, unknown module: one line each */
    ft.trainable_modules.n = 0;
    ft.trainable_layers = 33;
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "--trainable-layers 33") && strstr(e.msg, "32 blocks") && !strchr(e.msg, '\n'));
    ft.trainable_layers = -33;
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_EINVAL);
    ft.trainable_layers = 2;
    CHECK(dt_ft_names_parse("c_attn", "m", &ft.trainable_modules, &e) == DT_OK);
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "--trainable-modules c_attn") && strstr(e.msg, "self_attn.q_proj"));
}

static void lora_refusals(void) {
    dt_model m = model("llama-tiny");   /* h 64, k/v out 2 x 16 = 32 */
    dt_finetune ft;
    dt_pgroups g;
    dt_error e = {0};
    lora(&ft, 33, "all", "-");
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "--lora-rank 33") && strstr(e.msg, "k_proj") && strstr(e.msg, "32"));
    lora(&ft, 32, "all", "-");
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
    lora(&ft, 0, "all", "-");
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "rank 0") != NULL);
    lora(&ft, 8, "q_proj,c_attn", "-");
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "--lora-target c_attn") && strstr(e.msg, "llama") && strstr(e.msg, "down_proj"));
    dt_model gpt = model("gpt2-tiny");
    lora(&ft, 8, "q_proj", "-");
    CHECK(dt_model_pgroups(&gpt, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "c_attn") != NULL);
}

/* QLoRA: the blocks' linears in NF4 + double quantisation, the rest bf16; bytes exact */
static void qlora(void) {
    dt_model m = model("llama-3.1-8b");
    dt_finetune ft;
    dt_pgroups g;
    dt_error e = {0};
    dt_finetune_defaults(DT_FT_QLORA, &ft);
    ft.lora_rank = 16;
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
    const int64_t lin = m.n_layer * dt_model_block_matmul_params(&m);
    CHECK_EQ_I64(dt_pgroups_quantized_elems(&g), lin);
    CHECK_EQ_I64(dt_pgroups_elems(&g, DT_TRAIN_ADAPTER), 2 * 20971520);
    CHECK_EQ_I64(dt_pgroups_largest_quantized(&g), m.hidden * m.ffn);
    /* a 4096 x 4096 NF4 weight with double quantisation: 8388608 packed + 64 code book +
     * 262144 codes + 1024 x 4 nested absmax + 1024 map + 4 offset */
    CHECK_EQ_I64(dt_storage_tensor_bytes(DT_STORAGE_NF4, 4096, 4096, 1, 64), 8655940);
    CHECK_EQ_I64(dt_storage_tensor_bytes(DT_STORAGE_NF4, 4096, 4096, 0, 64), 8388608 + 64 + 4 * 262144);
    CHECK_EQ_I64(dt_storage_tensor_bytes(DT_STORAGE_INT8, 4096, 1024, 0, 64), 4096 * 1024 + 4 * 4096);
    /* frozen bytes: the linears at ~0.516 B, everything else (embeddings, norms, lm_head) bf16 */
    const int64_t rest = dt_model_params(&m) - lin;
    const int64_t fb = dt_pgroups_bytes(&g, DT_TRAIN_FROZEN);
    CHECK(fb > 2 * rest + lin / 2 && fb < 2 * rest + lin * 53 / 100);
    ft.upcast_unquantized = 1;   /* prepare_model_for_kbit_training: the rest in fp32 */
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
    CHECK_EQ_I64(dt_pgroups_bytes(&g, DT_TRAIN_FROZEN) - fb, 2 * rest);
}

/* What a block keeps: LoRA on q,v with dropout 0 keeps the full set minus down_proj's input
 * and the MLP norm's output (neither kept by anything), plus r per adapted linear. */
static void saved_rules(void) {
    dt_model m = model("llama-tiny");
    dt_finetune ft;
    dt_pgroups g;
    dt_error e = {0};
    dt_ft_saved s;
    lora(&ft, 8, "q_proj,v_proj", "-");
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
    dt_pgroups_block_saved(&m, &g, &ft, 0, 1, 1, &s);
    CHECK_EQ_I64(s.dropped, m.ffn + m.hidden);
    CHECK_EQ_I64(s.lora_rank, 2 * 8);
    CHECK_EQ_I64(s.lora_dropout_in, 0);
    ft.lora_dropout = 0.1;   /* each adapted linear keeps dropout(x) instead: x is no longer kept */
    dt_pgroups_block_saved(&m, &g, &ft, 0, 1, 1, &s);
    CHECK_EQ_I64(s.dropped, m.ffn + 2 * m.hidden);
    CHECK_EQ_I64(s.lora_dropout_in, 2 * m.hidden);
    /* all linears, no dropout: every linear input kept, nothing dropped */
    lora(&ft, 8, "all", "-");
    CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
    dt_pgroups_block_saved(&m, &g, &ft, 1, 1, 1, &s);
    CHECK_EQ_I64(s.dropped, 0);
    CHECK_EQ_I64(s.lora_rank, 7 * 8);
    CHECK_EQ_I64(dt_pgroups_head_dropped(&m, &g), m.hidden);   /* frozen head: its input not kept */
    /* r (in + out) per linear: q, o 64 -> 64; k, v 64 -> 32; gate, up, down 64 <-> ffn */
    CHECK_EQ_I64(dt_pgroups_block_lora_macs(&g, 0), 8 * (2 * (64 + 64) + 2 * (64 + 32) + 3 * (64 + m.ffn)));
}

/* QLoRA's frozen base against the bytes transformers + bitsandbytes hold after loading
 * the probe model in 4 bits (parameters and QuantState tensors; qlora_bytes.txt). */
static void qlora_golden(const char *golden, const char *config) {
    FILE *f = fopen(golden, "r");
    CHECK(f != NULL);
    if (!f) return;
    dt_model m = model(config);
    char line[256], qt[8];
    int dq, cases = 0;
    long long bytes;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || sscanf(line, "%7s %d %lld", qt, &dq, &bytes) != 3) continue;
        dt_finetune ft;
        dt_pgroups g;
        dt_error e = {0};
        dt_finetune_defaults(DT_FT_QLORA, &ft);
        ft.double_quant = dq;
        CHECK(dt_storage_parse(qt, &ft.quant, &e) == DT_OK);
        CHECK(dt_model_pgroups(&m, &ft, DT_DTYPE_BF16, DT_ROLE_POLICY, &g, &e) == DT_OK);
        CHECK_EQ_I64(dt_pgroups_bytes(&g, DT_TRAIN_FROZEN), bytes);
        cases++;
    }
    fclose(f);
    CHECK(cases == 4);
}

int main(int argc, char **argv) {
    CHECK(argc == 4);
    if (argc == 4) peft_golden(argv[1]), qlora_golden(argv[2], argv[3]);
    full_counts();
    freeze();
    lora_refusals();
    qlora();
    saved_rules();
    TEST_MAIN_END();
}
