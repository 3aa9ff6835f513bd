/* dt_rundir.h — the output directory's rules (docs/dtrun.md "Output directory
 * and resume"), as DeepSpeed / torchrun users expect them:
 *   - a new run needs --out absent or empty: it never mixes with, prunes or
 *     overwrites what is already there;
 *   - --resume continues the run in --out (from its newest checkpoint; without
 *     one only when --out holds nothing but dtrun's own files);
 *   - --overwrite starts a new run in --out after removing what dtrun wrote
 *     there (metrics.jsonl, run reports, heartbeats, checkpoints); every file
 *     dtrun did not write stays, byte for byte.
 * dtrun's own names: metrics.jsonl, run-report.json, run-report-rankNNNNN.json,
 * hb/, ckpt-NNNNNNNN/, .ckpt-NNNNNNNN.tmp/.old (and their temporary files). */
#ifndef DT_RUNDIR_H
#define DT_RUNDIR_H

#include <stdint.h>
#include <stdio.h>

#include "dt_ckpt.h"
#include "dt_comm.h"
#include "dt_error.h"

typedef enum {
    DT_OUT_NEW = 0,        /* a new run: --out absent or empty */
    DT_OUT_RESUME = 1,     /* --resume */
    DT_OUT_OVERWRITE = 2   /* --overwrite */
} dt_out_mode;

/* Read-only: may a run of this mode write into dir? DT_EINVAL with one line
 * naming dir and what to do instead. */
int dt_rundir_check(const char *dir, dt_out_mode mode, dt_error *err);

/* --overwrite: removes dtrun's own files from dir (checkpoint directories keep
 * any file dtrun did not write, and stay when one is left). */
int dt_rundir_clear(const char *dir, dt_error *err);

/* Collective (every rank of c calls it, before any rank writes into dir):
 * every rank checks (dt_rundir_check), then rank 0 clears (--overwrite) and
 * creates dir, then all continue. *refused: the check failed on every rank
 * alike (rank 0 reports it; no rank wrote anything). */
int dt_rundir_prepare(const char *dir, dt_out_mode mode, dt_comm *c, int *refused, dt_error *err);

/* metrics.jsonl after a resume from step: keeps its complete lines, in
 * increasing step order, up to that step and drops the rest, atomically
 * (temp file, fsync, rename); a missing file is left missing. */
int dt_metrics_truncate(const char *path, int64_t step, dt_error *err);

/* metrics.jsonl's writer, every write checked: before printing a line, good =
 * dt_metrics_size(f); after it dt_metrics_commit flushes the line and, when the
 * write fails (a full disk), removes whatever part of it reached the file, so
 * the file ends with the last complete line, and returns DT_EIO naming path.
 * dt_metrics_close flushes, fsyncs and closes (*f = NULL). */
int64_t dt_metrics_size(FILE *f);
int dt_metrics_commit(FILE *f, int64_t good, const char *path, dt_error *err);
int dt_metrics_close(FILE **f, const char *path, dt_error *err);

/* A new random run id: DT_RUN_ID_LEN hex digits. */
void dt_run_id_new(char id[DT_RUN_ID_LEN + 1]);

#endif
