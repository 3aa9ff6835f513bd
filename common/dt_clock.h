/* dt_clock.h — the one monotonic clock every room times with: seconds since an
 * arbitrary start (CLOCK_MONOTONIC: never jumps with the wall clock, counts while the
 * process sleeps), so only differences mean anything; and any other POSIX clock the
 * same way (the CPU-time clocks the profilers read). */
#ifndef DT_CLOCK_H
#define DT_CLOCK_H

#include <time.h>

/* Seconds on clock id (CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID). */
static inline double dt_clock_of(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double dt_clock_s(void) { return dt_clock_of(CLOCK_MONOTONIC); }

#endif
