/* merge.c — `dtrun merge --base HFDIR --adapter DIR -o OUTDIR [--max-shard-size 5GB]
 * [--dtype bf16|fp16|fp32]`: a LoRA adapter in PEFT's format merged into its base model, written
 * as a Hugging Face model directory (engine/store/dt_adapter.h dt_adapter_merge;
 * docs/finetune.md "Merging an adapter", docs/dtrun.md). */
#include <stdio.h>
#include <string.h>

#include "dt_adapter.h"
#include "dt_dtrun_cli.h"
#include "dt_precision.h"
#include "dt_units.h"

/* transformers' PreTrainedModel.save_pretrained max_shard_size default ("5GB" = 5 * 10^9 bytes). */
#define DT_MERGE_DEFAULT_SHARD "5GB"

static void merge_usage(FILE *f) {
    fprintf(f,
            "usage: dtrun merge --base HFDIR --adapter DIR -o OUTDIR [--max-shard-size 5GB] [--dtype bf16|fp16|fp32]\n"
            "Merges a LoRA adapter (PEFT's adapter_config.json + adapter_model.safetensors, as dtrun or\n"
            "PeftModel.save_pretrained wrote it) into its base model: W' = W + scale * B A (GPT-2's Conv1D:\n"
            "the transpose), scale = lora_alpha / r (use_rslora: / sqrt(r)), in fp32, rounded once to the\n"
            "output dtype (default: each tensor's dtype in HFDIR); modules_to_save replace their base tensors.\n"
            "OUTDIR (new, or an empty directory) gets config.json, the tokenizer and other files of HFDIR and\n"
            "the weights in safetensors shards of at most --max-shard-size (5GB = 5e9 bytes, 5G = 5 GiB),\n"
            "with model.safetensors.index.json, as transformers' save_pretrained writes them.\n");
}

int dt_cmd_merge(int argc, char **argv) {
    const char *base = NULL, *adapter = NULL, *out = NULL, *shard = DT_MERGE_DEFAULT_SHARD, *dtype = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            merge_usage(stdout);
            return 0;
        }
        const char **slot = !strcmp(a, "--base") ? &base
                            : !strcmp(a, "--adapter") ? &adapter
                            : (!strcmp(a, "-o") || !strcmp(a, "--out")) ? &out
                            : !strcmp(a, "--max-shard-size") ? &shard
                            : !strcmp(a, "--dtype") ? &dtype : NULL;
        if (!slot) return dt_cli_fail(2, "merge: unknown option '%s' (dtrun merge --help)", a);
        if (i + 1 >= argc) return dt_cli_fail(2, "merge: %s needs a value (dtrun merge --help)", a);
        *slot = argv[++i];
    }
    if (!base || !adapter || !out)
        return dt_cli_fail(2, "merge: needs --base HFDIR, --adapter DIR and -o OUTDIR (dtrun merge --help)");
    dt_error err = {0};
    dt_merge_opts o = {.out_dtype = -1};
    if (dt_parse_bytes(shard, "--max-shard-size", &o.max_shard_bytes, &err)) return dt_cli_fail_err(err.code, &err);
    if (dtype) {
        dt_dtype t;
        if (dt_dtype_parse(dtype, &t, &err)) {
            dt_error_prefix(&err, "merge: --dtype");
            return dt_cli_fail_err(err.code, &err);
        }
        o.out_dtype = (int)t;
    }
    if (dt_adapter_merge(base, adapter, out, &o, &err)) return dt_cli_fail_err(err.code, &err);
    printf("merged %s + %s -> %s\n", base, adapter, out);
    return 0;
}
