/* adapter_internal.h — what adapter.c gives adapter_merge.c (engine/store only): the
 * tensors of a Hugging Face model directory's safetensors, listed by name, and the
 * temporary output directory both writers use. */
#ifndef DT_ADAPTER_INTERNAL_H
#define DT_ADAPTER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_safetensors.h"

#define DT_HFW_INDEX_FILE "model.safetensors.index.json"
#define DT_HFW_SINGLE_FILE "model.safetensors"
#define DT_HFW_PATH_MAX 4096

typedef struct dt_hfw_entry {
    int file;                  /* index into files */
    const dt_st_tensor *t;
} dt_hfw_entry;

/* A model directory's weights: model.safetensors, else every shard the index names (each
 * opened: header validated, size checked against it, mapped; pages read on use). */
typedef struct dt_hfw {
    int nfiles;
    dt_st_file **files;
    char (*fname)[256];
    int n;
    dt_hfw_entry *by_name;     /* n entries sorted by tensor name */
    dt_hfw_entry *in_order;    /* n entries in file order (files in index order, tensors in header order) */
} dt_hfw;

int dt_hfw_open(const char *dir, dt_hfw **out, dt_error *err);
void dt_hfw_close(dt_hfw *w);
const dt_hfw_entry *dt_hfw_find(const dt_hfw *w, const char *name);   /* NULL if absent */
/* The fingerprint of dt_adapter.h over w's tensors. */
void dt_hfw_fingerprint(const dt_hfw *w, char hex[65]);

struct dt_adapter;
struct dt_adapter_entry;
/* The base tensor an adapter tensor applies to: the family's prefix + the module's ".weight"
 * (or a saved tensor's own name), else the same without the prefix (GPT2Model's bare keys);
 * NULL when w has neither. key (n bytes) gets the key found, or the prefixed one. */
const dt_hfw_entry *dt_adapter_base_find(const struct dt_adapter *a, const struct dt_adapter_entry *e, const dt_hfw *w,
                                         char *key, size_t n);
/* 1 when e is a SEQ_CLS adapter's score head ("score.weight", transformers'
 * *ForSequenceClassification.score in PEFT's modules_to_save): a tensor a causal-LM base lacks. */
int dt_adapter_is_score_head(const struct dt_adapter *a, const struct dt_adapter_entry *e);
/* dt_adapter_check_base on an open directory. */
int dt_adapter_check_hfw(const struct dt_adapter *a, const dt_hfw *w, const char *hfdir, dt_error *err);

/* out = dir + "/" + name; DT_EINVAL naming both when it does not fit in n bytes. */
int dt_path_join(char *out, size_t n, const char *dir, const char *name, dt_error *err);

/* out must not exist, or be an empty directory; its parent must exist. A new directory
 * "<out>.tmpXXXXXX" beside it is created in tmp (n bytes). */
int dt_outdir_begin(const char *out, const char *what, char *tmp, size_t n, dt_error *err);
/* fsyncs tmp, renames it onto out, fsyncs the parent. */
int dt_outdir_commit(const char *tmp, const char *out, dt_error *err);
/* Removes the files in tmp (all written by this process) and tmp. */
void dt_outdir_abort(const char *tmp);

#endif
