/* prepared.c — `dtplan solve --data DIR`, and dtrun --data DIR on a plan that names no
 * data, where DIR is `dtrun prepare`'s output (its prepare.json, docs/data.md): the plan reads the token shards (data.format "llmc",
 * train/ and val/), the model's vocabulary must hold the tokenizer's, and the note
 * says how many tokens the plan's steps read. The plan records the tokenizer's fingerprint
 * and path and whether the loss is masked (data.tokenizer_fingerprint, tokenizer_path,
 * loss_mask: docs/plan-format.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "dt_cli_prepared.h"
#include "dt_json.h"

#define PREPARE_FILE "prepare.json"
#define PREPARE_FORMAT "dtrun-prepare"
#define PREPARED_PATH_MAX 4096
#define FINGERPRINT_SHOWN_HEX 16   /* hex digits of a fingerprint in the note, as dtrun's messages */

/* The prepare output directory for --data: the path itself, or its parent when the
 * path is that output's train/ folder; "" when neither holds a prepare.json. */
static void prepare_dir(const char *data, char *dir, size_t n) {
    char p[PREPARED_PATH_MAX + 32];
    struct stat sb;
    dir[0] = '\0';
    snprintf(p, sizeof p, "%s/" PREPARE_FILE, data);
    if (stat(p, &sb) == 0) {
        snprintf(dir, n, "%s", data);
        return;
    }
    /* DIR/train[/]: DIR, without a "/.." in what is written and said */
    size_t len = strlen(data);
    while (len > 1 && data[len - 1] == '/') len--;
    const size_t tl = strlen("/train");
    if (len >= tl && strncmp(data + len - tl, "/train", tl) == 0) {
        snprintf(p, sizeof p, "%.*s/" PREPARE_FILE, (int)(len - tl), data);
        if (stat(p, &sb) == 0) snprintf(dir, n, "%.*s", (int)(len - tl), data);
    }
}

static int64_t get_i64(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
}

/* tokens of one split ("train" / "val"), -1 when absent */
static int64_t split_tokens(const cJSON *root, const char *split, const char *key) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "splits"), split);
    return s ? get_i64(s, key) : -1;
}

static int set_str(char *dst, size_t n, const char *a, const char *b, const char *what, dt_error *err) {
    if (snprintf(dst, n, "%s%s", a, b) >= (int)n)
        return dt_errorf(err, DT_EINVAL, "--data: the %s path is longer than %zu bytes", what, n - 1);
    return DT_OK;
}

/* The tokenizer prepare.json names (path as given to dtrun prepare, fingerprint) into the
 * plan's data section: dtrun then requires it of the shards (docs/plan-format.md). */
static int set_tokenizer(dt_data *d, const cJSON *tok, const char *what, dt_error *err) {
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(tok, "fingerprint");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(tok, "path");
    if (!cJSON_IsString(fp) || strlen(fp->valuestring) != DT_PLAN_FINGERPRINT_HEX)
        return dt_errorf(err, DT_EINVAL, "%s: tokenizer.fingerprint is not %d hex digits: run dtrun prepare again",
                         what, DT_PLAN_FINGERPRINT_HEX);
    snprintf(d->tokenizer_fingerprint, sizeof d->tokenizer_fingerprint, "%s", fp->valuestring);
    if (cJSON_IsString(path) &&
        snprintf(d->tokenizer_path, sizeof d->tokenizer_path, "%s", path->valuestring) >= (int)sizeof d->tokenizer_path)
        d->tokenizer_path[0] = '\0';   /* only named in messages: too long a path is left out */
    return DT_OK;
}

int dt_prepared_is_output(const char *data) {
    char dir[PREPARED_PATH_MAX];
    prepare_dir(data, dir, sizeof dir);
    return dir[0] != '\0';
}

int64_t dt_prepared_train_tokens(const char *data) {
    char dir[PREPARED_PATH_MAX], p[PREPARED_PATH_MAX + 32];
    prepare_dir(data, dir, sizeof dir);
    if (!dir[0]) return -1;
    snprintf(p, sizeof p, "%s/" PREPARE_FILE, dir);
    char *txt = NULL;
    dt_error e;
    if (dt_json_read_file(p, &txt, NULL, &e)) return -1;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    int64_t t = root ? split_tokens(root, "train", "tokens") : -1;
    cJSON_Delete(root);
    return t;
}

int dt_solve_apply_prepared(dt_plan *b, const char *data, char *note, size_t note_len, dt_error *err) {
    char dir[PREPARED_PATH_MAX], p[PREPARED_PATH_MAX + 32], *txt = NULL;
    note[0] = '\0';
    if (!data) return DT_OK;
    prepare_dir(data, dir, sizeof dir);
    if (!dir[0]) return DT_OK;   /* text files or llm.c shards: as given */
    snprintf(p, sizeof p, "%s/" PREPARE_FILE, dir);
    if (dt_json_read_file(p, &txt, NULL, err)) return err->code;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    const cJSON *fmt = root ? cJSON_GetObjectItemCaseSensitive(root, "format") : NULL;
    const cJSON *tok = root ? cJSON_GetObjectItemCaseSensitive(root, "tokenizer") : NULL;
    int64_t vocab = tok ? get_i64(tok, "vocab_size") : -1;
    int64_t train = split_tokens(root, "train", "tokens"), val = split_tokens(root, "val", "tokens");
    int64_t trained = split_tokens(root, "train", "trained_tokens");
    const cJSON *mask = root ? cJSON_GetObjectItemCaseSensitive(root, "loss_mask") : NULL;
    int rc = DT_OK;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, PREPARE_FORMAT) || vocab < 1 || train < 0)
        rc = dt_errorf(err, DT_EINVAL, "%s: not a dtrun prepare output (format, tokenizer.vocab_size, "
                       "splits.train.tokens): run dtrun prepare again", p);
    else if (vocab > b->model.vocab)
        rc = dt_errorf(err, DT_EINVAL, "--data %s: its tokenizer has %lld ids but the model %s has a vocabulary of "
                       "%lld: prepare the data with the model's own tokenizer", data, (long long)vocab, b->model.name,
                       (long long)b->model.vocab);
    if (!rc) rc = set_str(b->data.train, sizeof b->data.train, dir, "/train", "train", err);
    if (!rc && val > 0) rc = set_str(b->data.valid, sizeof b->data.valid, dir, "/val", "val", err);
    if (!rc) rc = set_tokenizer(&b->data, tok, p, err);
    if (!rc) {
        snprintf(b->data.format, sizeof b->data.format, "llmc");
        b->data.loss_mask = cJSON_IsTrue(mask);
        double per_step = (double)b->batch.global_batch * (double)b->batch.seq_len;
        double epochs = train > 0 ? per_step * (double)b->schedule.total_steps / (double)train : 0;
        snprintf(note, note_len,
                 "data: dtrun prepare output %s: %lld training tokens%s, %lld validation; tokenizer vocab %lld, "
                 "fingerprint %.*s (dtrun requires it of the shards); the plan's %lld steps read %.3g epoch(s)",
                 dir, (long long)train,
                 cJSON_IsTrue(mask) ? " (SFT: the loss on the assistant's tokens only)" : "", (long long)val,
                 (long long)vocab, FINGERPRINT_SHOWN_HEX, b->data.tokenizer_fingerprint,
                 (long long)b->schedule.total_steps, epochs);
        if (cJSON_IsTrue(mask) && trained >= 0) {
            size_t k = strlen(note);
            snprintf(note + k, note_len - k, "; %lld of the training tokens carry loss", (long long)trained);
        }
    }
    cJSON_Delete(root);
    return rc;
}
