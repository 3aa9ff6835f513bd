/* dtplan — plan distributed LLM training: estimate memory, solve for the fastest
 * configuration under a memory limit, show / export plans. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dt_cli.h"

/* `dtplan calibrate ...` runs `dtrun calibrate ...`: measuring times the engine's
 * kernels and an MPI all-reduce, and dtplan links neither the engine's
 * distributed runtime nor MPI (docs/architecture.md). dtrun is looked for next
 * to this program; argv[0] = "dtplan" makes its messages say "dtplan:". */
int dt_cmd_calibrate(int argc, char **argv) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return dt_cli_fail(1, "calibrate: cannot find this program's path (/proc/self/exe): %s", strerror(errno));
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    const char *name = "dtrun";
    if (!slash || (size_t)(slash - self) + 1 + strlen(name) + 1 > sizeof self)
        return dt_cli_fail(1, "calibrate: cannot locate dtrun beside '%s'", self);
    strcpy(slash + 1, name);
    char *args[256];
    if (argc + 2 > (int)(sizeof args / sizeof args[0])) return dt_cli_fail(2, "calibrate: too many arguments");
    args[0] = "dtplan";
    for (int i = 0; i < argc; i++) args[1 + i] = argv[i];   /* argv[0] is "calibrate" */
    args[argc + 1] = NULL;
    execv(self, args);
    return dt_cli_fail(1, "calibrate: cannot run '%s': %s (calibrate is dtrun's; build or install dtrun beside dtplan, "
                          "or run: dtrun calibrate)", self, strerror(errno));
}

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} dt_subcommand;

static const dt_subcommand k_commands[] = {
    {"estimate", dt_cmd_estimate, "per-GPU / per-host memory for every ZeRO stage and offload option"},
    {"solve", dt_cmd_solve, "choose stage, micro-batch, accumulation, offload, checkpointing (GLPK); write plan.json"},
    {"show", dt_cmd_show, "print a plan readably"},
    {"export", dt_cmd_export, "write the DeepSpeed config and launch lines for a plan"},
    {"simulate", dt_cmd_simulate, "discrete-event simulation of one step: timeline, critical path, memory over time"},
    {"compare", dt_cmd_compare, "per-phase differences between a simulated and a measured trace"},
    {"report", dt_cmd_report, "charts and a Markdown summary from a dtrun output directory"},
    {"calibrate", dt_cmd_calibrate, "measure this machine and write a hardware profile (runs dtrun calibrate)"},
    {"validate", dt_cmd_validate, "predict the published measurements of the validation suite; predicted vs measured"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: dtplan <command> [options]   (dtplan <command> --help for options)\n\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-10s %s\n", k_commands[i].name, k_commands[i].what);
    fprintf(f, "\nexample: dtplan estimate --params 32B --gpus 8\n");
}

/* simulate --config: the config's one configuration built as estimate builds it, then
 * simulated; simulate's own options go to the simulation, the rest to the plan. */
static int simulate_config(int argc, char **argv) {
    char *est[256], *sim[16];
    int ne = 0, ns = 0;
    if (argc > 256) return dt_cli_fail(2, "simulate: too many arguments");
    est[ne++] = "estimate";
    sim[ns++] = "simulate";
    for (int i = 1; i < argc; i++) {
        int own = !strcmp(argv[i], "--trace") || !strcmp(argv[i], "--plot");
        if ((own || !strcmp(argv[i], "--json") || !strcmp(argv[i], "--detail")) && ns + 2 < 16) {
            sim[ns++] = argv[i];
            if (own && i + 1 < argc) sim[ns++] = argv[++i];
        } else {
            est[ne++] = argv[i];
        }
    }
    dt_plan p;
    int rc = dt_estimate_plan(ne, est, &p);
    return rc ? rc : dt_simulate_plan(&p, ns, sim);
}

/* --config FILE for estimate / solve / simulate (config_cli.c). */
static int run_with_config(const dt_subcommand *c, int argc, char **argv) {
    int n;
    char **args;
    int rc = dt_cli_config_expand(c->name, argc, argv, &n, &args);
    if (rc) return rc;
    return !strcmp(c->name, "simulate") ? simulate_config(n, args) : c->fn(n, args);
}

static int wants_config(const char *cmd, int argc, char **argv) {
    if (strcmp(cmd, "estimate") && strcmp(cmd, "solve") && strcmp(cmd, "simulate")) return 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--config") || !strcmp(argv[i], "--config-format") || !strcmp(argv[i], "--lr-scaling"))
            return 1;
    return 0;
}

int main(int argc, char **argv) {
    dt_cli_set_prog("dtplan");
    if (dt_cli_split_equals(&argc, &argv)) return dt_cli_fail(1, "out of memory reading the command line");
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (!strcmp(argv[1], k_commands[i].name))
            return wants_config(argv[1], argc - 1, argv + 1) ? run_with_config(&k_commands[i], argc - 1, argv + 1)
                                                             : k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "dtplan: unknown command '%s' (try: dtplan --help)\n", argv[1]);
    return 2;
}
