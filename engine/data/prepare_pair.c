/* prepare_pair.c — preference pairs and prompt-only records (dt_pairdoc.h). */
#include "dt_pairdoc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_json.h"

/* the label of a position that is not trained (PyTorch's ignore_index, dt_objloss.h) */
#define PAIR_IGNORE_LABEL (-100)
/* LLaMA-Factory's AlpacaDatasetConverter: "\n".join([instruction, input]) */
#define LF_QUERY_SEP "\n"

/* a chat: roles and contents (the contents point into the cJSON tree or into owned) */
typedef struct {
    const char **role, **content;
    size_t n, cap;
    char *owned[2];
} chat;

static int chat_push(chat *c, const char *role, const char *content) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 8;
        const char **r = realloc(c->role, cap * sizeof *r);
        if (!r) return DT_ENOMEM;
        c->role = r;
        const char **t = realloc(c->content, cap * sizeof *t);
        if (!t) return DT_ENOMEM;
        c->content = t, c->cap = cap;
    }
    c->role[c->n] = role, c->content[c->n++] = content;
    return DT_OK;
}

static void chat_free(chat *c) {
    free(c->role), free(c->content), free(c->owned[0]), free(c->owned[1]);
    memset(c, 0, sizeof *c);
}

/* obj[key]: NULL when absent */
static const cJSON *field(const cJSON *obj, const char *key) { return cJSON_GetObjectItemCaseSensitive(obj, key); }

static int want_string(const cJSON *v, const char *at, const char **out, dt_error *err) {
    if (!cJSON_IsString(v)) {
        char d[64];
        dt_json_describe(v, d, sizeof d);
        return dt_errorf(err, DT_EINVAL, "%s: expected a string, got %s", at, d);
    }
    *out = v->valuestring;
    return DT_OK;
}

static int known_role(const char *r) { return !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant"); }

/* LLaMA-Factory's sharegpt tags (DatasetAttr: user_tag human, assistant_tag gpt, system_tag system) */
static const char *sharegpt_role(const char *from) {
    return !strcmp(from, "human") ? "user" : !strcmp(from, "gpt") ? "assistant" : !strcmp(from, "system") ? "system" : NULL;
}

/* one message {role, content} (TRL) or {from, value} (sharegpt) */
static int parse_msg(const cJSON *m, const char *at, int sharegpt, chat *c, dt_error *err) {
    if (!cJSON_IsObject(m))
        return dt_errorf(err, DT_EINVAL, "%s: expected an object {\"%s\", \"%s\"}", at, sharegpt ? "from" : "role",
                         sharegpt ? "value" : "content");
    const char *rk = sharegpt ? "from" : "role", *ck = sharegpt ? "value" : "content", *r = NULL, *t = NULL;
    char a[96];
    snprintf(a, sizeof a, "%s.%s", at, rk);
    int rc = want_string(field(m, rk), a, &r, err);
    if (rc) return rc;
    snprintf(a, sizeof a, "%s.%s", at, ck);
    if ((rc = want_string(field(m, ck), a, &t, err))) return rc;
    const char *role = sharegpt ? sharegpt_role(r) : (known_role(r) ? r : NULL);
    if (!role)
        return dt_errorf(err, DT_EINVAL, "%s.%s: \"%.40s\" is not one of %s", at, rk, r,
                         sharegpt ? "human, gpt, system" : "system, user, assistant");
    return chat_push(c, role, t) ? DT_ENOMEM : DT_OK;
}

static int parse_msgs(const cJSON *arr, const char *at, int sharegpt, chat *c, dt_error *err) {
    if (!cJSON_IsArray(arr) || !arr->child)
        return dt_errorf(err, DT_EINVAL, "%s: expected a non-empty array of messages", at);
    int i = 0, rc;
    for (const cJSON *m = arr->child; m; m = m->next, i++) {
        char a[64];
        snprintf(a, sizeof a, "%s[%d]", at, i);
        if ((rc = parse_msg(m, a, sharegpt, c, err))) return rc;
    }
    return DT_OK;
}

/* a record, normalised: a plain prompt or a chat prompt, and the completions' texts */
typedef struct {
    int is_chat;
    const char *prompt; /* plain */
    chat p;             /* chat prompt */
    const char *side[2];
} pair_rec;

static const char *const SIDE[2] = {"chosen", "rejected"};

/* a completion that is one assistant message: [msg] (TRL) or msg (sharegpt) */
static int one_assistant(const cJSON *v, const char *at, int sharegpt, const char **out, dt_error *err) {
    chat c = {0};
    int rc = sharegpt ? parse_msg(v, at, 1, &c, err) : parse_msgs(v, at, 0, &c, err);
    if (!rc && (c.n != 1 || strcmp(c.role[0], "assistant")))
        rc = dt_errorf(err, DT_EINVAL, "%s: expected one assistant message (the completion)", at);
    if (!rc) *out = c.content[0];
    chat_free(&c);
    return rc;
}

/* TRL's implicit prompt: the messages chosen and rejected share, then one assistant message each */
static int implicit_prompt(const cJSON *root, pair_rec *r, dt_error *err) {
    chat s[2] = {{0}, {0}};
    int rc = parse_msgs(field(root, "chosen"), "$.chosen", 0, &s[0], err);
    if (!rc) rc = parse_msgs(field(root, "rejected"), "$.rejected", 0, &s[1], err);
    size_t k = 0;
    while (!rc && k < s[0].n && k < s[1].n && !strcmp(s[0].role[k], s[1].role[k]) &&
           !strcmp(s[0].content[k], s[1].content[k]))
        k++;
    for (int i = 0; !rc && i < 2; i++) {
        if (k == 0 || s[i].n != k + 1 || strcmp(s[i].role[k], "assistant"))
            rc = dt_errorf(err, DT_EINVAL, "$.%s: with no \"prompt\", chosen and rejected must share their first "
                           "messages and differ in one last assistant message", SIDE[i]);
        else
            r->side[i] = s[i].content[k];
    }
    for (size_t i = 0; !rc && i < k; i++) rc = chat_push(&r->p, s[0].role[i], s[0].content[i]);
    chat_free(&s[0]), chat_free(&s[1]);
    return rc;
}

/* LLaMA-Factory alpaca, ranking: [system], history turns, "instruction\ninput" */
static int lf_alpaca(const cJSON *root, pair_rec *r, dt_error *err) {
    const char *ins = NULL, *input = NULL, *sys = NULL;
    int rc = want_string(field(root, "instruction"), "$.instruction", &ins, err);
    if (!rc && field(root, "input")) rc = want_string(field(root, "input"), "$.input", &input, err);
    if (!rc && field(root, "system") && !(rc = want_string(field(root, "system"), "$.system", &sys, err)) && sys[0])
        rc = chat_push(&r->p, "system", sys);
    const cJSON *h = field(root, "history");
    if (!rc && h && !cJSON_IsArray(h)) rc = dt_errorf(err, DT_EINVAL, "$.history: expected an array of [query, response]");
    int i = 0;
    for (const cJSON *t = h ? h->child : NULL; !rc && t; t = t->next, i++) {
        char a[64];
        snprintf(a, sizeof a, "$.history[%d]", i);
        if (cJSON_GetArraySize(t) != 2 || !cJSON_IsString(t->child) || !cJSON_IsString(t->child->next))
            return dt_errorf(err, DT_EINVAL, "%s: expected [query, response], two strings", a);
        if (!(rc = chat_push(&r->p, "user", t->child->valuestring)))
            rc = chat_push(&r->p, "assistant", t->child->next->valuestring);
    }
    if (rc) return rc;
    if (input && input[0]) {
        size_t a = strlen(ins), b = strlen(input);
        char *q = malloc(a + strlen(LF_QUERY_SEP) + b + 1);
        if (!q) return DT_ENOMEM;
        sprintf(q, "%s%s%s", ins, LF_QUERY_SEP, input);
        r->p.owned[0] = q;
        ins = q;
    }
    if ((rc = chat_push(&r->p, "user", ins))) return rc;
    for (int s = 0; s < 2 && !rc; s++) {
        char a[32];
        snprintf(a, sizeof a, "$.%s", SIDE[s]);
        rc = want_string(field(root, SIDE[s]), a, &r->side[s], err);
    }
    return rc;
}

static int lf_sharegpt(const cJSON *root, pair_rec *r, dt_error *err) {
    const char *sys = NULL;
    int rc = DT_OK;
    if (field(root, "system") && !(rc = want_string(field(root, "system"), "$.system", &sys, err)) && sys[0])
        rc = chat_push(&r->p, "system", sys);
    if (!rc) rc = parse_msgs(field(root, "conversations"), "$.conversations", 1, &r->p, err);
    for (int s = 0; s < 2 && !rc; s++) {
        char a[32];
        snprintf(a, sizeof a, "$.%s", SIDE[s]);
        rc = one_assistant(field(root, SIDE[s]), a, 1, &r->side[s], err);
    }
    return rc;
}

/* which of the shapes in dt_pairdoc.h the record has, normalised into r */
static int parse_pair(const cJSON *root, pair_rec *r, dt_error *err) {
    const cJSON *prompt = field(root, "prompt");
    int rc;
    r->is_chat = 1;
    if (field(root, "conversations")) {
        rc = lf_sharegpt(root, r, err);
    } else if (field(root, "instruction")) {
        rc = lf_alpaca(root, r, err);
    } else if (cJSON_IsString(prompt)) {
        r->is_chat = 0;
        r->prompt = prompt->valuestring;
        rc = DT_OK;
        for (int s = 0; s < 2 && !rc; s++) {
            char a[32];
            snprintf(a, sizeof a, "$.%s", SIDE[s]);
            rc = want_string(field(root, SIDE[s]), a, &r->side[s], err);
        }
    } else if (prompt) {
        rc = parse_msgs(prompt, "$.prompt", 0, &r->p, err);
        for (int s = 0; s < 2 && !rc; s++) {
            char a[32];
            snprintf(a, sizeof a, "$.%s", SIDE[s]);
            rc = one_assistant(field(root, SIDE[s]), a, 0, &r->side[s], err);
        }
    } else if (cJSON_IsArray(field(root, "chosen"))) {
        rc = implicit_prompt(root, r, err);
    } else {
        return dt_errorf(err, DT_EINVAL, "$: not a preference record: give \"prompt\" + \"chosen\" + \"rejected\" (TRL), "
                         "\"instruction\" or \"conversations\" + \"chosen\" + \"rejected\" (LLaMA-Factory ranking)");
    }
    for (int s = 0; s < 2 && !rc; s++)
        if (!r->side[s][0])
            rc = dt_errorf(err, DT_EINVAL, "$.%s: empty; a pair needs text on both sides", SIDE[s]);
    return rc;
}

/* strict JSON (no duplicate keys) of one line; errors "PATH:LINE[:COL]: ..." */
static int parse_line(const char *line, size_t n, cJSON **root, dt_error *err) {
    int rc = dt_json_validate(line, n, "", err);
    if (rc) {
        /* the validator's ":1:COL: ..." for the one line: the caller adds PATH:LINE */
        if (!strncmp(err->msg, ":1:", 3)) memmove(err->msg, err->msg + 3, strlen(err->msg + 3) + 1);
        return rc;
    }
    *root = cJSON_ParseWithLength(line, n);
    if (!*root) return dt_errorf(err, DT_ENOMEM, "out of memory parsing JSON");
    rc = cJSON_IsObject(*root) ? dt_json_check_duplicates(*root, "$", err)
                               : dt_errorf(err, DT_EINVAL, "$: expected an object, one record per line");
    if (rc) cJSON_Delete(*root), *root = NULL;
    return rc;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* ids of prompt + text (plain, then the end-of-text id) or of the chat + {assistant, text}
 * (text NULL: the prompt alone, a chat's with the generation header) */
static int render(const dt_prepdoc_ctx *ctx, pair_rec *r, const char *text, int32_t **ids, size_t *n, dt_error *err) {
    if (r->is_chat) {
        int rc = DT_OK;
        if (text && (rc = chat_push(&r->p, "assistant", text))) return rc;
        rc = dt_prepdoc_render(ctx, r->p.role, r->p.content, r->p.n, text == NULL, ids, n, err);
        if (text) r->p.n--;
        return rc;
    }
    size_t a = strlen(r->prompt), b = text ? strlen(text) : 0;
    char *s = malloc(a + b + 1);
    if (!s) return DT_ENOMEM;
    memcpy(s, r->prompt, a);
    memcpy(s + a, text ? text : "", b + 1);
    int rc = dt_tok_encode(ctx->tok, s, a + b, 0, ids, n, err);
    free(s);
    if (rc || !text) return rc;
    int32_t *g = realloc(*ids, (*n + 1) * sizeof *g);
    if (!g) return DT_ENOMEM;
    *ids = g;
    g[(*n)++] = ctx->eot; /* TRL's add_eos */
    return DT_OK;
}

static int encode_pair(const dt_prepdoc_ctx *ctx, pair_rec *r, int64_t max_len, dt_pair *out, dt_error *err) {
    int32_t *p = NULL;
    size_t pn = 0;
    int rc = render(ctx, r, NULL, &p, &pn, err);
    for (int s = 0; s < 2 && !rc; s++) rc = render(ctx, r, r->side[s], &out->ids[s], &out->n[s], err);
    if (!rc) {
        size_t k0 = common_prefix(p, pn, out->ids[0], out->n[0]), k1 = common_prefix(p, pn, out->ids[1], out->n[1]);
        out->prompt_n = k0 < k1 ? k0 : k1;
        if (max_len > 0 && out->prompt_n >= (size_t)max_len)
            rc = dt_errorf(err, DT_EINVAL, "the prompt is %zu tokens, --seq %lld leaves no room for a completion; "
                           "shorten the prompt or raise --seq", out->prompt_n, (long long)max_len);
    }
    for (int s = 0; s < 2 && !rc && max_len > 0; s++)
        if (out->n[s] > (size_t)max_len) out->n[s] = (size_t)max_len, out->truncated = 1;
    free(p);
    return rc;
}

int dt_pairdoc_encode(const dt_prepdoc_ctx *ctx, const char *line, size_t n, const char *path, uint64_t lineno,
                      int64_t max_len, dt_pair *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = NULL;
    pair_rec r = {0};
    int rc = parse_line(line, n, &root, err);
    if (!rc) rc = parse_pair(root, &r, err);
    if (!rc && r.is_chat && ctx->special[ctx->chat == DT_CHAT_CHATML ? DT_PD_IM_START : DT_PD_BEGIN] < 0)
        rc = dt_errorf(err, DT_EINVAL, "a chat record, but no chat template was set up (dt_prepdoc_init with chat)");
    if (!rc) rc = encode_pair(ctx, &r, max_len, out, err);
    chat_free(&r.p);
    cJSON_Delete(root);
    if (rc) {
        dt_pair_free(out);
        if (rc == DT_ENOMEM) return dt_errorf(err, DT_ENOMEM, "%s:%llu: out of memory", path, (unsigned long long)lineno);
        return err ? dt_error_prefix(err, "%s:%llu", path, (unsigned long long)lineno) : rc;
    }
    return DT_OK;
}

void dt_pair_free(dt_pair *p) {
    free(p->ids[0]), free(p->ids[1]);
    memset(p, 0, sizeof *p);
}

/* the "answer" field as text: a string as it is, a number as JSON prints it */
static int answer_text(const cJSON *a, char **out, dt_error *err) {
    *out = NULL;
    if (!a) return DT_OK;
    if (cJSON_IsString(a)) *out = strdup(a->valuestring);
    else if (cJSON_IsNumber(a)) *out = cJSON_PrintUnformatted(a);
    else return dt_errorf(err, DT_EINVAL, "$.answer: expected a string or a number");
    return *out ? DT_OK : DT_ENOMEM;
}

int dt_promptdoc_encode(const dt_prepdoc_ctx *ctx, const char *line, size_t n, const char *path, uint64_t lineno,
                        int64_t max_len, int32_t **ids, size_t *n_ids, char **answer, dt_error *err) {
    *ids = NULL, *n_ids = 0, *answer = NULL;
    cJSON *root = NULL;
    pair_rec r = {0};
    int rc = parse_line(line, n, &root, err);
    const cJSON *prompt = rc ? NULL : field(root, "prompt");
    if (!rc && cJSON_IsString(prompt)) {
        r.prompt = prompt->valuestring;
        if (!r.prompt[0]) rc = dt_errorf(err, DT_EINVAL, "$.prompt: empty");
    } else if (!rc && prompt) {
        r.is_chat = 1;
        rc = parse_msgs(prompt, "$.prompt", 0, &r.p, err);
    } else if (!rc) {
        rc = dt_errorf(err, DT_EINVAL, "$: no \"prompt\" (a prompt record is {\"prompt\": ..., \"answer\": ...})");
    }
    if (!rc) rc = answer_text(field(root, "answer"), answer, err);
    if (!rc) rc = render(ctx, &r, NULL, ids, n_ids, err);
    if (!rc && max_len > 0 && *n_ids >= (size_t)max_len)
        rc = dt_errorf(err, DT_EINVAL, "the prompt is %zu tokens, --seq %lld leaves no room to generate; "
                       "shorten the prompt or raise --seq", *n_ids, (long long)max_len);
    chat_free(&r.p);
    cJSON_Delete(root);
    if (rc) {
        free(*ids), free(*answer);
        *ids = NULL, *answer = NULL, *n_ids = 0;
        if (rc == DT_ENOMEM) return dt_errorf(err, DT_ENOMEM, "%s:%llu: out of memory", path, (unsigned long long)lineno);
        return err ? dt_error_prefix(err, "%s:%llu", path, (unsigned long long)lineno) : rc;
    }
    return DT_OK;
}

int dt_pair_batch(const dt_pair *pairs, int64_t npairs, int64_t T, int32_t pad_id, int32_t *ids, int32_t *targets,
                  dt_error *err) {
    for (int64_t s = 0; s < 2; s++)
        for (int64_t i = 0; i < npairs; i++) {
            const dt_pair *p = &pairs[i];
            int64_t row = s * npairs + i, len = (int64_t)p->n[s];
            if (len > T)
                return dt_errorf(err, DT_EINVAL, "pair %lld: the %s sequence is %lld tokens, longer than the batch's %lld",
                                 (long long)i, SIDE[s], (long long)len, (long long)T);
            int32_t *ir = ids + row * T, *tr = targets + row * T; /* (T) each */
            for (int64_t t = 0; t < T; t++) {
                ir[t] = t < len ? p->ids[s][t] : pad_id;
                tr[t] = (t + 1 < len && (size_t)(t + 1) >= p->prompt_n) ? p->ids[s][t + 1] : PAIR_IGNORE_LABEL;
            }
        }
    return DT_OK;
}
