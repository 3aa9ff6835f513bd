/* prepare.c — `dtrun prepare` (docs/data.md): text files, folders and JSONL into token
 * shards v2 with a train/validation split, through engine/data/dt_prepare.h. This file
 * reads the arguments, shows progress on a terminal and prints the summary; the engine
 * prints nothing. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_dtrun_cli.h"
#include "dt_consts.h"
#include "dt_error.h"
#include "dt_prepare.h"

/* a progress line at most this often (seconds) */
#define PROGRESS_INTERVAL_S 0.25

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) { g_stop = sig; }

static void prep_usage(FILE *f) {
    fprintf(f,
            "usage: dtrun prepare --tokenizer TOKENIZER.json|TOKENIZER.model --out DIR\n"
            "                     [--format text|jsonl|chat|llava|pairs|prompts] [--chat-template chatml|llama3]\n"
            "                     [--seq N (pairs, prompts)]\n"
            "                     [--val-fraction F] [--seed S] [--shard-tokens N] [--quiet] [--no-progress]\n"
            "                     [--image-folder DIR --processor-config preprocessor_config.json\n"
            "                      --model-config config.json --image-size N --image-aspect crop|pad\n"
            "                      --image-loader open|load_image\n"
            "                      --image-tokens N --image-token-id ID --on-bad-image stop|skip\n"
            "                      --max-image-pixels N] INPUT...\n"
            "Tokenizes INPUTs (files and folders, read recursively) into token shards under DIR:\n"
            "DIR/train/train-NNNNNN.bin, DIR/val/val-NNNNNN.bin and DIR/prepare.json (docs/data.md).\n"
            "  --format text     each file is a document (default)\n"
            "  --format jsonl    JSON Lines, {\"text\": ...} per line (pretraining)\n"
            "  --format chat     JSON Lines, {\"messages\": [{\"role\", \"content\"}...]} or\n"
            "                    {\"instruction\", \"input\", \"output\"} (SFT: only the assistant's tokens\n"
            "                    are trained, through a loss mask); --chat-template chatml (Qwen, default)\n"
            "                    or llama3\n"
            "  --format llava    LLaVA's JSON list of {\"id\", \"image\", \"conversations\": [{\"from\": human|gpt,\n"
            "                    \"value\"}]} (llava_v1_5_mix665k.json): chat as above, each <image> expanded\n"
            "                    to --image-tokens placeholders (default %d) of --image-token-id (default: the\n"
            "                    tokenizer's <image>), the images (relative to --image-folder) preprocessed as\n"
            "                    CLIPImageProcessor at --image-size (default %d) into pixel shards beside the\n"
            "                    token shards (docs/vlm-images.md); --image-aspect pad: LLaVA-1.5's training\n"
            "                    code (pad to a square of the mean colour first); --processor-config and\n"
            "                    --model-config take these from the Hugging Face model's own files (the\n"
            "                    flags override them); --image-loader load_image: transformers' load_image\n"
            "                    (EXIF orientation applied, alpha dropped) instead of PIL.Image.open\n"
            "                    (default); --on-bad-image stop (default:\n"
            "                    exit 2 naming the record) or skip (leave the record out, count it);\n"
            "                    --max-image-pixels (default %llu, PIL's MAX_IMAGE_PIXELS)\n"
            "  --format pairs    JSON Lines of preference pairs for rm / dpo: {\"prompt\", \"chosen\", \"rejected\"}\n"
            "                    (strings, or TRL's message lists), TRL's implicit-prompt {\"chosen\",\n"
            "                    \"rejected\"} chats, LLaMA-Factory's alpaca / sharegpt ranking records; tokenized\n"
            "                    as TRL's DPOTrainer does into pair shards (docs/objectives.md); --seq N: a\n"
            "                    prompt of N tokens or more is refused, a longer side cut to N\n"
            "  --format prompts  JSON Lines of prompt records for grpo: {\"prompt\": str or messages,\n"
            "                    \"answer\": str or number (optional: the built-in exact-answer reward)} into\n"
            "                    prompt shards; --seq N: a prompt of N tokens or more is refused\n"
            "  --val-fraction F  documents for validation (default %g, none for a single document;\n"
            "                    0: none)\n"
            "  --seed S          the shuffle and split (default %llu)\n"
            "  --shard-tokens N  tokens per shard (default %lld)\n"
            "Documents are shuffled by the seed and separated by the tokenizer's end-of-text token.\n"
            "DIR must be absent, empty or a previous prepare's output (which is replaced).\n"
            "Threads: OMP_NUM_THREADS (default: all cores).\n",
            DT_PREP_IMAGE_TOKENS, DT_PREP_IMAGE_SIZE, (unsigned long long)DT_IMAGE_MAX_PIXELS, DT_PREP_VAL_FRACTION,
            (unsigned long long)DT_PREP_SEED, (long long)DT_PREP_SHARD_TOKENS);
}

typedef struct {
    double last;    /* seconds of the last line printed */
    int printed;    /* a line is on the terminal */
} progress_state;

/* 1.23M, 456.7k, 12 */
static void human(double v, char *out, size_t n) {
    if (v >= 1e9) snprintf(out, n, "%.2fG", v / 1e9);
    else if (v >= 1e6) snprintf(out, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(out, n, "%.1fk", v / 1e3);
    else snprintf(out, n, "%.0f", v);
}

static void on_progress(const dt_prep_progress *p, void *arg) {
    progress_state *s = arg;
    if (p->seconds - s->last < PROGRESS_INTERVAL_S && !(p->phase == 1 && p->bytes_done == p->bytes_total)) return;
    s->last = p->seconds;
    char tok[32], rate[32], docs[32];
    human((double)p->docs, docs, sizeof docs);
    if (p->phase == 0) {
        fprintf(stderr, "\rprepare: indexing %.1f MiB, %s documents\033[K", (double)p->bytes_done / DT_MIB, docs);
    } else {
        double tps = p->seconds > 0 ? (double)p->tokens / p->seconds : 0;
        double bps = p->seconds > 0 ? (double)p->bytes_done / p->seconds : 0;
        double eta = bps > 0 ? (double)(p->bytes_total - p->bytes_done) / bps : 0;
        human((double)p->tokens, tok, sizeof tok);
        human(tps, rate, sizeof rate);
        fprintf(stderr, "\rprepare: %.1f/%.1f MiB, %s tokens, %s tok/s, ETA %dm%02ds\033[K",
                (double)p->bytes_done / DT_MIB, (double)p->bytes_total / DT_MIB, tok, rate, (int)(eta / 60),
                (int)fmod(eta, 60));
    }
    s->printed = 1;
}

/* strict number parsing: the whole argument */
static int parse_u64(const char *s, unsigned long long *v) {
    char *end;
    errno = 0;
    if (!*s || *s == '-') return 0;
    *v = strtoull(s, &end, 10);
    return !errno && !*end;
}

static int parse_double(const char *s, double *v) {
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return *s && !errno && !*end && isfinite(*v);
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "dtrun prepare: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see dtrun prepare --help)\n");
    return 2;
}

int dt_cmd_prepare(int argc, char **argv) {
    dt_prep_opts o;
    dt_prep_defaults(&o);
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    if (!inputs) {
        fprintf(stderr, "dtrun prepare: out of memory\n");
        return 1;
    }
    int quiet = 0, no_progress = 0, n = 0, rc2 = 0;
    const char *proc_cfg = NULL, *model_cfg = NULL;
    int set_size = 0, set_tokens = 0, set_id = 0;   /* flags given: they override the configs */
    for (int i = 1; i < argc && !rc2; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long long u = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            prep_usage(stdout);
            free(inputs);
            return 0;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (!strcmp(a, "--no-progress")) {
            no_progress = 1;
        } else if (!strcmp(a, "--tokenizer") && v) {
            o.tokenizer = argv[++i];
        } else if (!strcmp(a, "--out") && v) {
            o.out = argv[++i];
        } else if (!strcmp(a, "--format") && v) {
            i++;
            if (!strcmp(v, "text")) o.format = DT_PREP_TEXT;
            else if (!strcmp(v, "jsonl")) o.format = DT_PREP_JSONL;
            else if (!strcmp(v, "chat")) o.format = DT_PREP_CHAT;
            else if (!strcmp(v, "llava")) o.format = DT_PREP_LLAVA;
            else if (!strcmp(v, "pairs")) o.format = DT_PREP_PAIRS;
            else if (!strcmp(v, "prompts")) o.format = DT_PREP_PROMPTS;
            else rc2 = usage_error("--format '%s': use text, jsonl, chat, llava, pairs or prompts", v);
        } else if (!strcmp(a, "--seq") && v) {
            i++;
            if (!parse_u64(v, &u) || u < 1 || u > INT32_MAX) rc2 = usage_error("--seq '%s': tokens, >= 1", v);
            o.max_len = (int64_t)u;
        } else if (!strcmp(a, "--chat-template") && v) {
            i++;
            if (!strcmp(v, "chatml")) o.chat = DT_CHAT_CHATML;
            else if (!strcmp(v, "llama3")) o.chat = DT_CHAT_LLAMA3;
            else rc2 = usage_error("--chat-template '%s': use chatml or llama3", v);
        } else if (!strcmp(a, "--val-fraction") && v) {
            i++;
            if (!parse_double(v, &o.val_fraction) || o.val_fraction < 0 || o.val_fraction >= 1)
                rc2 = usage_error("--val-fraction '%s': a number in [0, 1)", v);
        } else if (!strcmp(a, "--seed") && v) {
            i++;
            if (!parse_u64(v, &u)) rc2 = usage_error("--seed '%s': a non-negative integer", v);
            o.seed = u;
        } else if (!strcmp(a, "--shard-tokens") && v) {
            i++;
            if (!parse_u64(v, &u) || u < 1 || u > INT64_MAX) rc2 = usage_error("--shard-tokens '%s': an integer >= 1", v);
            o.shard_tokens = (int64_t)u;
        } else if (!strcmp(a, "--processor-config") && v) {
            proc_cfg = argv[++i];
        } else if (!strcmp(a, "--model-config") && v) {
            model_cfg = argv[++i];
        } else if (!strcmp(a, "--image-folder") && v) {
            o.image_folder = argv[++i];
        } else if (!strcmp(a, "--image-size") && v) {
            i++;
            if (!parse_u64(v, &u) || u < 1 || u > INT32_MAX) rc2 = usage_error("--image-size '%s': pixels, >= 1", v);
            else o.clip.shortest_edge = o.clip.crop_height = o.clip.crop_width = (int)u, set_size = 1;
        } else if (!strcmp(a, "--image-aspect") && v) {
            i++;
            if (!strcmp(v, "crop")) o.clip.pad_square = 0;
            else if (!strcmp(v, "pad")) o.clip.pad_square = 1;
            else rc2 = usage_error("--image-aspect '%s': use crop (the HF processor) or pad (LLaVA-1.5's training)", v);
        } else if (!strcmp(a, "--image-loader") && v) {
            i++;
            if (!strcmp(v, "open")) o.clip.exif_transpose = 0;
            else if (!strcmp(v, "load_image")) o.clip.exif_transpose = 1;
            else rc2 = usage_error("--image-loader '%s': use open (PIL.Image.open) or load_image (transformers')", v);
        } else if (!strcmp(a, "--image-tokens") && v) {
            i++;
            if (!parse_u64(v, &u) || u < 1 || u > INT32_MAX) rc2 = usage_error("--image-tokens '%s': an integer >= 1", v);
            else o.image_tokens = (int)u, set_tokens = 1;
        } else if (!strcmp(a, "--image-token-id") && v) {
            i++;
            if (!parse_u64(v, &u) || u >= INT32_MAX) rc2 = usage_error("--image-token-id '%s': a token id >= 0", v);
            else o.image_token_id = (int64_t)u, set_id = 1;
        } else if (!strcmp(a, "--on-bad-image") && v) {
            i++;
            if (!strcmp(v, "stop")) o.on_bad_image = DT_BAD_IMAGE_STOP;
            else if (!strcmp(v, "skip")) o.on_bad_image = DT_BAD_IMAGE_SKIP;
            else rc2 = usage_error("--on-bad-image '%s': use stop or skip", v);
        } else if (!strcmp(a, "--max-image-pixels") && v) {
            i++;
            if (!parse_u64(v, &u) || u < 1) rc2 = usage_error("--max-image-pixels '%s': an integer >= 1", v);
            else o.max_image_pixels = u;
        } else if (a[0] == '-' && a[1]) {
            rc2 = usage_error("unknown or incomplete argument '%s'", a);
        } else {
            inputs[n++] = a;
        }
    }
    if (!rc2 && !o.tokenizer) rc2 = usage_error("%s", "--tokenizer TOKENIZER.json|TOKENIZER.model is required");
    if (!rc2 && !o.out) rc2 = usage_error("%s", "--out DIR is required");
    if (!rc2 && n == 0) rc2 = usage_error("%s", "no INPUT given (text files, folders or JSONL files)");
    if (rc2) {
        free(inputs);
        return rc2;
    }
    if (proc_cfg || model_cfg) {   /* the model's files, then the flags given over them */
        dt_error e;
        dt_error_clear(&e);
        dt_clip_opts flags = o.clip;
        int64_t id = o.image_token_id;
        int tokens = o.image_tokens;
        int rc = proc_cfg ? dt_prep_read_processor(proc_cfg, &o.clip, &e) : DT_OK;
        if (!rc && model_cfg) rc = dt_prep_read_llava_config(model_cfg, &o.image_token_id, &o.image_tokens, &e);
        if (rc) {
            free(inputs);
            fprintf(stderr, "dtrun prepare: %s\n", e.msg);
            return dt_cli_exit_code(rc);
        }
        if (set_size) {
            o.clip.shortest_edge = flags.shortest_edge;
            o.clip.crop_height = flags.crop_height;
            o.clip.crop_width = flags.crop_width;
        }
        if (set_id) o.image_token_id = id;
        if (set_tokens) o.image_tokens = tokens;
    }
    o.inputs = inputs;
    o.n_inputs = n;
    o.stop = &g_stop;
    progress_state ps = {0};
    if (!quiet && !no_progress && isatty(STDERR_FILENO)) {
        o.progress = on_progress;
        o.progress_arg = &ps;
    }
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;   /* reads and writes go on; the run stops at its next batch */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    dt_error err;
    dt_error_clear(&err);
    dt_prep_result r;
    const int records = o.format == DT_PREP_PAIRS || o.format == DT_PREP_PROMPTS;   /* pair / prompt shards */
    int rc = records ? dt_prepare_pairs(&o, &r, &err) : dt_prepare(&o, &r, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (ps.printed) fputc('\n', stderr);
    free(inputs);
    if (rc) {
        fprintf(stderr, "dtrun prepare: %s\n", err.msg);
        return dt_cli_exit_code(rc);
    }
    if (r.bad_images)   /* --on-bad-image skip: the count, and the first, always (not only without --quiet) */
        fprintf(stderr, "dtrun prepare: skipped %llu record(s) whose image could not be used (--on-bad-image skip); "
                "the first: %s\n", (unsigned long long)r.bad_images, r.first_bad_image);
    if (!quiet) {
        char t0[32], t1[32];
        human((double)r.tokens[0], t0, sizeof t0);
        human((double)r.tokens[1], t1, sizeof t1);
        if (o.format == DT_PREP_PROMPTS)
            printf("dtrun prepare: %s: train %llu prompts in %d shard(s); val %llu prompts in %d shard(s); vocab %lld, "
                   "tokenizer %.16s; %llu file(s)", o.out, (unsigned long long)r.docs[0], r.shards[0],
                   (unsigned long long)r.docs[1], r.shards[1], (long long)r.vocab, r.fingerprint,
                   (unsigned long long)r.files);
        else if (o.format == DT_PREP_PAIRS)
            printf("dtrun prepare: %s: train %llu pairs, %llu tokens (%llu completion) in %d shard(s); val %llu pairs "
                   "in %d shard(s); vocab %lld, tokenizer %.16s; %llu file(s)", o.out, (unsigned long long)r.docs[0],
                   (unsigned long long)r.tokens[0], (unsigned long long)r.trained[0], r.shards[0],
                   (unsigned long long)r.docs[1], r.shards[1], (long long)r.vocab, r.fingerprint,
                   (unsigned long long)r.files);
        else
        printf("dtrun prepare: %s: train %llu documents, %s tokens in %d shard(s); val %llu documents, %s tokens "
               "in %d shard(s); uint%u tokens, vocab %lld, tokenizer %.16s; %llu file(s), %.1f MiB in %.1f s",
               o.out, (unsigned long long)r.docs[0], t0, r.shards[0], (unsigned long long)r.docs[1], t1, r.shards[1],
               8 * r.token_bytes, (long long)r.vocab, r.fingerprint, (unsigned long long)r.files,
               (double)r.bytes / DT_MIB, r.seconds);
        if (r.skipped_files)
            printf("; skipped %llu file(s) (binary, symlinks, not .jsonl)", (unsigned long long)r.skipped_files);
        if (r.skipped_docs)
            printf("; skipped %llu document(s) with nothing to train on (empty, or a chat without an assistant turn)",
                   (unsigned long long)r.skipped_docs);
        if (o.format == DT_PREP_LLAVA)
            printf("; images: %llu train, %llu val (%dx%d crops in pixel shards)", (unsigned long long)r.images[0],
                   (unsigned long long)r.images[1], o.clip.crop_width, o.clip.crop_height);
        printf("\n");
        if (fflush(stdout) || ferror(stdout)) {
            fprintf(stderr, "dtrun prepare: cannot write the summary: %s\n", strerror(errno));
            return 1;
        }
    }
    return 0;
}
