/* prepare_doc.c — one document of dtrun prepare (dt_prepdoc.h): the shape of a JSONL line,
 * and a document's ids and loss mask, chat templates included.
 *
 * The chat templates are the models' own chat_template strings from their
 * tokenizer_config.json, written out by hand:
 *   ChatML (Qwen2):  {% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'
 *                    + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}
 *                    (Qwen2's template also inserts a default system message when there
 *                    is none; this one does not: give a system message to have one)
 *   Llama-3:         {{ bos_token }} then per message '<|start_header_id|>' + role +
 *                    '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>'
 * Hugging Face tokenizes the rendered string, so the text between two template tokens is
 * one segment ("user\nHello"); that is what is encoded here, except that an assistant
 * turn's header text and its content are encoded apart, so that the mask boundary falls
 * between tokens. The two agree whenever the content does not begin with white space
 * that could merge with the header's last newline (docs/data.md "Chat templates"). */
#include "dt_prepdoc.h"

#include <stdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_json.h"

static const char *const SPECIAL_NAMES[DT_PD_N_SPECIAL] = {
    "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};

static const char *const ROLES[] = {"system", "user", "assistant"};
#define ROLE_ASSISTANT 2
#define N_ROLES 3

int dt_prepdoc_init(dt_prepdoc_ctx *ctx, const dt_tokenizer *tok, const char *tok_path, dt_prep_format format,
                    dt_chat_template chat, dt_error *err) {
    memset(ctx, 0, sizeof *ctx);
    ctx->tok = tok;
    ctx->format = format;
    ctx->chat = chat;
    for (int i = 0; i < DT_PD_N_SPECIAL; i++) ctx->special[i] = -1;
    ctx->eot = dt_tok_eot_id(tok);
    if (ctx->eot < 0)
        return dt_errorf(err, DT_EINVAL,
                         "%s: the tokenizer has no end-of-text token (<|endoftext|>, <|end_of_text|>, </s>, <eos>, "
                         "or a SentencePiece eos piece) to separate documents with",
                         tok_path);
    if (format != DT_PREP_CHAT && format != DT_PREP_LLAVA) return DT_OK;
    int first = chat == DT_CHAT_CHATML ? DT_PD_IM_START : DT_PD_BEGIN;
    int last = chat == DT_CHAT_CHATML ? DT_PD_IM_END : DT_PD_EOT_ID;
    for (int i = first; i <= last; i++) {
        ctx->special[i] = dt_tok_token_id(tok, SPECIAL_NAMES[i]);
        if (ctx->special[i] < 0)
            return dt_errorf(err, DT_EINVAL, "%s: the tokenizer has no %s token, which the %s chat template needs",
                             tok_path, SPECIAL_NAMES[i], chat == DT_CHAT_CHATML ? "chatml" : "llama3");
    }
    return DT_OK;
}

/* ---------------------------------------------------------------- pass 1: shapes */

/* The string at obj.key: NULL when absent; DT_EINVAL when it is twice in obj or not a
 * string (cJSON keeps duplicates; only the keys read here are checked, in O(keys)). */
static int get_str(const cJSON *obj, const char *key, const char *at, int required, const char **out,
                   dt_error *err) {
    *out = NULL;
    const cJSON *found = NULL;
    for (const cJSON *c = obj->child; c; c = c->next) {
        if (!c->string || strcmp(c->string, key)) continue;
        if (found) return dt_errorf(err, DT_EINVAL, "%s.%s: duplicate key", at, key);
        found = c;
    }
    if (!found) return required ? dt_errorf(err, DT_EINVAL, "%s: no \"%s\" string", at, key) : DT_OK;
    if (!cJSON_IsString(found)) {
        char d[64];
        dt_json_describe(found, d, sizeof d);
        return dt_errorf(err, DT_EINVAL, "%s.%s: expected a string, got %s", at, key, d);
    }
    *out = found->valuestring;
    return DT_OK;
}

static const cJSON *get_item(const cJSON *obj, const char *key, const char *at, dt_error *err, int *rc) {
    const cJSON *found = NULL;
    *rc = DT_OK;
    for (const cJSON *c = obj->child; c; c = c->next) {
        if (!c->string || strcmp(c->string, key)) continue;
        if (found) {
            *rc = dt_errorf(err, DT_EINVAL, "%s.%s: duplicate key", at, key);
            return NULL;
        }
        found = c;
    }
    return found;
}

static int role_index(const char *r) {
    for (int i = 0; i < N_ROLES; i++)
        if (!strcmp(r, ROLES[i])) return i;
    return -1;
}

/* A chat line: messages or instruction/output; *has_assistant when something is trained. */
static int check_chat(const cJSON *root, int *has_assistant, dt_error *err) {
    int rc;
    *has_assistant = 0;
    const cJSON *msgs = get_item(root, "messages", "$", err, &rc);
    if (rc) return rc;
    if (msgs) {
        if (!cJSON_IsArray(msgs) || !msgs->child)
            return dt_errorf(err, DT_EINVAL, "$.messages: expected a non-empty array of {\"role\", \"content\"}");
        int i = 0;
        for (const cJSON *m = msgs->child; m; m = m->next, i++) {
            char at[64];
            snprintf(at, sizeof at, "$.messages[%d]", i);
            if (!cJSON_IsObject(m)) return dt_errorf(err, DT_EINVAL, "%s: expected an object {\"role\", \"content\"}", at);
            const char *role, *content;
            if ((rc = get_str(m, "role", at, 1, &role, err)) || (rc = get_str(m, "content", at, 1, &content, err)))
                return rc;
            int r = role_index(role);
            if (r < 0)
                return dt_errorf(err, DT_EINVAL, "%s.role: \"%.40s\" is not one of system, user, assistant", at, role);
            if (r == ROLE_ASSISTANT) *has_assistant = 1;
        }
        return DT_OK;
    }
    const char *ins, *out, *input, *sys;
    if ((rc = get_str(root, "instruction", "$", 0, &ins, err))) return rc;
    if (!ins)
        return dt_errorf(err, DT_EINVAL,
                         "$: neither \"messages\" nor \"instruction\" (--format chat takes {\"messages\": [...]} or "
                         "{\"instruction\", \"input\", \"output\"})");
    if ((rc = get_str(root, "output", "$", 1, &out, err)) || (rc = get_str(root, "input", "$", 0, &input, err)) ||
        (rc = get_str(root, "system", "$", 0, &sys, err)))
        return rc;
    *has_assistant = 1;
    return DT_OK;
}

/* LLaVA's roles (llava/conversation.py, the data's "from") as the templates' */
static const char *llava_role(const char *from) {
    if (!strcmp(from, "human")) return ROLES[1];
    if (!strcmp(from, "gpt")) return ROLES[ROLE_ASSISTANT];
    if (!strcmp(from, "system")) return ROLES[0];
    return NULL;
}

static size_t count_images(const char *s) {
    size_t k = 0;
    for (const char *q = s; (q = strstr(q, DT_PREP_IMAGE_TOKEN)); q += strlen(DT_PREP_IMAGE_TOKEN)) k++;
    return k;
}

/* A LLaVA record: conversations of {from, value}, an optional image path, one <image>
 * per image; *has_assistant when a gpt turn is there. */
static int check_llava(const cJSON *root, int *has_assistant, dt_error *err) {
    int rc;
    *has_assistant = 0;
    const char *image;
    const cJSON *img = get_item(root, "image", "$", err, &rc);
    if (rc) return rc;
    if (img && cJSON_IsArray(img))
        return dt_errorf(err, DT_EINVAL, "$.image: a list of images; this prepare takes one image per record");
    if ((rc = get_str(root, "image", "$", 0, &image, err))) return rc;
    if (image && !image[0]) return dt_errorf(err, DT_EINVAL, "$.image: an empty path");
    const cJSON *conv = get_item(root, "conversations", "$", err, &rc);
    if (rc) return rc;
    if (!cJSON_IsArray(conv) || !conv->child)
        return dt_errorf(err, DT_EINVAL, "$.conversations: expected a non-empty array of {\"from\", \"value\"}");
    size_t images = 0;
    int i = 0;
    for (const cJSON *m = conv->child; m; m = m->next, i++) {
        char at[64];
        snprintf(at, sizeof at, "$.conversations[%d]", i);
        if (!cJSON_IsObject(m)) return dt_errorf(err, DT_EINVAL, "%s: expected an object {\"from\", \"value\"}", at);
        const char *from, *value;
        if ((rc = get_str(m, "from", at, 1, &from, err)) || (rc = get_str(m, "value", at, 1, &value, err))) return rc;
        const char *role = llava_role(from);
        if (!role) return dt_errorf(err, DT_EINVAL, "%s.from: \"%.40s\" is not one of human, gpt, system", at, from);
        if (role == ROLES[ROLE_ASSISTANT]) *has_assistant = 1;
        images += count_images(value);
    }
    if (images != (image ? 1u : 0u))
        return dt_errorf(err, DT_EINVAL, "$.conversations: %zu \"" DT_PREP_IMAGE_TOKEN "\" for %s: a record with an "
                         "image holds exactly one, one without holds none", images, image ? "one image" : "no image");
    return DT_OK;
}

int dt_prepdoc_check_line(const dt_prepdoc_ctx *ctx, const char *line, size_t n, const char *path,
                          uint64_t lineno, int *skip, dt_error *err) {
    *skip = 0;
    int rc = dt_json_validate(line, n, "", err);
    if (rc) {
        /* the validator's ":1:COL: ..." for this one line becomes "PATH:LINE:COL: ..." */
        const char *rest = strncmp(err->msg, ":1:", 3) == 0 ? err->msg + 2 : err->msg;
        char msg[DT_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", rest);
        return dt_errorf(err, rc, "%s:%llu%s", path, (unsigned long long)lineno, msg);
    }
    cJSON *root = cJSON_ParseWithLength(line, n);
    if (!root) return dt_errorf(err, DT_ENOMEM, "%s:%llu: out of memory parsing JSON", path, (unsigned long long)lineno);
    if (!cJSON_IsObject(root)) {
        rc = dt_errorf(err, DT_EINVAL, "$: expected an object, one document per line");
    } else if (ctx->format == DT_PREP_JSONL) {
        const char *text;
        rc = get_str(root, "text", "$", 0, &text, err);
        if (!rc && !text)
            rc = dt_errorf(err, DT_EINVAL, "$: no \"text\" string (--format jsonl takes {\"text\": ...}%s)",
                           cJSON_GetObjectItemCaseSensitive(root, "messages") ? "; chats are --format chat" : "");
        if (!rc) *skip = text[0] == '\0';
    } else {
        int has_assistant;
        rc = ctx->format == DT_PREP_LLAVA ? check_llava(root, &has_assistant, err)
                                          : check_chat(root, &has_assistant, err);
        if (!rc) *skip = !has_assistant;
    }
    cJSON_Delete(root);
    if (rc && rc != DT_ENOMEM) {
        char msg[DT_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        dt_errorf(err, rc, "%s:%llu: %s", path, (unsigned long long)lineno, msg);
    }
    return rc;
}

/* ---------------------------------------------------------------- pass 2: ids */

typedef struct {
    int32_t *ids;
    uint8_t *mask;
    size_t n, cap;
    int masked;
} doc_out;

static int out_reserve(doc_out *o, size_t more) {
    if (o->n + more <= o->cap) return DT_OK;
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->n + more) cap *= 2;
    int32_t *ni = realloc(o->ids, cap * sizeof *ni);
    if (!ni) return DT_ENOMEM;
    o->ids = ni;
    if (o->masked) {
        uint8_t *nm = realloc(o->mask, cap);
        if (!nm) return DT_ENOMEM;
        o->mask = nm;
    }
    o->cap = cap;
    return DT_OK;
}

static int push_id(doc_out *o, int32_t id, int m) {
    if (out_reserve(o, 1)) return DT_ENOMEM;
    if (o->masked) o->mask[o->n] = (uint8_t)m;
    o->ids[o->n++] = id;
    return DT_OK;
}

static int push_plain(const dt_prepdoc_ctx *ctx, doc_out *o, const char *text, size_t n, int m, dt_error *err);

/* text (no special tokens read from it), each id with mask bit m; in a llava document
 * each <image> becomes image_tokens placeholders (mask 0) and the pieces around it are
 * encoded apart */
static int push_text(const dt_prepdoc_ctx *ctx, doc_out *o, const char *text, size_t n, int m, dt_error *err) {
    const size_t tl = strlen(DT_PREP_IMAGE_TOKEN);
    if (ctx->format != DT_PREP_LLAVA) return push_plain(ctx, o, text, n, m, err);
    const char *end = text + n;
    while (text < end) {
        const char *q = text;
        while (q + tl <= end && memcmp(q, DT_PREP_IMAGE_TOKEN, tl)) q++;
        if (q + tl > end) q = end;
        int rc = push_plain(ctx, o, text, (size_t)(q - text), m, err);
        if (rc) return rc;
        if (q == end) break;
        if (out_reserve(o, (size_t)ctx->image_tokens)) return DT_ENOMEM;
        for (int i = 0; i < ctx->image_tokens; i++) {
            o->ids[o->n + (size_t)i] = ctx->image_id;
            if (o->masked) o->mask[o->n + (size_t)i] = 0;
        }
        o->n += (size_t)ctx->image_tokens;
        text = q + tl;
    }
    return DT_OK;
}

static int push_plain(const dt_prepdoc_ctx *ctx, doc_out *o, const char *text, size_t n, int m, dt_error *err) {
    if (!n) return DT_OK;
    int32_t *ids;
    size_t k;
    int rc = dt_tok_encode(ctx->tok, text, n, 0, &ids, &k, err);
    if (rc) return rc;
    if (out_reserve(o, k)) {
        free(ids);
        return DT_ENOMEM;
    }
    memcpy(o->ids + o->n, ids, k * sizeof *ids);
    if (o->masked) memset(o->mask + o->n, m, k);
    o->n += k;
    free(ids);
    return DT_OK;
}

/* two strings as one segment */
static int push_text2(const dt_prepdoc_ctx *ctx, doc_out *o, const char *a, const char *b, size_t bn, int m,
                      dt_error *err) {
    size_t an = strlen(a);
    char *s = malloc(an + bn + 1);
    if (!s) return DT_ENOMEM;
    memcpy(s, a, an);
    memcpy(s + an, b, bn);
    int rc = push_text(ctx, o, s, an + bn, m, err);
    free(s);
    return rc;
}

/* Python's str.isspace() for the code points Jinja's trim strips (Unicode White_Space
 * plus the C0 separators U+001C..U+001F that Python also counts) */
static int py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* code point starting at s[i] (valid UTF-8), its length in *k */
static uint32_t cp_at(const unsigned char *s, size_t i, size_t *k) {
    unsigned char c = s[i];
    if (c < 0x80) return *k = 1, c;
    if ((c & 0xE0) == 0xC0) return *k = 2, (uint32_t)(c & 0x1F) << 6 | (s[i + 1] & 0x3F);
    if ((c & 0xF0) == 0xE0)
        return *k = 3, (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
    return *k = 4, (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 | (uint32_t)(s[i + 2] & 0x3F) << 6 |
                       (s[i + 3] & 0x3F);
}

/* Jinja's | trim (Python str.strip()) of s: *b, *n */
static void trim(const char *s, const char **b, size_t *n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t len = strlen(s), i = 0, k;
    while (i < len && py_space(cp_at(u, i, &k))) i += k;
    size_t end = i, j = i;
    while (j < len) {
        uint32_t c = cp_at(u, j, &k);
        j += k;
        if (!py_space(c)) end = j;
    }
    *b = s + i;
    *n = end - i;
}

/* One message in the template; assistant content (and the turn's end) trained. */
static int render_message(const dt_prepdoc_ctx *ctx, doc_out *o, const char *role, const char *content,
                          dt_error *err) {
    const int asst = !strcmp(role, ROLES[ROLE_ASSISTANT]);
    int rc;
    if (ctx->chat == DT_CHAT_CHATML) {
        char head[32];
        snprintf(head, sizeof head, "%s\n", role);
        if ((rc = push_id(o, ctx->special[DT_PD_IM_START], 0))) return rc;
        if (asst) {
            if ((rc = push_text(ctx, o, head, strlen(head), 0, err)) ||
                (rc = push_text(ctx, o, content, strlen(content), 1, err)))
                return rc;
        } else if ((rc = push_text2(ctx, o, head, content, strlen(content), 0, err))) {
            return rc;
        }
        if ((rc = push_id(o, ctx->special[DT_PD_IM_END], asst))) return rc;
        return push_text(ctx, o, "\n", 1, 0, err);
    }
    const char *c;
    size_t cn;
    trim(content, &c, &cn);
    if ((rc = push_id(o, ctx->special[DT_PD_START_HEADER], 0)) ||
        (rc = push_text(ctx, o, role, strlen(role), 0, err)) ||
        (rc = push_id(o, ctx->special[DT_PD_END_HEADER], 0)))
        return rc;
    if (asst) {
        if ((rc = push_text(ctx, o, "\n\n", 2, 0, err)) || (rc = push_text(ctx, o, c, cn, 1, err))) return rc;
    } else if ((rc = push_text2(ctx, o, "\n\n", c, cn, 0, err))) {
        return rc;
    }
    return push_id(o, ctx->special[DT_PD_EOT_ID], asst);
}

/* Separator between the instruction and the input of an {"instruction", "input",
 * "output"} record (the Alpaca data's fields, joined as a single user message) */
#define INSTRUCTION_INPUT_SEP "\n\n"

static int render_chat(const dt_prepdoc_ctx *ctx, doc_out *o, const cJSON *root, dt_error *err) {
    int rc;
    if (ctx->chat == DT_CHAT_LLAMA3 && (rc = push_id(o, ctx->special[DT_PD_BEGIN], 0))) return rc;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (msgs) {
        for (const cJSON *m = msgs->child; m; m = m->next) {
            const char *role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
            const char *content = cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring;
            if ((rc = render_message(ctx, o, role, content, err))) return rc;
        }
        return DT_OK;
    }
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(root, "input");
    const char *ins = cJSON_GetObjectItemCaseSensitive(root, "instruction")->valuestring;
    const char *out = cJSON_GetObjectItemCaseSensitive(root, "output")->valuestring;
    if (sys && (rc = render_message(ctx, o, ROLES[0], sys->valuestring, err))) return rc;
    if (input && input->valuestring[0]) {
        size_t a = strlen(ins), s = strlen(INSTRUCTION_INPUT_SEP), b = strlen(input->valuestring);
        char *user = malloc(a + s + b + 1);
        if (!user) return DT_ENOMEM;
        memcpy(user, ins, a);
        memcpy(user + a, INSTRUCTION_INPUT_SEP, s);
        memcpy(user + a + s, input->valuestring, b + 1);
        rc = render_message(ctx, o, ROLES[1], user, err);
        free(user);
    } else {
        rc = render_message(ctx, o, ROLES[1], ins, err);
    }
    return rc ? rc : render_message(ctx, o, ROLES[ROLE_ASSISTANT], out, err);
}

static int render_llava(const dt_prepdoc_ctx *ctx, doc_out *o, const cJSON *root, dt_error *err) {
    int rc;
    if (ctx->chat == DT_CHAT_LLAMA3 && (rc = push_id(o, ctx->special[DT_PD_BEGIN], 0))) return rc;
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(root, "conversations");
    for (const cJSON *m = conv->child; m; m = m->next) {
        const char *from = cJSON_GetObjectItemCaseSensitive(m, "from")->valuestring;
        const char *value = cJSON_GetObjectItemCaseSensitive(m, "value")->valuestring;
        if ((rc = render_message(ctx, o, llava_role(from), value, err))) return rc;
    }
    return DT_OK;
}

int dt_prepdoc_image(const char *bytes, size_t n, char **image, char *id, size_t idn, dt_error *err) {
    *image = NULL;
    if (idn) id[0] = '\0';
    cJSON *root = cJSON_ParseWithLength(bytes, n);
    if (!root) return dt_errorf(err, DT_ENOMEM, "out of memory parsing a record of %zu bytes", n);
    const cJSON *img = cJSON_GetObjectItemCaseSensitive(root, "image");
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (cJSON_IsString(rid)) snprintf(id, idn, "%.200s", rid->valuestring);
    else if (cJSON_IsNumber(rid)) snprintf(id, idn, "%.17g", rid->valuedouble);
    int rc = DT_OK;
    if (cJSON_IsString(img) && !(*image = strdup(img->valuestring)))
        rc = dt_errorf(err, DT_ENOMEM, "out of memory");
    cJSON_Delete(root);
    return rc;
}

int dt_prepdoc_encode(const dt_prepdoc_ctx *ctx, const char *bytes, size_t n, int first, int32_t **ids,
                      uint8_t **mask, size_t *n_ids, dt_error *err) {
    *ids = NULL;
    *mask = NULL;
    *n_ids = 0;
    doc_out o = {.masked = ctx->format == DT_PREP_CHAT || ctx->format == DT_PREP_LLAVA};
    int rc = first ? push_id(&o, ctx->eot, 0) : DT_OK;
    if (!rc && ctx->format == DT_PREP_TEXT) {
        rc = push_text(ctx, &o, bytes, n, 1, err);
    } else if (!rc) {
        /* pass 1 checked the line: valid JSON of the right shape */
        cJSON *root = cJSON_ParseWithLength(bytes, n);
        if (!root) {
            rc = DT_ENOMEM;
        } else if (ctx->format == DT_PREP_JSONL) {
            const char *text = cJSON_GetObjectItemCaseSensitive(root, "text")->valuestring;
            rc = push_text(ctx, &o, text, strlen(text), 1, err);
        } else if (ctx->format == DT_PREP_LLAVA) {
            rc = render_llava(ctx, &o, root, err);
        } else {
            rc = render_chat(ctx, &o, root, err);
        }
        cJSON_Delete(root);
    }
    if (rc) {
        free(o.ids);
        free(o.mask);
        return rc == DT_ENOMEM ? dt_errorf(err, DT_ENOMEM, "out of memory tokenizing a document of %zu bytes", n) : rc;
    }
    *ids = o.ids;
    *mask = o.mask;
    *n_ids = o.n;
    return DT_OK;
}

int dt_prepdoc_render(const dt_prepdoc_ctx *ctx, const char *const *roles, const char *const *contents, size_t n,
                      int add_generation_prompt, int32_t **ids, size_t *n_ids, dt_error *err) {
    *ids = NULL;
    *n_ids = 0;
    doc_out o = {.masked = 0};
    int rc = ctx->chat == DT_CHAT_LLAMA3 ? push_id(&o, ctx->special[DT_PD_BEGIN], 0) : DT_OK;
    for (size_t i = 0; !rc && i < n; i++) rc = render_message(ctx, &o, roles[i], contents[i], err);
    if (!rc && add_generation_prompt) {
        const char *asst = ROLES[ROLE_ASSISTANT];
        if (ctx->chat == DT_CHAT_CHATML) { /* '<|im_start|>assistant\n' */
            if (!(rc = push_id(&o, ctx->special[DT_PD_IM_START], 0))) rc = push_text(ctx, &o, "assistant\n", 10, 0, err);
        } else if (!(rc = push_id(&o, ctx->special[DT_PD_START_HEADER], 0)) &&
                   !(rc = push_text(ctx, &o, asst, strlen(asst), 0, err)) &&
                   !(rc = push_id(&o, ctx->special[DT_PD_END_HEADER], 0))) { /* Llama-3: header + '\n\n' */
            rc = push_text(ctx, &o, "\n\n", 2, 0, err);
        }
    }
    if (rc) {
        free(o.ids);
        return rc == DT_ENOMEM ? dt_errorf(err, DT_ENOMEM, "out of memory rendering a chat of %zu messages", n) : rc;
    }
    *ids = o.ids;
    *n_ids = o.n;
    return DT_OK;
}
