/* prepare_pairs.c — `dtrun prepare --format pairs` (dt_prepare.h, dt_prepare_pairs): preference
 * JSONL into pair shards (dt_pairshard.h). The records are few next to pretraining text (a
 * preference set is 10^4..10^6 pairs), so they are held in memory: read, tokenized in input
 * order (OpenMP over the lines of a file), shuffled and split by the seed, then written. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "dt_file.h"
#include "dt_json.h"
#include "dt_pairdoc.h"
#include "dt_pairshard.h"
#include "dt_prepare.h"
#include "dt_prepdoc.h"
#include "dt_sha256.h"
#include "dt_tokenizer.h"

#define PP_PATH_BYTES 4096

typedef struct {
    const dt_prep_opts *o;
    dt_prep_result *res;
    dt_tokenizer *tok;
    dt_prepdoc_ctx ctx;
    unsigned char fp[DT_TOK_FINGERPRINT_BYTES];
    dt_pair *pairs;
    dt_pair_src *src;
    size_t n, cap;
    char stage[PP_PATH_BYTES];
} pp;

static int pp_grow(pp *p, size_t need, dt_error *err) {
    if (need <= p->cap) return DT_OK;
    size_t cap = p->cap ? 2 * p->cap : 1024;
    while (cap < need) cap *= 2;
    dt_pair *a = realloc(p->pairs, cap * sizeof *a);
    if (a) p->pairs = a;
    dt_pair_src *b = realloc(p->src, cap * sizeof *b);
    if (b) p->src = b;
    if (!a || !b) return dt_errorf(err, DT_ENOMEM, "out of memory for %zu pairs", need);
    p->cap = cap;
    return DT_OK;
}

/* One prompt record (--format prompts) as the pair a prompt shard holds (dt_pairshard.h):
 * prompt ‖ has-answer ‖ the answer's tokens (special tokens' text as plain text), and
 * prompt ‖ end-of-text. */
static int encode_prompt(const pp *p, const char *line, size_t n, const char *path, uint64_t lineno, dt_pair *out,
                         dt_error *err) {
    memset(out, 0, sizeof *out);
    int32_t *ids = NULL, *aids = NULL;
    size_t np = 0, na = 0;
    char *answer = NULL;
    int rc = dt_promptdoc_encode(&p->ctx, line, n, path, lineno, p->o->max_len, &ids, &np, &answer, err);
    if (!rc && answer && dt_tok_encode(p->tok, answer, strlen(answer), 0, &aids, &na, err))
        rc = err ? dt_error_prefix(err, "%s:%llu: $.answer", path, (unsigned long long)lineno) : DT_EINVAL;
    if (!rc) {
        out->ids[0] = malloc((np + 1 + na) * sizeof(int32_t));
        out->ids[1] = malloc((np + 1) * sizeof(int32_t));
        if (!out->ids[0] || !out->ids[1]) {
            dt_pair_free(out);
            rc = dt_errorf(err, DT_ENOMEM, "%s:%llu: out of memory", path, (unsigned long long)lineno);
        }
    }
    if (!rc) {
        memcpy(out->ids[0], ids, np * sizeof(int32_t));
        memcpy(out->ids[1], ids, np * sizeof(int32_t));
        out->ids[0][np] = answer != NULL;
        if (na) memcpy(out->ids[0] + np + 1, aids, na * sizeof(int32_t));
        out->ids[1][np] = p->ctx.eot;
        out->n[0] = np + 1 + na, out->n[1] = np + 1, out->prompt_n = np;
    }
    free(ids), free(aids), free(answer);
    return rc;
}

/* One record of the run's format. */
static int encode(const pp *p, const char *line, size_t n, const char *path, uint64_t lineno, dt_pair *out,
                  dt_error *err) {
    return p->o->format == DT_PREP_PROMPTS ? encode_prompt(p, line, n, path, lineno, out, err)
                                           : dt_pairdoc_encode(&p->ctx, line, n, path, lineno, p->o->max_len, out, err);
}

/* The lines of one JSONL file (blank ones skipped), each a pair; the first bad one in line
 * order is the error. */
static int read_input(pp *p, uint32_t fi, const char *path, dt_error *err) {
    char *buf = NULL;
    size_t len = 0;
    int rc = dt_file_read(path, "input file", UINT64_MAX >> 1, &buf, &len, err);
    if (rc) return rc;
    p->res->files++;
    p->res->bytes += len;
    size_t nl = 0, at = 0;
    for (size_t i = 0; i < len; i++) nl += buf[i] == '\n';
    const char **line = malloc((nl + 1) * sizeof *line);
    size_t *ln = malloc((nl + 1) * sizeof *ln);
    uint64_t *no = malloc((nl + 1) * sizeof *no);
    size_t m = 0;
    if (!line || !ln || !no) rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    for (uint64_t lineno = 1; !rc && at < len; lineno++) {
        const char *e = memchr(buf + at, '\n', len - at);
        size_t n = e ? (size_t)(e - (buf + at)) : len - at, k = n;
        while (k && (buf[at + k - 1] == '\r' || buf[at + k - 1] == ' ' || buf[at + k - 1] == '\t')) k--;
        if (k) line[m] = buf + at, ln[m] = k, no[m++] = lineno;
        at += n + 1;
    }
    if (!rc) rc = pp_grow(p, p->n + m, err);
    int *rcs = rc ? NULL : calloc(m ? m : 1, sizeof *rcs);
    if (!rc && !rcs) rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    const int nt = p->o->threads > 0 ? p->o->threads : omp_get_max_threads();
    if (!rc) {
        dt_pair *out = p->pairs + p->n;
#pragma omp parallel for schedule(dynamic, 16) num_threads(nt)
        for (size_t i = 0; i < m; i++)
            rcs[i] = encode(p, line[i], ln[i], path, no[i], &out[i], NULL);
        for (size_t i = 0; i < m && !rc; i++)
            if (rcs[i])   /* the first failure in line order, its message made again */
                rc = encode(p, line[i], ln[i], path, no[i], &out[i], err);
        for (size_t i = 0; i < m; i++) {
            if (rc) {
                dt_pair_free(&out[i]);
                continue;
            }
            p->src[p->n + i] = (dt_pair_src){.line = no[i], .input = fi};
        }
        if (!rc) p->n += m;
    }
    free(rcs);
    free(line);
    free(ln);
    free(no);
    free(buf);
    return rc;
}

/* The pairs order[from .. to) of split s into shards of about shard_tokens tokens. */
static int write_split(pp *p, int s, const uint64_t *order, uint64_t from, uint64_t to, dt_error *err) {
    const int prompts = p->o->format == DT_PREP_PROMPTS;
    dt_pairshard_header h = {.split = (uint32_t)s, .flags = prompts ? DT_PAIRSHARD_PROMPTS : 0, .vocab = (uint64_t)p->res->vocab, .pad_id = (uint32_t)p->ctx.eot,
                             .eot_id = (uint32_t)p->ctx.eot};
    memcpy(h.fingerprint, p->fp, sizeof h.fingerprint);
    h.prepare_id = 0;
    for (int i = 0; i < 8; i++) h.prepare_id = h.prepare_id << 8 | p->fp[i];
    h.prepare_id ^= p->o->seed ^ (uint64_t)p->n;
    dt_pair *sp = malloc((size_t)(to - from + 1) * sizeof *sp);
    dt_pair_src *ss = malloc((size_t)(to - from + 1) * sizeof *ss);
    int rc = sp && ss ? DT_OK : dt_errorf(err, DT_ENOMEM, "out of memory");
    char dir[PP_PATH_BYTES + 8], name[64], path[PP_PATH_BYTES + 80];
    snprintf(dir, sizeof dir, "%s/%s", p->stage, s == DT_SPLIT_TRAIN ? DT_PREP_TRAIN_DIR : DT_PREP_VAL_DIR);
    if (!rc && to > from && mkdir(dir, 0755) && errno != EEXIST)
        rc = dt_errorf(err, DT_EIO, "%s: cannot create: %s", dir, strerror(errno));
    uint64_t i = from;
    while (!rc && i < to) {
        size_t n = 0;
        uint64_t tokens = 0;
        while (i < to && (n == 0 || tokens < (uint64_t)p->o->shard_tokens)) {
            const dt_pair *q = &p->pairs[order[i]];
            sp[n] = *q;
            ss[n++] = p->src[order[i++]];
            tokens += q->n[0] + q->n[1];
            p->res->tokens[s] += q->n[0] + q->n[1];
            p->res->trained[s] += prompts ? 0 : q->n[0] + q->n[1] - 2 * q->prompt_n;
        }
        p->res->docs[s] += n;
        h.shard_index = (uint32_t)p->res->shards[s];
        dt_prep_shard_name(s, p->res->shards[s], name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", p->stage, name);
        if (!(rc = dt_pairshard_write(path, &h, sp, ss, n, err))) p->res->shards[s]++;
    }
    free(sp);
    free(ss);
    return rc;
}

static int write_manifest(const pp *p, const char *path, dt_error *err) {
    const dt_prep_opts *o = p->o;
    const dt_prep_result *r = p->res;
    cJSON *root = cJSON_CreateObject(), *t = cJSON_CreateObject(), *in = cJSON_CreateArray(),
          *splits = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "dtrun-prepare");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(t, "path", o->tokenizer);
    cJSON_AddNumberToObject(t, "vocab_size", (double)r->vocab);
    cJSON_AddNumberToObject(t, "eot_id", p->ctx.eot);
    cJSON_AddNumberToObject(t, "pad_id", p->ctx.eot);
    cJSON_AddStringToObject(t, "fingerprint", r->fingerprint);
    cJSON_AddItemToObject(root, "tokenizer", t);
    const int prompts = o->format == DT_PREP_PROMPTS;
    cJSON_AddStringToObject(root, "input_format", prompts ? "prompts" : "pairs");
    cJSON_AddStringToObject(root, "chat_template", o->chat == DT_CHAT_LLAMA3 ? "llama3" : "chatml");
    cJSON_AddBoolToObject(root, "loss_mask", 0);
    cJSON_AddNumberToObject(root, "max_len", (double)o->max_len);
    cJSON_AddNumberToObject(root, "seed", (double)o->seed);
    cJSON_AddNumberToObject(root, "val_fraction", r->val_fraction);
    for (int i = 0; i < o->n_inputs; i++) cJSON_AddItemToArray(in, cJSON_CreateString(o->inputs[i]));
    cJSON_AddItemToObject(root, "inputs", in);
    for (int s = 0; s < 2; s++) {
        cJSON *sp = dt_prep_manifest_split(r, s, prompts ? "prompts" : "pairs");
        cJSON_AddItemToObject(splits, s == DT_SPLIT_TRAIN ? DT_PREP_TRAIN_DIR : DT_PREP_VAL_DIR, sp);
    }
    cJSON_AddItemToObject(root, "splits", splits);
    return dt_prep_manifest_write(root, path, err);
}

/* The tokenizer and its chat template when it has one (plain records need none). */
static int open_tokenizer(pp *p, dt_error *err) {
    const dt_prep_opts *o = p->o;
    int rc = dt_tok_load(o->tokenizer, &p->tok, err);
    if (rc) return rc;
    dt_error no_chat;
    if (dt_prepdoc_init(&p->ctx, p->tok, o->tokenizer, DT_PREP_CHAT, o->chat, &no_chat) &&
        (rc = dt_prepdoc_init(&p->ctx, p->tok, o->tokenizer, DT_PREP_JSONL, o->chat, err)))
        return rc;
    dt_tok_fingerprint(p->tok, p->fp);
    dt_sha256_hex(p->fp, p->res->fingerprint);
    p->res->vocab = dt_tok_vocab_size(p->tok);
    p->res->token_bytes = 4;
    return DT_OK;
}

static int run(pp *p, int *created, dt_error *err) {
    const dt_prep_opts *o = p->o;
    int rc = open_tokenizer(p, err);
    for (int i = 0; i < o->n_inputs && !rc; i++) {
        struct stat st;
        if (stat(o->inputs[i], &st) == 0 && S_ISDIR(st.st_mode))
            return dt_errorf(err, DT_EINVAL, "%s: a folder; --format %s reads JSONL files: name them", o->inputs[i],
                             o->format == DT_PREP_PROMPTS ? "prompts" : "pairs");
        rc = read_input(p, (uint32_t)i, o->inputs[i], err);
    }
    if (rc) return rc;
    const int prompts = o->format == DT_PREP_PROMPTS;
    if (p->n == 0)
        return dt_errorf(err, DT_EINVAL, "%s: no %s records found", o->inputs[0], prompts ? "prompt" : "preference");
    uint64_t *perm = NULL, n_val = 0;
    if ((rc = dt_prep_split(p->n, o->val_fraction, o->seed, prompts ? "prompt" : "pair", &perm, &n_val, &p->res->val_fraction, err)))
        return rc;
    if (!(rc = dt_prep_stage_open(o->out, p->stage, sizeof p->stage, created, err)) &&
        !(rc = write_split(p, DT_SPLIT_VAL, perm, 0, n_val, err)))
        rc = write_split(p, DT_SPLIT_TRAIN, perm, n_val, p->n, err);
    free(perm);
    char q[PP_PATH_BYTES + 32];
    snprintf(q, sizeof q, "%s/%s", p->stage, DT_PREP_MANIFEST);
    if (!rc) rc = write_manifest(p, q, err);
    return rc ? rc : dt_prep_stage_commit(o->out, p->stage, p->res->shards, err);
}

int dt_prepare_pairs(const dt_prep_opts *o, dt_prep_result *res, dt_error *err) {
    memset(res, 0, sizeof *res);
    if (!o->tokenizer || !o->tokenizer[0]) return dt_errorf(err, DT_EINVAL, "no tokenizer given (--tokenizer)");
    if (!o->out || !o->out[0]) return dt_errorf(err, DT_EINVAL, "no output directory given (--out)");
    if (o->n_inputs < 1) return dt_errorf(err, DT_EINVAL, "no inputs given (preference or prompt JSONL files)");
    if (o->max_len < 0) return dt_errorf(err, DT_EINVAL, "--seq %lld: must be >= 1", (long long)o->max_len);
    if (o->shard_tokens < 1) return dt_errorf(err, DT_EINVAL, "--shard-tokens: must be >= 1");
    if (!(o->val_fraction >= 0.0 && o->val_fraction < 1.0) && o->val_fraction != DT_PREP_VAL_AUTO)
        return dt_errorf(err, DT_EINVAL, "--val-fraction %g: must be in [0, 1)", o->val_fraction);
    pp p = {.o = o, .res = res};
    int created = 0;
    int rc = run(&p, &created, err);
    if (rc && p.stage[0]) dt_prep_stage_abort(o->out, p.stage, created);
    for (size_t i = 0; i < p.n; i++) dt_pair_free(&p.pairs[i]);
    free(p.pairs);
    free(p.src);
    dt_tok_free(p.tok);
    return rc;
}
