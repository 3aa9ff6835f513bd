/* dt_heartbeat.h — per-rank liveness files so that a rank waiting on a
 * collective that timed out can NAME the rank that died or hangs.
 *
 * Each rank owns RUN_DIR/hb/rank-K, one fixed-size text record rewritten in
 * place every step (one pwrite, no fsync: cost ~1 us, no growth):
 *   step=17 pid=1234 host=node1 wall=1718000000.123 state=run
 * `wall` is CLOCK_REALTIME seconds so ranks on different hosts sharing the run
 * directory (NFS, Lustre) compare; keep host clocks NTP-synced. state is "run"
 * while training and "done" after a clean dt_heartbeat_close. */
#ifndef DT_HEARTBEAT_H
#define DT_HEARTBEAT_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"

#define DT_HEARTBEAT_RECORD_BYTES 256   /* size of each rank's record, bytes */

typedef struct dt_heartbeat dt_heartbeat;

/* Creates RUN_DIR/hb/ (and RUN_DIR) if needed and this rank's file, with a
 * first beat at step -1 ("started"). */
int dt_heartbeat_open(dt_heartbeat **out, const char *run_dir, int rank, dt_error *err);
/* Records that this rank reached `step` now. Returns DT_OK or DT_EIO. */
int dt_heartbeat_beat(dt_heartbeat *h, int64_t step);
/* Writes state=done when `clean` (so the diagnosis does not blame a rank that
 * finished) and closes. NULL is fine. */
void dt_heartbeat_close(dt_heartbeat *h, int clean);

typedef struct dt_heartbeat_rank {
    int present;             /* the file exists and parses */
    int64_t step;
    int pid;
    char host[128];
    double age_s;            /* seconds since the last beat (wall clock) */
    int done;                /* state=done */
    int gone;                /* pid no longer exists (checked only on this host) */
} dt_heartbeat_rank;

/* Reads every rank's record (ranks[world] may be NULL) and writes ONE line to
 * msg naming the most likely culprit, in this order: a rank whose process is
 * gone, a rank that never beat, the rank with the oldest beat if older than
 * stale_s. E.g.
 *   "rank 2 last beat 41 s ago at step 17 (pid 1234, host node1)"
 *   "rank 3 (pid 99, host node1) is gone; its last beat was at step 16, 3 s ago"
 *   "rank 1 never beat (no out/hb/rank-1)"
 * Returns the culprit's rank, or -1 with msg saying every rank beat recently. */
int dt_heartbeat_diagnose(const char *run_dir, int world, double stale_s, dt_heartbeat_rank *ranks,
                          char *msg, size_t cap);

#endif
