/* rendezvous.c — TCP bootstrap channel (dt_rendezvous.h).
 *
 * Wire format, every message: header {uint32 magic, uint32 kind, uint32 rank,
 * uint32 bytes} in network byte order, then `bytes` payload bytes. Sockets are
 * non-blocking; every read/write loops on poll() with the call's deadline. */
#define _GNU_SOURCE
#include "dt_rendezvous.h"
#include "dt_clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RDZV_MAGIC 0x64747276u        /* "dtrv" */
#define RDZV_RETRY_MS 100             /* connect retry period */

enum { K_HELLO = 1, K_BCAST, K_GATHER, K_BARRIER };

static const char *kind_name(uint32_t k) {
    switch (k) {
    case K_HELLO: return "join";
    case K_BCAST: return "broadcast";
    case K_GATHER: return "all-gather";
    default: return "barrier";
    }
}

struct dt_rdzv {
    int rank, world;
    double timeout_s;
    char addr[256];
    int port;
    int fd;          /* ranks > 0: the socket to rank 0 */
    int *peer;       /* rank 0: peer[r] socket of rank r (peer[0] = -1) */
    int broken;
};

static int ms_left(double deadline) {
    double left = deadline - dt_clock_s();
    return left <= 0 ? 0 : (int)(left * 1000.0) + 1;
}

static void set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* 0 ok; 1 timeout; 2 peer closed; 3 other error (errno). */
static int io_all(int fd, void *buf, size_t n, int writing, double deadline) {
    char *p = buf;
    while (n) {
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k > 0) { p += k; n -= (size_t)k; continue; }
        if (k == 0 && !writing) return 2;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EPIPE || errno == ECONNRESET)) return 2;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return 3;
        struct pollfd pf = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int left = ms_left(deadline);
        if (left == 0) return 1;
        int r = poll(&pf, 1, left);
        if (r == 0) return 1;
        if (r < 0 && errno != EINTR) return 3;
    }
    return 0;
}

static void put_hdr(uint32_t h[4], uint32_t kind, uint32_t rank, uint32_t bytes) {
    h[0] = htonl(RDZV_MAGIC);
    h[1] = htonl(kind);
    h[2] = htonl(rank);
    h[3] = htonl(bytes);
}

/* Sends header + payload to `fd` (peer `who` for messages). */
static int send_msg(dt_rdzv *r, int fd, int who, uint32_t kind, const void *data, size_t bytes,
                    double deadline, dt_error *err) {
    uint32_t h[4];
    put_hdr(h, kind, (uint32_t)r->rank, (uint32_t)bytes);
    int rc = io_all(fd, h, sizeof h, 1, deadline);
    if (!rc && bytes) rc = io_all(fd, (void *)data, bytes, 1, deadline);
    if (!rc) return DT_OK;
    r->broken = 1;
    if (rc == 1)
        return dt_errorf(err, DT_ERUNTIME, "rendezvous %s: sending to rank %d did not finish within %.0f s",
                         kind_name(kind), who, r->timeout_s);
    if (rc == 2)
        return dt_errorf(err, DT_ERUNTIME, "rank %d closed its connection%s during %s (it exited or crashed)",
                         who, r->rank == 0 ? " to rank 0" : "", kind_name(kind));
    return dt_errorf(err, DT_ERUNTIME, "rendezvous %s: send to rank %d failed: %s", kind_name(kind), who,
                     strerror(errno));
}

/* Receives a message of `kind` from peer `who` with exactly `bytes` payload. */
static int recv_msg(dt_rdzv *r, int fd, int who, uint32_t kind, void *data, size_t bytes, double deadline,
                    dt_error *err) {
    uint32_t h[4];
    int rc = io_all(fd, h, sizeof h, 0, deadline);
    if (!rc) {
        if (ntohl(h[0]) != RDZV_MAGIC || ntohl(h[1]) != kind || ntohl(h[3]) != bytes) {
            r->broken = 1;
            return dt_errorf(err, DT_ERUNTIME, "rendezvous %s: rank %d sent %s of %u bytes where %s of %zu was "
                             "expected (ranks are running different programs or steps)",
                             kind_name(kind), who, ntohl(h[0]) == RDZV_MAGIC ? kind_name(ntohl(h[1])) : "garbage",
                             ntohl(h[3]), kind_name(kind), bytes);
        }
        if (bytes) rc = io_all(fd, data, bytes, 0, deadline);
    }
    if (!rc) return DT_OK;
    r->broken = 1;
    if (rc == 1)
        return dt_errorf(err, DT_ERUNTIME, "rank %d did not reach the rendezvous %s within %.0f s "
                         "(it is hung, slow or dead; see hb/ heartbeats)", who, kind_name(kind), r->timeout_s);
    if (rc == 2)
        return dt_errorf(err, DT_ERUNTIME, "rank %d closed its connection%s during %s (it exited or crashed)",
                         who, r->rank == 0 ? " to rank 0" : "", kind_name(kind));
    return dt_errorf(err, DT_ERUNTIME, "rendezvous %s: receive from rank %d failed: %s", kind_name(kind), who,
                     strerror(errno));
}

static int listen_on(int port, dt_error *err) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(NULL, ps, &hints, &res);
    if (g) return dt_errorf(err, DT_ERUNTIME, "rendezvous: cannot resolve the listening address: %s", gai_strerror(g)), -1;
    int fd = -1, last = 0;
    /* prefer IPv6 wildcard (dual stack on Linux), fall back to IPv4 */
    for (int pass = 0; pass < 2 && fd < 0; pass++)
        for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
            if ((pass == 0) != (a->ai_family == AF_INET6)) continue;
            int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (s < 0) { last = errno; continue; }
            int one = 1, zero = 0;
            setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (a->ai_family == AF_INET6) setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, 1024) == 0) fd = s;
            else { last = errno; close(s); }
        }
    freeaddrinfo(res);
    if (fd < 0) {
        dt_errorf(err, DT_ERUNTIME, "rank 0 cannot listen on port %d: %s%s", port, strerror(last),
                  last == EADDRINUSE ? " (another job uses it: pick another --master-port / MASTER_PORT)" : "");
        return -1;
    }
    set_nonblock(fd);
    return fd;
}

/* Connects to addr:port, retrying until the deadline. */
static int connect_to(const char *addr, int port, int rank, double timeout_s, double deadline, dt_error *err) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int last = ETIMEDOUT;
    char why[160] = "";
    do {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(addr, ps, &hints, &res);
        if (g) {
            snprintf(why, sizeof why, "cannot resolve '%s': %s", addr, gai_strerror(g));
        } else {
            for (struct addrinfo *a = res; a; a = a->ai_next) {
                int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
                if (s < 0) { last = errno; continue; }
                int c = connect(s, a->ai_addr, a->ai_addrlen);
                if (c < 0 && errno == EINPROGRESS) {
                    struct pollfd pf = {s, POLLOUT, 0};
                    int left = ms_left(deadline);
                    if (poll(&pf, 1, left) == 1) {
                        int e = 0;
                        socklen_t l = sizeof e;
                        getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &l);
                        c = e ? -1 : 0;
                        errno = e ? e : ETIMEDOUT;
                    } else {
                        c = -1;
                        errno = ETIMEDOUT;
                    }
                }
                if (c == 0) {
                    freeaddrinfo(res);
                    set_nonblock(s);
                    return s;
                }
                last = errno;
                close(s);
            }
            freeaddrinfo(res);
            snprintf(why, sizeof why, "%s", strerror(last));
        }
        int left = ms_left(deadline);
        struct timespec ts = {0, (long)(left < RDZV_RETRY_MS ? left : RDZV_RETRY_MS) * 1000000L};
        nanosleep(&ts, NULL);
    } while (ms_left(deadline) > 0);
    dt_errorf(err, DT_ERUNTIME, "rank %d could not connect to rank 0 at %s:%d within %.0f s (last error: %s); "
              "is rank 0 running and MASTER_ADDR/MASTER_PORT right?", rank, addr, port, timeout_s, why);
    return -1;
}

void dt_rendezvous_close(dt_rdzv *r) {
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    if (r->peer)
        for (int i = 0; i < r->world; i++)
            if (r->peer[i] >= 0) close(r->peer[i]);
    free(r->peer);
    free(r);
}

/* Rank 0: accepts world-1 peers; each sends HELLO {rank, world}. */
static int accept_all(dt_rdzv *r, int lfd, double deadline, dt_error *err) {
    int joined = 1;
    while (joined < r->world) {
        struct pollfd pf = {lfd, POLLIN, 0};
        int left = ms_left(deadline);
        int p = left ? poll(&pf, 1, left) : 0;
        if (p < 0 && errno == EINTR) continue;
        if (p <= 0) {
            char missing[256] = "";
            size_t n = 0;
            int count = 0;
            for (int i = 1; i < r->world; i++)
                if (r->peer[i] < 0) {
                    if (count < 8)
                        n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", count ? ", " : "", i);
                    count++;
                }
            return dt_errorf(err, DT_ERUNTIME, "rank%s %s%s did not connect to %s:%d within %.0f s "
                             "(not started, wrong MASTER_ADDR/MASTER_PORT, or a firewall)",
                             count > 1 ? "s" : "", missing, count > 8 ? ", ..." : "", r->addr, r->port,
                             r->timeout_s);
        }
        int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (s < 0) continue;
        set_nonblock(s);
        uint32_t h[4], body[2];
        int rc = io_all(s, h, sizeof h, 0, deadline);
        if (!rc && (ntohl(h[0]) != RDZV_MAGIC || ntohl(h[1]) != K_HELLO || ntohl(h[3]) != sizeof body)) {
            close(s);   /* a stray client (port scanner, old job): ignore it */
            continue;
        }
        if (!rc) rc = io_all(s, body, sizeof body, 0, deadline);
        if (rc) { close(s); continue; }
        int pr = (int)ntohl(body[0]), pw = (int)ntohl(body[1]);
        if (pw != r->world) {
            close(s);
            return dt_errorf(err, DT_ERUNTIME, "rank %d joined with world size %d but rank 0 has %d: "
                             "the ranks were launched with different WORLD_SIZE/--nnodes", pr, pw, r->world);
        }
        if (pr <= 0 || pr >= r->world) {
            close(s);
            return dt_errorf(err, DT_ERUNTIME, "a peer joined as rank %d, outside 1..%d", pr, r->world - 1);
        }
        if (r->peer[pr] >= 0) {
            close(s);
            return dt_errorf(err, DT_ERUNTIME, "two processes joined as rank %d: check RANK / --node-rank "
                             "on every node", pr);
        }
        r->peer[pr] = s;
        joined++;
    }
    return DT_OK;
}

int dt_rendezvous_open(dt_rdzv **out, const char *addr, int port, int rank, int world, double timeout_s,
                       dt_error *err) {
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world)
        return dt_errorf(err, DT_EINVAL, "rendezvous: rank %d outside world of %d", rank, world);
    if (port < 1 || port > 65535)
        return dt_errorf(err, DT_EINVAL, "rendezvous port %d is outside 1..65535 (MASTER_PORT + %d)", port,
                         DT_RENDEZVOUS_PORT_OFFSET);
    if (!(timeout_s > 0)) return dt_errorf(err, DT_EINVAL, "rendezvous timeout must be > 0 s");
    dt_rdzv *r = calloc(1, sizeof *r);
    if (!r) return dt_errorf(err, DT_ENOMEM, "out of memory (rendezvous)");
    r->rank = rank;
    r->world = world;
    r->timeout_s = timeout_s;
    r->port = port;
    r->fd = -1;
    snprintf(r->addr, sizeof r->addr, "%s", addr ? addr : "127.0.0.1");
    const double deadline = dt_clock_s() + timeout_s;
    if (world == 1) { *out = r; return DT_OK; }
    if (rank == 0) {
        r->peer = malloc((size_t)world * sizeof *r->peer);
        if (!r->peer) { free(r); return dt_errorf(err, DT_ENOMEM, "out of memory (rendezvous)"); }
        for (int i = 0; i < world; i++) r->peer[i] = -1;
        int lfd = listen_on(port, err);
        if (lfd < 0) { dt_rendezvous_close(r); return DT_ERUNTIME; }
        int rc = accept_all(r, lfd, deadline, err);
        close(lfd);
        if (rc) { dt_rendezvous_close(r); return rc; }
    } else {
        r->fd = connect_to(r->addr, port, rank, timeout_s, deadline, err);
        if (r->fd < 0) { dt_rendezvous_close(r); return DT_ERUNTIME; }
        uint32_t body[2] = {htonl((uint32_t)rank), htonl((uint32_t)world)};
        int rc = send_msg(r, r->fd, 0, K_HELLO, body, sizeof body, deadline, err);
        if (rc) { dt_rendezvous_close(r); return rc; }
    }
    *out = r;
    return DT_OK;
}

static int usable(dt_rdzv *r, size_t bytes, dt_error *err) {
    if (r->broken) return dt_errorf(err, DT_ERUNTIME, "rendezvous used after an earlier failure");
    if (bytes > DT_RENDEZVOUS_MAX_BYTES)
        return dt_errorf(err, DT_EINVAL, "rendezvous message of %zu bytes exceeds %d (bootstrap data only)",
                         bytes, DT_RENDEZVOUS_MAX_BYTES);
    return DT_OK;
}

int dt_rendezvous_broadcast(dt_rdzv *r, void *buf, size_t bytes, dt_error *err) {
    if (usable(r, bytes, err)) return err->code;
    const double deadline = dt_clock_s() + r->timeout_s;
    if (r->world == 1) return DT_OK;
    if (r->rank != 0) return recv_msg(r, r->fd, 0, K_BCAST, buf, bytes, deadline, err);
    for (int i = 1; i < r->world; i++)
        if (send_msg(r, r->peer[i], i, K_BCAST, buf, bytes, deadline, err)) return err->code;
    return DT_OK;
}

/* Rank 0 gathers `bytes` from every peer in whatever order they arrive. */
static int gather_at_root(dt_rdzv *r, uint32_t kind, char *all, size_t bytes, double deadline, dt_error *err) {
    int pending = r->world - 1;
    char *got = calloc((size_t)r->world, 1);
    struct pollfd *pf = calloc((size_t)r->world, sizeof *pf);
    if (!got || !pf) { free(got); free(pf); return dt_errorf(err, DT_ENOMEM, "out of memory (rendezvous)"); }
    int rc = DT_OK;
    while (pending && !rc) {
        int n = 0;
        for (int i = 1; i < r->world; i++)
            if (!got[i]) pf[n++] = (struct pollfd){r->peer[i], POLLIN, 0};
        int left = ms_left(deadline);
        int p = left ? poll(pf, (nfds_t)n, left) : 0;
        if (p < 0 && errno == EINTR) continue;
        if (p <= 0) {
            int first = -1;
            for (int i = 1; i < r->world && first < 0; i++)
                if (!got[i]) first = i;
            r->broken = 1;
            rc = dt_errorf(err, DT_ERUNTIME, "rank %d%s did not reach the rendezvous %s within %.0f s "
                           "(it is hung, slow or dead; see hb/ heartbeats)",
                           first, pending > 1 ? " (and others)" : "", kind_name(kind), r->timeout_s);
            break;
        }
        for (int i = 1; i < r->world && !rc; i++) {
            if (got[i]) continue;
            int k = 0;
            for (; k < n; k++)
                if (pf[k].fd == r->peer[i]) break;
            if (k == n || !pf[k].revents) continue;
            rc = recv_msg(r, r->peer[i], i, kind, all + (size_t)i * bytes, bytes, deadline, err);
            got[i] = 1;
            pending--;
        }
    }
    free(got);
    free(pf);
    return rc;
}

int dt_rendezvous_allgather(dt_rdzv *r, const void *mine, void *all, size_t bytes, dt_error *err) {
    if (usable(r, bytes * (size_t)r->world, err)) return err->code;
    const double deadline = dt_clock_s() + r->timeout_s;
    char *a = all;
    memmove(a + (size_t)r->rank * bytes, mine, bytes);
    if (r->world == 1) return DT_OK;
    const size_t total = bytes * (size_t)r->world;
    if (r->rank != 0) {
        if (send_msg(r, r->fd, 0, K_GATHER, mine, bytes, deadline, err)) return err->code;
        return recv_msg(r, r->fd, 0, K_GATHER, a, total, deadline, err);
    }
    if (gather_at_root(r, K_GATHER, a, bytes, deadline, err)) return err->code;
    for (int i = 1; i < r->world; i++)
        if (send_msg(r, r->peer[i], i, K_GATHER, a, total, deadline, err)) return err->code;
    return DT_OK;
}

int dt_rendezvous_barrier(dt_rdzv *r, dt_error *err) {
    if (usable(r, 0, err)) return err->code;
    const double deadline = dt_clock_s() + r->timeout_s;
    if (r->world == 1) return DT_OK;
    if (r->rank != 0) {
        if (send_msg(r, r->fd, 0, K_BARRIER, NULL, 0, deadline, err)) return err->code;
        return recv_msg(r, r->fd, 0, K_BARRIER, NULL, 0, deadline, err);
    }
    char none[1];   /* zero-byte records: a valid base pointer for the offsets */
    if (gather_at_root(r, K_BARRIER, none, 0, deadline, err)) return err->code;
    for (int i = 1; i < r->world; i++)
        if (send_msg(r, r->peer[i], i, K_BARRIER, NULL, 0, deadline, err)) return err->code;
    return DT_OK;
}
