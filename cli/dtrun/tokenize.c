/* tokenize.c — `dtrun tokenize --tokenizer PATH [--decode] [--no-special]`, PATH a
 * tokenizer.json or a SentencePiece tokenizer.model
 * (docs/tokenizers.md): each line of stdin -> its ids, space-separated, one line
 * (like SentencePiece's spm_encode --output_format=id); --decode: each line of ids ->
 * its text. The line's newline is not part of what is encoded. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_dtrun_cli.h"
#include "dt_error.h"
#include "dt_tokenizer.h"

static void tok_usage(FILE *f) {
    fprintf(f,
            "usage: dtrun tokenize --tokenizer TOKENIZER.json|TOKENIZER.model [--decode] [--no-special]\n"
            "Reads text on stdin and prints each line's token ids, space-separated, one line\n"
            "per input line; --decode reads lines of ids and prints their text.\n"
            "--no-special encodes special tokens' text (<|endoftext|>) as ordinary text.\n"
            "Supported: a Hugging Face byte-level BPE tokenizer.json (GPT-2, Llama-3, Qwen2) and a\n"
            "SentencePiece tokenizer.model (Llama-2, Mistral), which never reads control tokens\n"
            "(<s>, </s>) from text.\n");
}

/* bad input, a tokenizer file that cannot be read included, exits 2 (dt_cli_exit_code) */
static int tok_fail(int rc, const dt_error *err) {
    fprintf(stderr, "dtrun tokenize: %s\n", err->msg);
    return dt_cli_exit_code(rc);
}

static int decode_line(const dt_tokenizer *t, char *line, size_t lineno, dt_error *err) {
    size_t n = 0, cap = 64;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return dt_errorf(err, DT_ENOMEM, "out of memory");
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        errno = 0;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ' ' && *end != '\t' && *end != '\r') || v < 0 ||
            v >= dt_tok_vocab_size(t)) {
            free(ids);
            if (end != p && !errno && v >= 0 && (!*end || *end == ' ' || *end == '\t' || *end == '\r'))
                return dt_errorf(err, DT_EINVAL, "line %zu: token id %ld is out of range (vocabulary: 0..%ld)",
                                 lineno, v, (long)dt_tok_vocab_size(t) - 1);
            return dt_errorf(err, DT_EINVAL, "line %zu: expected token ids (integers), got '%.40s'", lineno, p);
        }
        if (n == cap) {
            int32_t *ni = realloc(ids, cap * 2 * sizeof *ids);
            if (!ni) {
                free(ids);
                return dt_errorf(err, DT_ENOMEM, "out of memory");
            }
            ids = ni, cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    char *text;
    size_t len;
    int rc = dt_tok_decode(t, ids, n, &text, &len, err);
    free(ids);
    if (rc) return dt_error_prefix(err, "line %zu", lineno);
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    free(text);
    return DT_OK;
}

static int encode_line(const dt_tokenizer *t, const char *line, size_t len, int with_special,
                       size_t lineno, dt_error *err) {
    int32_t *ids;
    size_t n;
    int rc = dt_tok_encode(t, line, len, with_special, &ids, &n, err);
    if (rc) return dt_error_prefix(err, "line %zu", lineno);
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    putchar('\n');
    free(ids);
    return DT_OK;
}

int dt_cmd_tokenize(int argc, char **argv) {
    const char *path = NULL;
    int decode = 0, with_special = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
            path = argv[++i];
        } else if (!strncmp(argv[i], "--tokenizer=", 12)) {
            path = argv[i] + 12;
        } else if (!strcmp(argv[i], "--decode")) {
            decode = 1;
        } else if (!strcmp(argv[i], "--no-special")) {
            with_special = 0;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            tok_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "dtrun tokenize: unknown or incomplete argument '%s' (see dtrun tokenize --help)\n",
                    argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "dtrun tokenize: --tokenizer TOKENIZER.json|TOKENIZER.model is required (see dtrun tokenize --help)\n");
        return 2;
    }
    dt_error err = {0};
    dt_tokenizer *t;
    int rc = dt_tok_load(path, &t, &err);
    if (rc) return tok_fail(rc, &err);
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t got;
    while (!rc && (got = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        if (n && line[n - 1] == '\n') line[--n] = '\0';
        if (decode) rc = decode_line(t, line, lineno, &err);
        else if (memchr(line, '\0', n)) rc = dt_errorf(&err, DT_EINVAL, "line %zu holds a NUL byte (not text)", lineno);
        else rc = encode_line(t, line, n, with_special, lineno, &err);
    }
    free(line);
    dt_tok_free(t);
    if (rc) {
        fflush(stdout);
        return tok_fail(rc, &err);
    }
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "dtrun tokenize: cannot write the output: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}
