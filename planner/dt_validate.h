/* dt_validate.h — the validation suite of published measurements (docs/validation.md):
 * one case per file, "dtplan.validation/1", holding a cited source, the configuration the
 * source ran and what it measured; dt_validate_case_predict predicts the same quantity
 * with the planner's models.
 *
 * Units: bytes for memory, samples/s or tokens/s per GPU for throughput, seconds for
 * times. A "fits" case measured whether the run fit in the device's memory (1) or ran
 * out of it (0). */
#ifndef DT_VALIDATE_H
#define DT_VALIDATE_H

#include <stdint.h>

#include "dt_plan.h"

#define DT_VALIDATION_FORMAT "dtplan.validation/1"
#define DT_VAL_TEXT_MAX 512
#define DT_VAL_NAME_MAX 96
#define DT_VAL_MAX_NOTES 4

typedef enum {
    DT_VAL_SAMPLES_PER_S = 0,   /* global samples (sequences) per second */
    DT_VAL_TOKENS_PER_S_GPU,    /* tokens per second per GPU */
    DT_VAL_PEAK_BYTES,          /* peak device memory per GPU */
    DT_VAL_FITS,                /* the run fit in device memory (1) or not (0) */
    DT_VAL_PEAK_ALLOCATED_BYTES,/* peak bytes the framework's allocator handed out per GPU
                                 * (torch.cuda.max_memory_allocated): the device peak less the
                                 * reserve (CUDA context, allocator caching, library workspaces) */
    DT_VAL_MODEL_TFLOPS_GPU,    /* model FLOP/s per GPU in 1e12 (no recompute counted): the step's
                                 * dt_model_train_flops_per_seq x global batch / step / GPUs */
    DT_VAL_QUANTITY_COUNT
} dt_val_quantity;

typedef struct dt_val_case {
    char name[DT_VAL_NAME_MAX];
    char title[DT_VAL_TEXT_MAX], url[DT_VAL_TEXT_MAX], where[DT_VAL_TEXT_MAX], quote[DT_VAL_TEXT_MAX];
    int n_notes;                                  /* "assumptions": inputs the source does not state */
    char notes[DT_VAL_MAX_NOTES][DT_VAL_TEXT_MAX];
    char rank_group[DT_VAL_NAME_MAX];             /* "" or the group whose order must be kept */
    dt_plan plan;                                 /* the configuration, runtime included */
    dt_val_quantity quantity;
    double measured;                              /* in the quantity's unit; fits: 1 or 0 */
} dt_val_case;

typedef struct dt_val_result {
    double predicted;          /* in the quantity's unit; fits: 1 or 0 */
    double error;              /* (predicted - measured) / measured; fits: 0 agree, 1 disagree */
    int64_t peak_bytes;        /* the predicted device peak (every case) */
    double step_s;             /* the predicted step (every case) */
} dt_val_result;

/* Parses a case text (strict: unknown keys, missing keys and wrong types are errors
 * naming the JSON path); what names the file in messages. */
int dt_validate_case_parse(const char *json, const char *what, dt_val_case *out, dt_error *err);
int dt_validate_case_load(const char *path, dt_val_case *out, dt_error *err);
/* Predicts the case's quantity with dt_memory_estimate and dt_time_estimate. */
int dt_validate_case_predict(const dt_val_case *c, dt_val_result *out, dt_error *err);

const char *dt_val_quantity_name(dt_val_quantity q);   /* "samples_per_s", ... */

#endif
