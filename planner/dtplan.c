/* dtplan — plan distributed LLM training: estimate memory, solve for the fastest
 * configuration under a memory limit, show / export plans. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dt_cli.h"

int dt_cli_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dtplan: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return code;
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
    {"calibrate", dt_cmd_calibrate, "measure this machine and write a hardware profile"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: dtplan <command> [options]   (dtplan <command> --help for options)\n\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-10s %s\n", k_commands[i].name, k_commands[i].what);
    fprintf(f, "\nexample: dtplan estimate --params 32B --gpus 8\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "dtplan: unknown command '%s' (try: dtplan --help)\n", argv[1]);
    return 2;
}
