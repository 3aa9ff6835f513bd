/* Rank discovery from flags and each launcher's variables, conflicts, the
 * plan-vs-world check, Slurm host lists and host-based local ranks. */
#include <stdlib.h>
#include <string.h>

#include "dt_launch.h"
#include "dt_rendezvous.h"
#include "dt_test.h"

static const char *all_vars[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NPROCS",
    "SLURM_STEP_NUM_TASKS", "SLURM_NNODES", "SLURM_STEP_NUM_NODES", "SLURM_NODEID", "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
    DT_LAUNCH_ENV_CHILD, NULL};

static void clear_env(void) {
    for (int i = 0; all_vars[i]; i++) unsetenv(all_vars[i]);
}

/* "K=V" pairs, NULL-terminated */
static void set_env(const char *kv[]) {
    clear_env();
    for (int i = 0; kv[i]; i += 2) setenv(kv[i], kv[i + 1], 1);
}

static int discover(const dt_launch_flags *f, dt_launch_info *li, dt_error *err) {
    memset(err, 0, sizeof *err);
    return dt_launch_discover(f, li, err);
}

static void test_none(void) {
    clear_env();
    dt_launch_info li;
    dt_error err;
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_OK);
    CHECK_STR(dt_launch_source_name(li.source), "none");
    CHECK_EQ_I64(li.agent, 1);
    CHECK_EQ_I64(dt_launch_must_spawn(&li, 4), 1);
    CHECK_EQ_I64(dt_launch_must_spawn(&li, 1), 0);
    dt_launch_info one = li;
    CHECK_EQ_I64(dt_launch_check_world(&one, 1, 1, 1, &err), DT_OK);
    CHECK_EQ_I64(one.world, 1);
    CHECK_EQ_I64(one.rank, 0);
    /* a lone process takes its world from the plan */
    CHECK_EQ_I64(dt_launch_check_world(&li, 4, 4, 1, &err), DT_OK);
    CHECK_EQ_I64(li.world, 4);
    CHECK_EQ_I64(li.local_world, 4);
    CHECK_EQ_I64(li.rank, 0);
    /* a spawned child without launcher variables must not spawn again */
    setenv(DT_LAUNCH_ENV_CHILD, "1", 1);
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "refusing to spawn again") != NULL);
}

static void test_torchrun(void) {
    const char *kv[] = {"RANK", "5", "LOCAL_RANK", "1", "WORLD_SIZE", "8", "LOCAL_WORLD_SIZE", "4",
                        "GROUP_RANK", "1", "MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "6000",
                        "SLURM_PROCID", "1", "SLURM_NTASKS", "2", NULL};   /* srun+torchrun: torchrun wins */
    set_env(kv);
    dt_launch_info li;
    dt_error err;
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_OK);
    CHECK_STR(dt_launch_source_name(li.source), "torchrun");
    CHECK_EQ_I64(li.agent, 0);
    CHECK_EQ_I64(dt_launch_must_spawn(&li, 8), 0);
    CHECK_EQ_I64(li.rank, 5);
    CHECK_EQ_I64(li.local_rank, 1);
    CHECK_EQ_I64(li.world, 8);
    CHECK_EQ_I64(li.local_world, 4);
    CHECK_EQ_I64(li.node_rank, 1);
    CHECK_EQ_I64(li.nnodes, 2);
    CHECK_STR(li.master_addr, "10.0.0.1");
    CHECK_EQ_I64(li.master_port, 6000);
    CHECK_EQ_I64(dt_launch_check_world(&li, 8, 4, 2, &err), DT_OK);
    dt_launch_boot b;
    CHECK_EQ_I64(dt_launch_bootstrap(&li, 1, &b, &err), DT_OK);
    CHECK_EQ_I64(b, DT_BOOT_TCP);
    /* CPU ranks under torchrun join one MPI world over the same TCP channel */
    CHECK_EQ_I64(dt_launch_bootstrap(&li, 0, &b, &err), DT_OK);
    CHECK_EQ_I64(b, DT_BOOT_TCP);

    /* plan mismatch names both sides */
    CHECK_EQ_I64(dt_launch_check_world(&li, 4, 4, 1, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "world_size 4") && strstr(err.msg, "torchrun started 8 rank(s)"));
    /* same world, different layout */
    CHECK_EQ_I64(dt_launch_check_world(&li, 8, 2, 4, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "4 node(s) x 2") && strstr(err.msg, "2 node(s) x 4"));

    /* conflicts: rank outside the world, half-set family, wrong node */
    setenv("RANK", "8", 1);
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "RANK=8 is not below WORLD_SIZE=8") != NULL);
    setenv("RANK", "5", 1);
    setenv("GROUP_RANK", "0", 1);
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "GROUP_RANK=0") != NULL);
    setenv("GROUP_RANK", "1", 1);
    setenv("LOCAL_RANK", "4", 1);
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4") != NULL);
    unsetenv("WORLD_SIZE");
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "RANK is set but WORLD_SIZE is not") != NULL);
    setenv("WORLD_SIZE", "two", 1);
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "WORLD_SIZE='two'") != NULL);
}

static void test_mpi(void) {
    const char *kv[] = {"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "2", "SLURM_PROCID", "0", "SLURM_NTASKS", "1", NULL};
    set_env(kv);
    dt_launch_info li;
    dt_error err;
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_OK);
    CHECK_STR(dt_launch_source_name(li.source), "mpi");
    CHECK_EQ_I64(li.rank, 3);
    CHECK_EQ_I64(li.world, 4);
    CHECK_EQ_I64(li.local_rank, 1);
    CHECK_EQ_I64(li.local_world, 2);
    CHECK_EQ_I64(li.nnodes, 2);
    CHECK_EQ_I64(li.node_rank, 1);
    dt_launch_boot b;
    CHECK_EQ_I64(dt_launch_bootstrap(&li, 0, &b, &err), DT_OK);
    CHECK_EQ_I64(b, DT_BOOT_MPI);
    CHECK_EQ_I64(dt_launch_check_world(&li, 2, 2, 1, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "mpirun started 4 rank(s)") && strstr(err.msg, "world_size 2"));
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "5", 1);
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "OMPI_COMM_WORLD_LOCAL_SIZE=5 exceeds OMPI_COMM_WORLD_SIZE=4") != NULL);
    /* launch flags under mpirun would spawn a second world */
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    dt_launch_flags f;
    dt_launch_flags_init(&f);
    f.nnodes = 1;
    f.given = 1;
    CHECK_EQ_I64(discover(&f, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "OMPI_COMM_WORLD_RANK") != NULL);
}

static void test_slurm(void) {
    const char *kv[] = {"SLURM_PROCID", "6", "SLURM_LOCALID", "2", "SLURM_NTASKS", "32", "SLURM_STEP_NUM_TASKS", "8",
                        "SLURM_NNODES", "2", "SLURM_NODEID", "1", "SLURM_JOB_NODELIST", "gpu[07-09,12],cpu1", NULL};
    set_env(kv);
    dt_launch_info li;
    dt_error err;
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_OK);
    CHECK_STR(dt_launch_source_name(li.source), "slurm");
    CHECK_EQ_I64(li.rank, 6);
    CHECK_EQ_I64(li.world, 8);   /* the step's tasks, not the allocation's */
    CHECK_EQ_I64(li.local_rank, 2);
    CHECK_EQ_I64(li.local_world, 4);
    CHECK_EQ_I64(li.node_rank, 1);
    CHECK_EQ_I64(li.nnodes, 2);
    CHECK_STR(li.master_addr, "gpu07");
    CHECK_EQ_I64(dt_launch_check_world(&li, 8, 4, 2, &err), DT_OK);
    setenv("MASTER_ADDR", "head", 1);
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_OK);
    CHECK_STR(li.master_addr, "head");
    setenv("SLURM_NODEID", "2", 1);
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "SLURM_NODEID=2") != NULL);
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_STEP_NUM_TASKS");
    setenv("SLURM_NODEID", "1", 1);
    CHECK_EQ_I64(discover(NULL, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "srun") != NULL);
}

static void test_flags(void) {
    clear_env();
    /* Slurm templates export it (docs/launch.md §1.2); --master-addr wins */
    setenv("MASTER_ADDR", "10.1.1.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    char *argv[] = {"dtrun", "--nnodes=2", "plan.json", "--node_rank", "1", "--master-addr", "10.0.0.9",
                    "--nproc_per_node", "4", "--out", "o", NULL};
    int argc = 11;
    dt_launch_flags f;
    dt_launch_flags_init(&f);
    dt_error err = {0};
    CHECK_EQ_I64(dt_launch_flags_parse(&f, &argc, argv, &err), DT_OK);
    CHECK_EQ_I64(argc, 4);
    CHECK_STR(argv[1], "plan.json");
    CHECK_STR(argv[2], "--out");
    CHECK_STR(argv[3], "o");
    CHECK(argv[4] == NULL);
    CHECK_EQ_I64(f.given, 4);
    dt_launch_info li;
    CHECK_EQ_I64(discover(&f, &li, &err), DT_OK);
    CHECK_STR(dt_launch_source_name(li.source), "flags");
    CHECK_EQ_I64(li.agent, 1);
    CHECK_EQ_I64(li.nnodes, 2);
    CHECK_EQ_I64(li.node_rank, 1);
    CHECK_EQ_I64(li.world, 8);
    CHECK_EQ_I64(li.rank, 4);
    CHECK_STR(li.master_addr, "10.0.0.9");
    CHECK_EQ_I64(li.master_port, 29500);
    CHECK_EQ_I64(dt_launch_check_world(&li, 8, 4, 2, &err), DT_OK);
    /* without --nproc-per-node the plan's gpus_per_node is used */
    f.nproc_per_node = -1;
    CHECK_EQ_I64(discover(&f, &li, &err), DT_OK);
    CHECK_EQ_I64(li.world, 0);
    CHECK_EQ_I64(dt_launch_check_world(&li, 16, 8, 2, &err), DT_OK);
    CHECK_EQ_I64(li.world, 16);
    CHECK_EQ_I64(li.rank, 8);
    /* a node of a multi-node job whose layout disagrees with the plan: exit 2 before spawning */
    CHECK_EQ_I64(dt_launch_spawn_local(&li, 16, 4, 1, argv, NULL, &err), 2);
    CHECK(strstr(err.msg, "the plan wants") != NULL);

    /* bad values */
    char *bad1[] = {"dtrun", "--node-rank", "2", "--nnodes", "2", NULL};
    argc = 5;
    dt_launch_flags_init(&f);
    CHECK_EQ_I64(dt_launch_flags_parse(&f, &argc, bad1, &err), DT_OK);
    CHECK_EQ_I64(discover(&f, &li, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "--node-rank 2 is not below --nnodes 2") != NULL);
    char *bad2[] = {"dtrun", "--master-port", "70000", NULL};
    argc = 3;
    dt_launch_flags_init(&f);
    CHECK_EQ_I64(dt_launch_flags_parse(&f, &argc, bad2, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "70000") != NULL);
    char *bad3[] = {"dtrun", "--nnodes", NULL};
    argc = 2;
    dt_launch_flags_init(&f);
    CHECK_EQ_I64(dt_launch_flags_parse(&f, &argc, bad3, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "--nnodes needs a value") != NULL);
    char *bad4[] = {"dtrun", "--nnodes=1:2", NULL};
    argc = 2;
    CHECK_EQ_I64(dt_launch_flags_parse(&f, &argc, bad4, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "elastic") != NULL);
    /* a look-alike is not a launch flag */
    char *other[] = {"dtrun", "--nnodesx", "3", NULL};
    argc = 3;
    dt_launch_flags_init(&f);
    CHECK_EQ_I64(dt_launch_flags_parse(&f, &argc, other, &err), DT_OK);
    CHECK_EQ_I64(argc, 3);
    CHECK_EQ_I64(f.given, 0);
}

static void test_hosts(void) {
    char h[64];
    dt_error err;
    struct { const char *in, *out; } ok[] = {
        {"gpu[07-09,12],cpu1", "gpu07"}, {"node1,node2", "node1"}, {"n[3]", "n3"},
        {"rack[1-2]-node[01-04]", "rack1-node01"}, {"single", "single"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECK_EQ_I64(dt_launch_first_host(ok[i].in, h, sizeof h, &err), DT_OK);
        CHECK_STR(h, ok[i].out);
    }
    const char *bad[] = {"", "gpu[07-09", "gpu]", "gpu[a-b]", ",x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ_I64(dt_launch_first_host(bad[i], h, sizeof h, &err), DT_EINVAL);

    char hosts[5][16] = {"a", "b", "a", "b", "a"};
    int lr, lw;
    dt_launch_local_from_hosts(&hosts[0][0], 16, 5, 4, &lr, &lw);
    CHECK_EQ_I64(lr, 2);
    CHECK_EQ_I64(lw, 3);
    dt_launch_local_from_hosts(&hosts[0][0], 16, 5, 3, &lr, &lw);
    CHECK_EQ_I64(lr, 1);
    CHECK_EQ_I64(lw, 2);
}

int main(void) {
    test_none();
    test_torchrun();
    test_mpi();
    test_slurm();
    test_flags();
    test_hosts();
    clear_env();
    TEST_MAIN_END();
}
