/* ckpt_tp.h — checkpoints of tensor-parallel runs (ckpt.c's hooks; docs/parallelism.md "In
 * dtrun"). A run at tp > 1 writes the checkpoint a tp 1 run of the same plan writes: the
 * weights whole, under their Hugging Face names, and the optimizer shards' "ranges" in the
 * whole model's flat layout (each split tensor's slice mapped to its place in the whole;
 * a replicated tensor written by TP rank 0 only), so any TP degree and world size resumes
 * it. With tp 1 every function is the plain case. */
#ifndef DT_CKPT_TP_H
#define DT_CKPT_TP_H

#include <stddef.h>

#include "dt_comm.h"
#include "dt_error.h"
#include "dt_filesum.h"
#include "dt_lm.h"
#include "dt_zero.h"

/* the TP degree g was built with (1: none) */
int ckpt_tp_size(const dt_lm *g);
/* the whole model's trained elements (dt_lm_num_params at tp 1) */
size_t ckpt_tp_params(const dt_lm *g);
/* This rank's optimizer ranges with flat_begin in the whole model's layout, in state order
 * (*out malloc'd, *n of them); for_save: a replicated tensor's only on TP rank 0 (every
 * rank reads them back). */
int ckpt_tp_ranges(const dt_zero *z, const dt_lm *g, int for_save, dt_zero_range **out, int *n, dt_error *err);
/* The whole weights into path on the rank with write != 0 (world rank 0): collective over
 * the TP group of data-parallel rank 0 (dp_rank0: this rank is in it; the others join the
 * ZeRO-3 gathers only). sum: the file's (may be NULL). */
int ckpt_tp_weights_save(dt_lm *g, dt_zero *z, dt_dtype pdt, int dp_rank0, int write, const char *path,
                         dt_file_sum *sum, dt_error *err);
/* dt_zero_load_params from a whole-weights safetensors file (a checkpoint's
 * model.safetensors, any TP degree): each element of this rank's slices read from its
 * place in the whole tensor, converted to pdt */
int ckpt_tp_weights_load(dt_zero *z, const dt_lm *g, dt_dtype pdt, const char *path, dt_error *err);

#endif
