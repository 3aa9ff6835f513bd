/* launch.c — rank discovery (flags > torchrun > Open MPI > Slurm), the plan-vs-
 * launched-world check, and the local spawner (mpirun + one supervisor per
 * rank so the launcher can name the rank that failed). docs/launch.md. */
#define _GNU_SOURCE
#include "dt_launch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* SIGTERM -> SIGKILL grace when tearing the job down (torchrun waits 30 s:
 * PyTorch torch/distributed/elastic/multiprocessing/api.py, PContext.close's
 * timeout; our ranks hold no state worth that long: checkpoints are
 * written atomically, so a killed rank never leaves a torn one). */
#define DT_LAUNCH_TEARDOWN_GRACE_S 5.0
#define DT_LAUNCH_POLL_NS 20000000L   /* 20 ms wait-loop period */

const char *dt_launch_source_name(dt_launch_source s) {
    switch (s) {
    case DT_LAUNCH_SRC_FLAGS: return "flags";
    case DT_LAUNCH_SRC_TORCHRUN: return "torchrun";
    case DT_LAUNCH_SRC_MPI: return "mpi";
    case DT_LAUNCH_SRC_SLURM: return "slurm";
    default: return "none";
    }
}

/* ---- flags ------------------------------------------------------------ */

void dt_launch_flags_init(dt_launch_flags *f) {
    memset(f, 0, sizeof *f);
    f->nnodes = f->node_rank = f->nproc_per_node = f->master_port = -1;
}

static int parse_int(const char *s, int min, int max, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) return -1;
    *out = (int)v;
    return 0;
}

/* Matches "--name" / "--name=V" in dash or underscore spelling. Returns the
 * value pointer (the next argv when not inline; *used = 2) or NULL. */
static int flag_is(const char *arg, const char *dash_name, const char **inline_val) {
    if (arg[0] != '-' || arg[1] != '-') return 0;
    const char *a = arg + 2, *n = dash_name;
    while (*n && (*a == *n || (*n == '-' && *a == '_'))) a++, n++;
    if (*n) return 0;
    if (*a == '=') { *inline_val = a + 1; return 1; }
    if (*a == 0) { *inline_val = NULL; return 1; }
    return 0;
}

int dt_launch_flags_parse(dt_launch_flags *f, int *argc, char **argv, dt_error *err) {
    static const char *names[] = {"nnodes", "node-rank", "nproc-per-node", "master-addr", "master-port"};
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        int which = -1;
        const char *val = NULL;
        for (int k = 0; k < 5 && which < 0; k++)
            if (flag_is(argv[i], names[k], &val)) which = k;
        if (which < 0) { argv[out++] = argv[i]; continue; }
        if (!val) {
            if (i + 1 >= *argc)
                return dt_errorf(err, DT_EINVAL, "--%s needs a value", names[which]);
            val = argv[++i];
        }
        int v = 0;
        switch (which) {
        case 0:
            if (parse_int(val, 1, 1 << 20, &v))
                return dt_errorf(err, DT_EINVAL, "--nnodes expects a node count >= 1, got '%s' "
                                 "(elastic MIN:MAX ranges are not supported)", val);
            f->nnodes = v;
            break;
        case 1:
            if (parse_int(val, 0, 1 << 20, &v))
                return dt_errorf(err, DT_EINVAL, "--node-rank expects an integer >= 0, got '%s'", val);
            f->node_rank = v;
            break;
        case 2:
            if (parse_int(val, 1, 1 << 16, &v))
                return dt_errorf(err, DT_EINVAL, "--nproc-per-node expects a rank count >= 1, got '%s'", val);
            f->nproc_per_node = v;
            break;
        case 3:
            if (!*val || strlen(val) >= DT_LAUNCH_ADDR_MAX)
                return dt_errorf(err, DT_EINVAL, "--master-addr expects a host name or address, got '%s'", val);
            strcpy(f->master_addr, val);
            break;
        case 4:
            if (parse_int(val, 1, 65535, &v))
                return dt_errorf(err, DT_EINVAL, "--master-port expects a TCP port 1..65535, got '%s'", val);
            f->master_port = v;
            break;
        }
        f->given++;
    }
    *argc = out;
    argv[out] = NULL;
    return DT_OK;
}

/* ---- environment ---------------------------------------------------------- */

/* 1 = set and parsed, 0 = unset, -1 = set but not an integer >= min (err filled). */
static int env_int(const char *name, int min, int *out, dt_error *err) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    if (parse_int(s, min, INT_MAX, out)) {
        dt_errorf(err, DT_EINVAL, "%s='%s' is not an integer >= %d", name, s, min);
        return -1;
    }
    return 1;
}

/* First of several spellings that is set. */
static int env_int2(const char *a, const char *b, int min, int *out, const char **used, dt_error *err) {
    int r = env_int(a, min, out, err);
    *used = a;
    if (r == 0 && b) { r = env_int(b, min, out, err); *used = b; }
    return r;
}

static void set_master_from_env(dt_launch_info *li) {
    const char *a = getenv("MASTER_ADDR");
    if (a && *a && strlen(a) < DT_LAUNCH_ADDR_MAX) strcpy(li->master_addr, a);
    int p;
    const char *s = getenv("MASTER_PORT");
    if (s && parse_int(s, 1, 65535, &p) == 0) li->master_port = p;
}

/* A rank/size pair and a local pair that must be ordered. */
static int check_ranks(const dt_launch_info *li, const char *rank_var, const char *world_var,
                       const char *lrank_var, const char *lworld_var, dt_error *err) {
    if (li->rank >= li->world)
        return dt_errorf(err, DT_EINVAL, "%s=%d is not below %s=%d: inconsistent launcher variables",
                         rank_var, li->rank, world_var, li->world);
    if (li->local_rank >= li->local_world)
        return dt_errorf(err, DT_EINVAL, "%s=%d is not below %s=%d: inconsistent launcher variables",
                         lrank_var, li->local_rank, lworld_var, li->local_world);
    if (li->local_world > li->world)
        return dt_errorf(err, DT_EINVAL, "%s=%d exceeds %s=%d: inconsistent launcher variables",
                         lworld_var, li->local_world, world_var, li->world);
    return DT_OK;
}

static int discover_torchrun(dt_launch_info *li, dt_error *err) {
    int r, w, have_r, have_w;
    if ((have_r = env_int("RANK", 0, &r, err)) < 0) return DT_EINVAL;
    if ((have_w = env_int("WORLD_SIZE", 1, &w, err)) < 0) return DT_EINVAL;
    if (have_r != have_w)
        return dt_errorf(err, DT_EINVAL, "%s is set but %s is not: torchrun sets both (unset the stray one)",
                         have_r ? "RANK" : "WORLD_SIZE", have_r ? "WORLD_SIZE" : "RANK");
    li->rank = r;
    li->world = w;
    int lr = r, lw = w, g, gw;
    int have_lr = env_int("LOCAL_RANK", 0, &lr, err);
    int have_lw = env_int("LOCAL_WORLD_SIZE", 1, &lw, err);
    int have_g = env_int("GROUP_RANK", 0, &g, err);
    int have_gw = env_int("GROUP_WORLD_SIZE", 1, &gw, err);
    if (have_lr < 0 || have_lw < 0 || have_g < 0 || have_gw < 0) return DT_EINVAL;
    if (have_lr && !have_lw) lw = w;   /* single node: every rank is local */
    li->local_rank = lr;
    li->local_world = lw;
    if (check_ranks(li, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", err)) return DT_EINVAL;
    li->nnodes = have_gw ? gw : (w + lw - 1) / lw;
    li->node_rank = have_g ? g : r / lw;
    if (li->node_rank >= li->nnodes)
        return dt_errorf(err, DT_EINVAL, "GROUP_RANK=%d is not below the node count %d "
                         "(WORLD_SIZE=%d / LOCAL_WORLD_SIZE=%d)", li->node_rank, li->nnodes, w, lw);
    if (have_g && r / lw != g && w % lw == 0)
        return dt_errorf(err, DT_EINVAL, "RANK=%d with LOCAL_WORLD_SIZE=%d belongs to node %d, but "
                         "GROUP_RANK=%d: inconsistent torchrun variables", r, lw, r / lw, g);
    set_master_from_env(li);
    return DT_OK;
}

static int discover_mpi(dt_launch_info *li, dt_error *err) {
    int r, w, lr = 0, lw = 1;
    int hr = env_int("OMPI_COMM_WORLD_RANK", 0, &r, err);
    int hw = env_int("OMPI_COMM_WORLD_SIZE", 1, &w, err);
    int hlr = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, &lr, err);
    int hlw = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, &lw, err);
    if (hr < 0 || hw < 0 || hlr < 0 || hlw < 0) return DT_EINVAL;
    if (!hw) return dt_errorf(err, DT_EINVAL, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
    if (!hlw) lw = w, lr = r;
    li->rank = r;
    li->world = w;
    li->local_rank = lr;
    li->local_world = lw;
    if (check_ranks(li, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_LOCAL_SIZE", err))
        return DT_EINVAL;
    li->nnodes = (w + lw - 1) / lw;
    li->node_rank = r / lw;   /* mpirun's default by-slot mapping fills nodes in order */
    set_master_from_env(li);
    return DT_OK;
}

/* First integer of a Slurm tasks-per-node list ("2(x3),1" -> 2). */
static int first_count(const char *s, int *out) {
    if (!s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

static int discover_slurm(dt_launch_info *li, dt_error *err) {
    int r, w, lr = 0, nn = 1, nid = 0;
    const char *wv, *nv, *used;
    if (env_int("SLURM_PROCID", 0, &r, err) < 0) return DT_EINVAL;
    /* step-level counts first: inside an sbatch script without srun, SLURM_NTASKS
     * describes the allocation, not the processes actually running */
    int hw = env_int2("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", 1, &w, &wv, err);
    if (hw < 0) return DT_EINVAL;
    if (!hw) {
        hw = env_int2("SLURM_NPROCS", NULL, 1, &w, &wv, err);
        if (hw <= 0)
            return hw < 0 ? DT_EINVAL
                          : dt_errorf(err, DT_EINVAL, "SLURM_PROCID is set but neither SLURM_NTASKS nor "
                                      "SLURM_STEP_NUM_TASKS is: run dtrun through srun");
    }
    if (env_int("SLURM_LOCALID", 0, &lr, err) < 0) return DT_EINVAL;
    int hn = env_int2("SLURM_STEP_NUM_NODES", "SLURM_NNODES", 1, &nn, &nv, err);
    if (hn < 0 || env_int("SLURM_NODEID", 0, &nid, err) < 0) return DT_EINVAL;
    int lw;
    if (w % nn == 0) lw = w / nn;
    else if (first_count(getenv("SLURM_STEP_TASKS_PER_NODE"), &lw) &&
             first_count(getenv("SLURM_TASKS_PER_NODE"), &lw))
        lw = (w + nn - 1) / nn;
    li->rank = r;
    li->world = w;
    li->local_rank = lr;
    li->local_world = lw;
    li->nnodes = nn;
    li->node_rank = nid;
    if (check_ranks(li, "SLURM_PROCID", wv, "SLURM_LOCALID", "tasks per node", err)) return DT_EINVAL;
    if (nid >= nn)
        return dt_errorf(err, DT_EINVAL, "SLURM_NODEID=%d is not below %s=%d", nid, hn ? nv : "SLURM_NNODES", nn);
    set_master_from_env(li);
    if (!getenv("MASTER_ADDR")) {
        const char *list = getenv("SLURM_STEP_NODELIST");
        if (!list || !*list) list = getenv("SLURM_JOB_NODELIST");
        if (!list || !*list) list = getenv("SLURM_NODELIST");
        dt_error e2;
        if (list && *list && dt_launch_first_host(list, li->master_addr, sizeof li->master_addr, &e2))
            return dt_errorf(err, DT_EINVAL, "Slurm node list: %s (set MASTER_ADDR)", e2.msg);
    }
    (void)used;
    return DT_OK;
}

int dt_launch_discover(const dt_launch_flags *flags, dt_launch_info *out, dt_error *err) {
    dt_launch_info li;
    memset(&li, 0, sizeof li);
    strcpy(li.master_addr, DT_LAUNCH_DEFAULT_ADDR);
    li.master_port = DT_LAUNCH_DEFAULT_PORT;
    li.nnodes = 1;
    const int child = getenv(DT_LAUNCH_ENV_CHILD) != NULL;
    const int torchrun = getenv("RANK") || getenv("WORLD_SIZE");
    const int mpi = getenv("OMPI_COMM_WORLD_RANK") != NULL;
    const int slurm = getenv("SLURM_PROCID") != NULL;
    int rc = DT_OK;

    if (flags && flags->given) {
        if (torchrun || mpi)
            return dt_errorf(err, DT_EINVAL, "launch flags (--nnodes/--node-rank/...) given to a process that %s "
                             "already started as a rank (%s set): drop the flags or start dtrun directly",
                             torchrun ? "torchrun" : "mpirun", torchrun ? "RANK" : "OMPI_COMM_WORLD_RANK");
        li.source = DT_LAUNCH_SRC_FLAGS;
        li.agent = 1;
        li.nnodes = flags->nnodes > 0 ? flags->nnodes : 1;
        li.node_rank = flags->node_rank >= 0 ? flags->node_rank : 0;
        if (li.node_rank >= li.nnodes)
            return dt_errorf(err, DT_EINVAL, "--node-rank %d is not below --nnodes %d (node ranks count from 0)",
                             li.node_rank, li.nnodes);
        /* Slurm templates export MASTER_ADDR/PORT (docs/launch.md §1.2); flags override */
        set_master_from_env(&li);
        if (flags->master_addr[0]) strcpy(li.master_addr, flags->master_addr);
        if (flags->master_port > 0) li.master_port = flags->master_port;
        if (flags->nproc_per_node > 0) {
            li.local_world = flags->nproc_per_node;
            li.world = li.nnodes * li.local_world;
            li.rank = li.node_rank * li.local_world;
        }
    } else if (torchrun) {
        li.source = DT_LAUNCH_SRC_TORCHRUN;
        rc = discover_torchrun(&li, err);
    } else if (mpi) {
        li.source = DT_LAUNCH_SRC_MPI;
        rc = discover_mpi(&li, err);
    } else if (slurm) {
        li.source = DT_LAUNCH_SRC_SLURM;
        rc = discover_slurm(&li, err);
    } else {
        li.source = DT_LAUNCH_SRC_NONE;
        li.agent = 1;
    }
    if (rc) return rc;
    if (child && li.agent)
        return dt_errorf(err, DT_EINVAL, "%s=1 (a rank started by dtrun) but no launcher variables "
                         "(RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID) were found; refusing to spawn again",
                         DT_LAUNCH_ENV_CHILD);
    *out = li;
    return DT_OK;
}

static const char *launcher_words(dt_launch_source s) {
    switch (s) {
    case DT_LAUNCH_SRC_FLAGS: return "dtrun's launch flags give";
    case DT_LAUNCH_SRC_TORCHRUN: return "torchrun started";
    case DT_LAUNCH_SRC_MPI: return "mpirun started";
    case DT_LAUNCH_SRC_SLURM: return "srun started";
    default: return "this launch has";
    }
}

int dt_launch_check_world(dt_launch_info *li, int world_size, int gpus_per_node, int nodes, dt_error *err) {
    if (world_size < 1 || gpus_per_node < 1 || nodes < 1)
        return dt_errorf(err, DT_EINVAL, "the plan's world (world_size %d, %d node(s) x %d) is not valid",
                         world_size, nodes, gpus_per_node);
    if (li->agent && li->local_world == 0) {   /* fill from the plan */
        li->local_world = li->source == DT_LAUNCH_SRC_NONE ? world_size : gpus_per_node;
        li->world = li->nnodes * li->local_world;
        li->rank = li->node_rank * li->local_world;
    }
    if (li->world == world_size && (li->nnodes == 1 || nodes == 1 || li->nnodes == nodes) &&
        (li->nnodes == 1 || li->local_world == gpus_per_node))
        return DT_OK;
    if (li->world != world_size)
        return dt_errorf(err, DT_EINVAL,
                         "the plan wants world_size %d (%d node(s) x %d ranks) but %s %d rank(s) "
                         "(%d node(s) x %d): relaunch with %d ranks or re-plan with dtplan solve ... --gpus %d",
                         world_size, nodes, gpus_per_node, launcher_words(li->source), li->world,
                         li->nnodes, li->local_world, world_size, li->world);
    return dt_errorf(err, DT_EINVAL,
                     "the plan wants %d node(s) x %d ranks but %s %d node(s) x %d ranks "
                     "(same world_size %d, different layout): fix cluster.nodes/gpus_per_node or the launch",
                     nodes, gpus_per_node, launcher_words(li->source), li->nnodes, li->local_world, world_size);
}

int dt_launch_must_spawn(const dt_launch_info *li, int world_size) { return li->agent && world_size > 1; }

int dt_launch_bootstrap(const dt_launch_info *li, int is_cuda, dt_launch_boot *out, dt_error *err) {
    if (li->world <= 1) { *out = DT_BOOT_SELF; return DT_OK; }
    if (li->source == DT_LAUNCH_SRC_MPI || li->source == DT_LAUNCH_SRC_SLURM) { *out = DT_BOOT_MPI; return DT_OK; }
    /* torchrun / dtrun's flags: NCCL's id (CUDA) or the MPI join (CPU,
     * dt_mpijoin.h) goes over the TCP rendezvous */
    (void)is_cuda;
    (void)err;
    *out = DT_BOOT_TCP;
    return DT_OK;
}

/* ---- hosts ------------------------------------------------------------ */

int dt_launch_first_host(const char *list, char *out, size_t cap, dt_error *err) {
    size_t n = 0;
    const char *p = list;
    int depth = 0;
    while (*p && !(*p == ',' && depth == 0)) {
        if (*p == '[') {
            if (depth) return dt_errorf(err, DT_EINVAL, "nested '[' in host list '%s'", list);
            depth = 1;
            p++;
            /* first element of the bracket: up to ',', '-' or ']' */
            if (!(*p >= '0' && *p <= '9'))
                return dt_errorf(err, DT_EINVAL, "host list '%s': expected a number after '['", list);
            while (*p >= '0' && *p <= '9') {
                if (n + 1 >= cap) return dt_errorf(err, DT_EINVAL, "host name in '%s' is too long", list);
                out[n++] = *p++;
            }
            while (*p && *p != ']') p++;
            if (*p != ']') return dt_errorf(err, DT_EINVAL, "unclosed '[' in host list '%s'", list);
            depth = 0;
            p++;
            continue;
        }
        if (*p == ']') return dt_errorf(err, DT_EINVAL, "unmatched ']' in host list '%s'", list);
        if (n + 1 >= cap) return dt_errorf(err, DT_EINVAL, "host name in '%s' is too long", list);
        out[n++] = *p++;
    }
    out[n] = 0;
    if (!n) return dt_errorf(err, DT_EINVAL, "empty host list '%s'", list);
    return DT_OK;
}

void dt_launch_local_from_hosts(const char *hosts, size_t stride, int world, int rank, int *local_rank,
                                int *local_world) {
    const char *mine = hosts + (size_t)rank * stride;
    int lr = 0, lw = 0;
    for (int i = 0; i < world; i++) {
        if (strncmp(hosts + (size_t)i * stride, mine, stride) != 0) continue;
        lw++;
        if (i < rank) lr++;
    }
    *local_rank = lr;
    *local_world = lw;
}

/* ---- spawning: shared pieces ------------------------------------------- */

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_poll(void) {
    struct timespec ts = {0, DT_LAUNCH_POLL_NS};
    nanosleep(&ts, NULL);
}

static volatile sig_atomic_t g_signal;   /* last SIGINT/SIGTERM/SIGHUP received */
static void on_signal(int s) { g_signal = s; }

static const int k_forward[] = {SIGINT, SIGTERM, SIGHUP};
#define N_FORWARD 3

static void install(struct sigaction old[N_FORWARD]) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;   /* no SA_RESTART: waitpid returns EINTR */
    sigemptyset(&sa.sa_mask);
    g_signal = 0;
    for (int i = 0; i < N_FORWARD; i++) sigaction(k_forward[i], &sa, &old[i]);
}

static void restore(const struct sigaction old[N_FORWARD]) {
    for (int i = 0; i < N_FORWARD; i++) sigaction(k_forward[i], &old[i], NULL);
}

/* Status record a supervisor writes: one line of key=value. */
typedef struct {
    int rank, pid, state;     /* state: 0 running, 1 exited, 2 signalled */
    int code, sig, torn_down;
    double t_end;
    char host[DT_LAUNCH_ADDR_MAX];
} rank_status;

static void write_status(const char *dir, const rank_status *s) {
    char path[PATH_MAX + 32], tmp[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/rank-%d", dir, s->rank);
    snprintf(tmp, sizeof tmp, "%s/.rank-%d.tmp", dir, s->rank);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "rank=%d pid=%d state=%d code=%d sig=%d torn_down=%d t_end=%.6f host=%s\n", s->rank, s->pid,
            s->state, s->code, s->sig, s->torn_down, s->t_end, s->host);
    fclose(f);
    rename(tmp, path);   /* atomic: the launcher never reads half a record */
}

static int read_status(const char *path, rank_status *s) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    memset(s, 0, sizeof *s);
    int n = fscanf(f, "rank=%d pid=%d state=%d code=%d sig=%d torn_down=%d t_end=%lf host=%255s", &s->rank,
                   &s->pid, &s->state, &s->code, &s->sig, &s->torn_down, &s->t_end, s->host);
    fclose(f);
    return n == 8 ? 0 : -1;
}

static int env_rank_for_supervisor(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"};
    for (int i = 0; i < 4; i++) {
        const char *s = getenv(vars[i]);
        int v;
        if (s && parse_int(s, 0, INT_MAX, &v) == 0) return v;
    }
    return -1;
}

int dt_launch_supervisor(int argc, char **argv) {
    (void)argc;
    const char *d = getenv(DT_LAUNCH_ENV_SUPERVISE);
    if (!d || !*d) return -1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", d);
    /* Die with mpirun: a torn-down launcher must not leave ranks running. */
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) return 1;
    unsetenv(DT_LAUNCH_ENV_SUPERVISE);
    setenv(DT_LAUNCH_ENV_CHILD, "1", 1);

    rank_status s;
    memset(&s, 0, sizeof s);
    s.rank = env_rank_for_supervisor();
    if (gethostname(s.host, sizeof s.host - 1)) strcpy(s.host, "?");

    struct sigaction old[N_FORWARD];
    install(old);
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        restore(old);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me) _exit(1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    s.pid = (int)pid;
    write_status(dir, &s);
    int st = 0, forwarded = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, 0);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return 1;
        if (g_signal && !forwarded) {
            kill(pid, g_signal);
            forwarded = 1;
            s.torn_down = 1;
        }
    }
    s.t_end = wall_s();
    if (WIFSIGNALED(st)) {
        s.state = 2;
        s.sig = WTERMSIG(st);
    } else {
        s.state = 1;
        s.code = WEXITSTATUS(st);
    }
    if (g_signal) s.torn_down = 1;
    write_status(dir, &s);
    restore(old);
    return s.state == 2 ? 128 + s.sig : s.code;
}

/* Kills whatever of the job is still alive: the mpirun process group, then
 * each rank pid the supervisors recorded (they may have their own groups). */
static void sweep(pid_t pgid, const char *dir, int world) {
    kill(-pgid, SIGKILL);
    for (int r = 0; r < world; r++) {
        char path[PATH_MAX + 32];
        rank_status s;
        snprintf(path, sizeof path, "%s/rank-%d", dir, r);
        if (read_status(path, &s) == 0 && s.state == 0 && s.pid > 0 && kill(s.pid, 0) == 0)
            kill(s.pid, SIGKILL);
    }
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
            char p[PATH_MAX + 300];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

int dt_launch_spawn_mpirun(int world, char *const argv[], FILE *log, dt_spawn_result *res, dt_error *err) {
    memset(res, 0, sizeof *res);
    res->failed_rank = -1;
    if (world < 1) return dt_errorf(err, DT_EINVAL, "cannot start %d ranks", world);
    const char *tmpdir = getenv("TMPDIR");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/dtrun-launch-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir)) return dt_errorf(err, DT_EIO, "cannot create a launch status directory in %s: %s",
                                        tmpdir ? tmpdir : "/tmp", strerror(errno));
    const char *mpirun = getenv(DT_LAUNCH_ENV_MPIRUN);
    if (!mpirun || !*mpirun) mpirun = "mpirun";

    /* mpirun -n W --oversubscribe --bind-to none -q [--allow-run-as-root] argv... */
    int nargs = 0;
    while (argv[nargs]) nargs++;
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", world);
    const char **av = calloc((size_t)nargs + 12, sizeof *av);
    if (!av) { remove_dir(dir); return dt_errorf(err, DT_ENOMEM, "out of memory building the mpirun command"); }
    int k = 0;
    av[k++] = mpirun;
    av[k++] = "-n";
    av[k++] = nbuf;
    av[k++] = "--oversubscribe";   /* more ranks than cores is fine for CPU runs and tests */
    av[k++] = "--bind-to";         /* ranks run OpenMP threads: no core binding */
    av[k++] = "none";
    av[k++] = "-q";                /* mpirun's own banners: we print one line instead */
    if (geteuid() == 0) av[k++] = "--allow-run-as-root";
    for (int i = 0; i < nargs; i++) av[k++] = argv[i];
    av[k] = NULL;

    /* exec failure travels back through a close-on-exec pipe as an errno */
    int ep[2];
    if (pipe2(ep, O_CLOEXEC)) {
        free(av);
        remove_dir(dir);
        return dt_errorf(err, DT_ERUNTIME, "pipe failed: %s", strerror(errno));
    }
    struct sigaction old[N_FORWARD];
    install(old);
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        restore(old);
        free(av);
        close(ep[0]);
        close(ep[1]);
        remove_dir(dir);
        return dt_errorf(err, DT_ERUNTIME, "fork failed: %s", strerror(errno));
    }
    if (pid == 0) {
        close(ep[0]);
        setpgid(0, 0);
        restore(old);
        prctl(PR_SET_PDEATHSIG, SIGTERM);   /* launcher killed -> mpirun tears the job down */
        if (getppid() != me) _exit(1);
        setenv(DT_LAUNCH_ENV_SUPERVISE, dir, 1);
        execvp(av[0], (char *const *)av);
        int e = errno;
        if (write(ep[1], &e, sizeof e) < 0) _exit(127);
        _exit(127);
    }
    setpgid(pid, pid);
    close(ep[1]);
    int exec_errno = 0;
    while (read(ep[0], &exec_errno, sizeof exec_errno) < 0 && errno == EINTR) {}
    close(ep[0]);
    if (exec_errno) {
        waitpid(pid, NULL, 0);
        restore(old);
        remove_dir(dir);
        dt_errorf(err, DT_ERUNTIME, "cannot run %s: %s (install Open MPI or set %s to mpirun's path)", av[0],
                  strerror(exec_errno), DT_LAUNCH_ENV_MPIRUN);
        free(av);
        res->status = 1;
        if (log) fprintf(log, "dtrun: %s\n", err->msg);
        return DT_OK;
    }
    free(av);

    int st = 0, stopping = 0;
    double kill_at = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, stopping ? WNOHANG : 0);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) break;
        if (g_signal && !stopping) {
            kill(-pid, SIGTERM);
            stopping = 1;
            kill_at = wall_s() + DT_LAUNCH_TEARDOWN_GRACE_S;
        }
        if (stopping) {
            if (wall_s() > kill_at) kill(-pid, SIGKILL);
            sleep_poll();
        }
    }
    sweep(pid, dir, world);
    restore(old);

    /* Root cause: the earliest rank that failed on its own (not torn down). */
    int n_started = 0;
    rank_status worst = {0};
    int have = 0;
    for (int r = 0; r < world; r++) {
        char path[PATH_MAX + 32];
        rank_status s;
        snprintf(path, sizeof path, "%s/rank-%d", dir, r);
        if (read_status(path, &s)) continue;
        n_started++;
        if (s.state == 0 || (s.state == 1 && s.code == 0)) continue;
        int better = !have || (worst.torn_down && !s.torn_down) ||
                     (worst.torn_down == s.torn_down && s.t_end < worst.t_end);
        if (better) { worst = s; have = 1; }
    }
    remove_dir(dir);

    const int mpirun_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (have && !g_signal) {
        res->failed_rank = worst.rank;
        res->pid = worst.pid;
        res->exit_code = worst.state == 1 ? worst.code : -1;
        res->signal = worst.state == 2 ? worst.sig : 0;
        snprintf(res->host, sizeof res->host, "%s", worst.host);
        res->status = worst.state == 1 ? worst.code : 1;
        if (log) {
            if (worst.state == 1)
                fprintf(log, "dtrun: rank %d (pid %d, host %s) exited with code %d%s\n", worst.rank, worst.pid,
                        worst.host, worst.code, world > 1 ? "; the other ranks were stopped" : "");
            else
                fprintf(log, "dtrun: rank %d (pid %d, host %s) was killed by signal %d (%s)%s%s\n", worst.rank,
                        worst.pid, worst.host, worst.sig, strsignal(worst.sig),
                        worst.torn_down ? " while dtrun was stopping the job" : "",
                        world > 1 && !worst.torn_down ? "; the other ranks were stopped" : "");
        }
        return DT_OK;
    }
    if (!mpirun_ok || n_started < world || g_signal || have) {
        res->status = 1;
        if (log) {
            if (g_signal)
                fprintf(log, "dtrun: stopped by signal %d (%s); all %d rank(s) were stopped\n", (int)g_signal,
                        strsignal(g_signal), world);
            else
                fprintf(log, "dtrun: %s %s %d after starting %d of %d rank(s) (see its messages above)\n", mpirun,
                        WIFSIGNALED(st) ? "was killed by signal" : "exited with code",
                        WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), n_started, world);
        }
        return DT_OK;
    }
    res->status = 0;
    return DT_OK;
}

/* Sets torchrun's variables for global rank `rank` of this node's agent. */
static void set_rank_env(const dt_launch_info *li, int local_rank) {
    char b[32];
#define SETI(name, v) (snprintf(b, sizeof b, "%d", (v)), setenv(name, b, 1))
    SETI("RANK", li->rank + local_rank);
    SETI("LOCAL_RANK", local_rank);
    SETI("WORLD_SIZE", li->world);
    SETI("LOCAL_WORLD_SIZE", li->local_world);
    SETI("GROUP_RANK", li->node_rank);
    SETI("GROUP_WORLD_SIZE", li->nnodes);
    SETI("MASTER_PORT", li->master_port);
#undef SETI
    setenv("MASTER_ADDR", li->master_addr, 1);
    setenv(DT_LAUNCH_ENV_CHILD, "1", 1);
}

int dt_launch_spawn_direct(const dt_launch_info *li, char *const argv[], FILE *log, dt_spawn_result *res,
                           dt_error *err) {
    memset(res, 0, sizeof *res);
    res->failed_rank = -1;
    const int n = li->local_world;
    if (n < 1) return dt_errorf(err, DT_EINVAL, "cannot start %d ranks on node %d", n, li->node_rank);
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    if (!pids) return dt_errorf(err, DT_ENOMEM, "out of memory starting the ranks");
    char host[DT_LAUNCH_ADDR_MAX];
    if (gethostname(host, sizeof host - 1)) strcpy(host, "?");
    struct sigaction old[N_FORWARD];
    install(old);
    pid_t me = getpid(), pgid = 0;
    int started = 0;
    for (int lr = 0; lr < n; lr++) {
        pid_t pid = fork();
        if (pid < 0) {
            dt_errorf(err, DT_ERUNTIME, "fork of local rank %d failed: %s", lr, strerror(errno));
            break;
        }
        if (pid == 0) {
            setpgid(0, pgid);               /* one group per node: teardown reaches grandchildren */
            restore(old);
            prctl(PR_SET_PDEATHSIG, SIGKILL);   /* agent gone -> its ranks go */
            if (getppid() != me) _exit(1);
            set_rank_env(li, lr);
            execv(argv[0], argv);
            _exit(127);
        }
        if (!pgid) pgid = pid;
        setpgid(pid, pgid);
        pids[lr] = pid;
        started++;
    }
    /* Wait for all; the first rank to fail on its own stops the node. */
    int alive = started, stopping = started < n;
    double kill_at = stopping ? wall_s() + DT_LAUNCH_TEARDOWN_GRACE_S : 0;
    if (stopping && pgid) kill(-pgid, SIGTERM);
    while (alive > 0) {
        int st = 0;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
            int lr = -1;
            for (int i = 0; i < n; i++)
                if (pids[i] == w) lr = i;
            if (lr < 0) continue;
            pids[lr] = 0;
            alive--;
            int bad = WIFSIGNALED(st) || WEXITSTATUS(st) != 0;
            if (bad && res->failed_rank < 0 && !stopping && !g_signal) {
                res->failed_rank = li->rank + lr;
                res->pid = (int)w;
                res->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                res->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
                snprintf(res->host, sizeof res->host, "%s", host);
            }
            if (bad && !stopping) {
                stopping = 1;
                kill(-pgid, SIGTERM);
                kill_at = wall_s() + DT_LAUNCH_TEARDOWN_GRACE_S;
            }
            continue;
        }
        if (w < 0 && errno != EINTR) break;
        if (g_signal && !stopping) {
            stopping = 1;
            kill(-pgid, SIGTERM);
            kill_at = wall_s() + DT_LAUNCH_TEARDOWN_GRACE_S;
        }
        if (stopping && wall_s() > kill_at) kill(-pgid, SIGKILL);
        sleep_poll();
    }
    if (pgid) kill(-pgid, SIGKILL);   /* leftovers of the ranks (their MPI helpers) */
    restore(old);
    free(pids);
    if (started < n) {
        res->status = 1;
        if (log) fprintf(log, "dtrun: node %d: %s; its other ranks were stopped\n", li->node_rank, err->msg);
        return DT_OK;
    }
    if (res->failed_rank >= 0) {
        res->status = res->exit_code > 0 ? res->exit_code : 1;
        if (log) {
            if (res->signal)
                fprintf(log, "dtrun: rank %d (pid %d, host %s) was killed by signal %d (%s); the other ranks "
                        "on node %d were stopped\n", res->failed_rank, res->pid, res->host, res->signal,
                        strsignal(res->signal), li->node_rank);
            else
                fprintf(log, "dtrun: rank %d (pid %d, host %s) exited with code %d; the other ranks on node %d "
                        "were stopped\n", res->failed_rank, res->pid, res->host, res->exit_code, li->node_rank);
        }
        return DT_OK;
    }
    if (g_signal) {
        res->status = 1;
        if (log) fprintf(log, "dtrun: stopped by signal %d (%s); the %d rank(s) of node %d were stopped\n",
                         (int)g_signal, strsignal(g_signal), n, li->node_rank);
        return DT_OK;
    }
    res->status = 0;
    return DT_OK;
}

int dt_launch_spawn_local(dt_launch_info *li, int world_size, int gpus_per_node, int argc, char **argv,
                          FILE *log, dt_error *err) {
    int nodes = li->nnodes > 0 ? li->nnodes : 1;
    if (dt_launch_check_world(li, world_size, gpus_per_node, nodes, err)) {
        if (log) fprintf(log, "dtrun: %s\n", err->msg);
        return 2;
    }
    /* Re-exec this very binary, with dtrun's argv minus the launch flags. */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        dt_errorf(err, DT_ERUNTIME, "cannot find this program's path (/proc/self/exe): %s", strerror(errno));
        if (log) fprintf(log, "dtrun: %s\n", err->msg);
        return 1;
    }
    self[n] = 0;
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av) return dt_errorf(err, DT_ENOMEM, "out of memory"), 1;
    av[0] = self;
    for (int i = 1; i < argc; i++) av[i] = argv[i];
    /* ranks sharing a node get OMP_NUM_THREADS = cores / ranks when the user
     * did not choose (docs/launch.md §1.1: DeepSpeed's launcher with
     * --bind_cores_to_rank does the same; torchrun would set 1). */
    if (!getenv("OMP_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long per = cores > 0 ? cores / li->local_world : 1;
        char b[24];
        snprintf(b, sizeof b, "%ld", per > 0 ? per : 1);
        setenv("OMP_NUM_THREADS", b, 1);
    }
    dt_spawn_result res;
    /* One node: mpirun makes the world. Several: each node's agent starts its
     * ranks with torchrun's variables and they join over TCP (dt_mpijoin.h /
     * NCCL's id over dt_rendezvous), exactly as under torchrun --no-python. */
    int rc = li->nnodes > 1 ? dt_launch_spawn_direct(li, av, log, &res, err)
                            : dt_launch_spawn_mpirun(li->local_world, av, log, &res, err);
    free(av);
    if (rc) {
        if (log) fprintf(log, "dtrun: %s\n", err->msg);
        return 1;
    }
    return res.status == 0 ? 0 : (res.status == 2 ? 2 : 1);
}
