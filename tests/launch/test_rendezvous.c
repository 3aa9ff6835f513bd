/* TCP rendezvous on 127.0.0.1 with forked ranks: blob broadcast, all-gather,
 * barrier for 1/2/4 ranks; a rank that never connects, a client with no rank
 * 0, a rank that dies mid-way, a hung rank, a duplicate rank and a world-size
 * mismatch all end in one clear error within the timeout. */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dt_rendezvous.h"
#include "dt_test.h"
#include "dt_clock.h"

#define BLOB_BYTES 128     /* an ncclUniqueId */
#define RECORD_BYTES 64    /* a host-name record */
#define OK_TIMEOUT_S 20.0  /* generous: the machine is shared */

/* A port nobody listens on right now: bind port 0 and read it back. */
static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (bind(s, (struct sockaddr *)&a, sizeof a) || getsockname(s, (struct sockaddr *)&a, &l)) return -1;
    close(s);
    return ntohs(a.sin_port);
}

/* One rank's full protocol; returns 0 when every check passed. */
static int run_rank(int port, int rank, int world) {
    dt_error err = {0};
    dt_rdzv *r;
    if (dt_rendezvous_open(&r, "127.0.0.1", port, rank, world, OK_TIMEOUT_S, &err)) {
        fprintf(stderr, "rank %d open: %s\n", rank, err.msg);
        return 1;
    }
    int bad = 0;
    unsigned char blob[BLOB_BYTES];
    for (int i = 0; i < BLOB_BYTES; i++) blob[i] = rank == 0 ? (unsigned char)(i * 7 + 3) : 0;
    if (dt_rendezvous_broadcast(r, blob, sizeof blob, &err)) { fprintf(stderr, "bcast: %s\n", err.msg); bad = 1; }
    for (int i = 0; i < BLOB_BYTES && !bad; i++)
        if (blob[i] != (unsigned char)(i * 7 + 3)) bad = 1;
    for (int round = 0; round < 3 && !bad; round++) {
        char mine[RECORD_BYTES] = {0}, all[4 * RECORD_BYTES];
        snprintf(mine, sizeof mine, "host-%d-round-%d", rank, round);
        if (dt_rendezvous_allgather(r, mine, all, RECORD_BYTES, &err)) {
            fprintf(stderr, "allgather: %s\n", err.msg);
            bad = 1;
            break;
        }
        for (int i = 0; i < world; i++) {
            char want[RECORD_BYTES];
            snprintf(want, sizeof want, "host-%d-round-%d", i, round);
            if (strcmp(all + i * RECORD_BYTES, want) != 0) bad = 1;
        }
        if (dt_rendezvous_barrier(r, &err)) { fprintf(stderr, "barrier: %s\n", err.msg); bad = 1; }
    }
    dt_rendezvous_close(r);
    return bad;
}

static void test_world(int world) {
    int port = free_port();
    CHECK(port > 0);
    pid_t pids[8];
    for (int k = 0; k < world; k++) {
        pids[k] = fork();
        if (pids[k] == 0) _exit(run_rank(port, k, world));
    }
    for (int k = 0; k < world; k++) {
        int st = 0;
        waitpid(pids[k], &st, 0);
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) fprintf(stderr, "world %d: rank %d failed\n", world, k);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

static void test_never_connects(void) {
    int port = free_port();
    dt_error err = {0};
    dt_rdzv *r;
    double t0 = dt_clock_s();
    CHECK_EQ_I64(dt_rendezvous_open(&r, "127.0.0.1", port, 0, 4, 1.0, &err), DT_ERUNTIME);
    double took = dt_clock_s() - t0;
    char want[128];
    snprintf(want, sizeof want, "ranks 1, 2, 3 did not connect to 127.0.0.1:%d within 1 s", port);
    CHECK(strstr(err.msg, want) != NULL);
    CHECK(took >= 0.9 && took < 3.0);
    /* the other side: no rank 0 listening */
    t0 = dt_clock_s();
    CHECK_EQ_I64(dt_rendezvous_open(&r, "127.0.0.1", port, 2, 4, 0.5, &err), DT_ERUNTIME);
    took = dt_clock_s() - t0;
    CHECK(strstr(err.msg, "rank 2 could not connect to rank 0 at 127.0.0.1") != NULL);
    CHECK(strstr(err.msg, "Connection refused") != NULL);
    CHECK(took >= 0.4 && took < 2.5);
}

/* Rank 0 runs here; rank `victim` misbehaves (mode 0: exits after joining,
 * 1: hangs); the other ranks run the normal protocol. */
static void test_bad_rank(int mode) {
    const int world = 3, victim = 2;
    int port = free_port();
    pid_t pids[3] = {0};
    for (int k = 1; k < world; k++) {
        pids[k] = fork();
        if (pids[k] != 0) continue;
        if (k != victim) _exit(run_rank(port, k, world));
        dt_error e;
        dt_rdzv *r;
        if (dt_rendezvous_open(&r, "127.0.0.1", port, k, world, OK_TIMEOUT_S, &e)) _exit(9);
        unsigned char blob[BLOB_BYTES];
        dt_rendezvous_broadcast(r, blob, sizeof blob, &e);
        if (mode == 0) _exit(1);   /* dies without closing: the kernel closes the socket */
        sleep(30);                 /* hangs */
        _exit(0);
    }
    dt_error err = {0};
    dt_rdzv *r;
    const double timeout = mode == 0 ? OK_TIMEOUT_S : 2.0;   /* the hang costs one timeout */
    CHECK_EQ_I64(dt_rendezvous_open(&r, "127.0.0.1", port, 0, world, timeout, &err), DT_OK);
    unsigned char blob[BLOB_BYTES];
    for (int i = 0; i < BLOB_BYTES; i++) blob[i] = (unsigned char)(i * 7 + 3);   /* what run_rank expects */
    CHECK_EQ_I64(dt_rendezvous_broadcast(r, blob, sizeof blob, &err), DT_OK);
    double t0 = dt_clock_s();
    char mine[RECORD_BYTES] = "root", all[3 * RECORD_BYTES];
    int rc = dt_rendezvous_allgather(r, mine, all, RECORD_BYTES, &err);
    double took = dt_clock_s() - t0;
    CHECK_EQ_I64(rc, DT_ERUNTIME);
    fprintf(stderr, "  (mode %d: %s, %.2f s)\n", mode, err.msg, took);
    if (mode == 0) {
        CHECK(strstr(err.msg, "rank 2 closed its connection to rank 0 during all-gather") != NULL);
        CHECK(took < 5.0);
    } else {
        CHECK(strstr(err.msg, "rank 2 did not reach the rendezvous all-gather") != NULL);
        CHECK(strstr(err.msg, "within 2 s") != NULL);
        CHECK(took >= 1.9 && took < 4.0);
    }
    /* a failed handle refuses further use */
    CHECK_EQ_I64(dt_rendezvous_barrier(r, &err), DT_ERUNTIME);
    CHECK(strstr(err.msg, "earlier failure") != NULL);
    dt_rendezvous_close(r);   /* rank 1 now sees rank 0 go away */
    int st = 0;
    waitpid(pids[1], &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);   /* rank 1 failed too, did not hang */
    kill(pids[victim], SIGKILL);
    waitpid(pids[victim], &st, 0);
}

static void test_join_errors(void) {
    /* duplicate rank 1 */
    int port = free_port();
    pid_t a = fork();
    if (a == 0) {
        dt_error e;
        dt_rdzv *r;
        _exit(dt_rendezvous_open(&r, "127.0.0.1", port, 1, 3, 5.0, &e) ? 1 : 0);
    }
    pid_t b = fork();
    if (b == 0) {
        dt_error e;
        dt_rdzv *r;
        _exit(dt_rendezvous_open(&r, "127.0.0.1", port, 1, 3, 5.0, &e) ? 1 : 0);
    }
    dt_error err = {0};
    dt_rdzv *r;
    CHECK_EQ_I64(dt_rendezvous_open(&r, "127.0.0.1", port, 0, 3, 5.0, &err), DT_ERUNTIME);
    CHECK(strstr(err.msg, "two processes joined as rank 1") != NULL);
    int st;
    waitpid(a, &st, 0);
    waitpid(b, &st, 0);

    /* world size mismatch */
    port = free_port();
    pid_t c = fork();
    if (c == 0) {
        dt_error e;
        dt_rdzv *rr;
        _exit(dt_rendezvous_open(&rr, "127.0.0.1", port, 1, 4, 5.0, &e) ? 1 : 0);
    }
    CHECK_EQ_I64(dt_rendezvous_open(&r, "127.0.0.1", port, 0, 2, 5.0, &err), DT_ERUNTIME);
    CHECK(strstr(err.msg, "rank 1 joined with world size 4 but rank 0 has 2") != NULL);
    waitpid(c, &st, 0);

    /* bad arguments */
    CHECK_EQ_I64(dt_rendezvous_open(&r, "127.0.0.1", 70000, 0, 2, 1.0, &err), DT_EINVAL);
    CHECK_EQ_I64(dt_rendezvous_open(&r, "127.0.0.1", 1234, 2, 2, 1.0, &err), DT_EINVAL);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    test_world(1);
    test_world(2);
    test_world(4);
    test_never_connects();
    test_bad_rank(0);
    test_bad_rank(1);
    test_join_errors();
    TEST_MAIN_END();
}
