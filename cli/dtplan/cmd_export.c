/* cmd_export.c — `dtplan export --deepspeed plan.json [-o ds_config.json]`:
 * the equivalent DeepSpeed config plus torchrun / dtrun / SLURM launch lines. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_cli.h"
#include "dt_cli_ft.h"
#include "dt_cli_obj.h"
#include "dt_dsexport.h"
#include "dt_json.h"
#include "dt_plan.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtplan export --deepspeed PLAN.json [-o ds_config.json] [--slurm launch.slurm]\n"
            "                     [--script train.py] [--master-addr A] [--master-port P] [--job-name N]\n"
            "\n"
            "Writes the DeepSpeed config equivalent to the plan (zero_optimization, bf16/fp16,\n"
            "batch triple, gradient_clipping, optimizer, scheduler) and prints the torchrun,\n"
            "dtrun and SLURM launch lines.\n"
            "  -o FILE          write the config to FILE (atomically); the launch lines go to stdout.\n"
            "                   Without -o the config goes to stdout and the launch lines to stderr.\n"
            "  --slurm FILE     also write an sbatch script (one torchrun per node)\n"
            "  --script S       training script in the torchrun line (default train.py)\n"
            "  --master-addr A  (default $MASTER_ADDR)   --master-port P (default %d)\n"
            "\n"
            "example: dtplan export --deepspeed plan.json -o ds_config.json --slurm launch.slurm\n",
            DT_DEFAULT_MASTER_PORT);
}

static int fail(const char *msg) {
    fprintf(stderr, "dtplan: %s\n", msg);
    return 2;
}

int dt_cmd_export(int argc, char **argv) {
    const char *plan_path = NULL, *out = NULL, *slurm = NULL;
    int deepspeed = 0;
    dt_dsexport_opts o;
    dt_dsexport_opts_default(&o);
    char msg[DT_ERROR_MSG_MAX + 64];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--deepspeed")) {
            deepspeed = 1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--slurm") ||
                   !strcmp(a, "--script") || !strcmp(a, "--master-addr") ||
                   !strcmp(a, "--master-port") || !strcmp(a, "--job-name")) {
            if (!has_val) {
                snprintf(msg, sizeof msg, "export: %s needs a value (see dtplan export --help)", a);
                return fail(msg);
            }
            const char *v = argv[++i];
            if (!*v) {
                snprintf(msg, sizeof msg, "export: %s: empty value (see dtplan export --help)", a);
                return fail(msg);
            }
            if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
            else if (!strcmp(a, "--slurm")) slurm = v;
            else if (!strcmp(a, "--script")) o.script = v;
            else if (!strcmp(a, "--master-addr")) o.master_addr = v;
            else if (!strcmp(a, "--job-name")) o.job_name = v;
            else {
                char *end = NULL;
                errno = 0;
                long port = strtol(v, &end, 10);
                if (errno || !*v || *end || port < 1 || port > 65535) {
                    snprintf(msg, sizeof msg, "export: bad --master-port '%s' (a TCP port 1..65535, e.g. 29500)", v);
                    return fail(msg);
                }
                o.master_port = (int)port;
            }
        } else if (a[0] == '-' && a[1]) {
            snprintf(msg, sizeof msg, "export: unknown option '%s' (see dtplan export --help)", a);
            return fail(msg);
        } else if (plan_path) {
            snprintf(msg, sizeof msg, "export: one plan at a time ('%s' and '%s')", plan_path, a);
            return fail(msg);
        } else {
            plan_path = a;
        }
    }
    if (!deepspeed)
        return fail("export: say what to export: --deepspeed (the only target so far)");
    if (!plan_path) return fail("export: no plan given (usage: dtplan export --deepspeed plan.json)");

    dt_plan p;
    dt_error err = {0};
    if (dt_plan_load(plan_path, &p, &err)) return fail(err.msg);
    o.plan_path = plan_path;
    if (out) o.config_path = out;

    char *config = dt_dsexport_config(&p, &err);
    char *notes = config ? dt_dsexport_notes(&p, &err) : NULL;
    char *launch = notes ? dt_dsexport_launch(&p, &o, &err) : NULL;
    char *sbatch = launch && slurm ? dt_dsexport_sbatch(&p, &o, &err) : NULL;
    int rc = 0;
    if (!launch || (slurm && !sbatch)) {
        rc = err.code == DT_EINVAL ? 2 : 1;
        fprintf(stderr, "dtplan: %s\n", err.msg);
    } else if (out && dt_json_write_file_atomic(out, config, &err)) {
        rc = err.code == DT_EINVAL ? 2 : 1;
        fprintf(stderr, "dtplan: %s\n", err.msg);
    } else if (slurm && dt_json_write_file_atomic(slurm, sbatch, &err)) {
        rc = err.code == DT_EINVAL ? 2 : 1;
        fprintf(stderr, "dtplan: %s\n", err.msg);
    } else {
        FILE *lines = out ? stdout : stderr;
        if (!out) fputs(config, stdout);
        else fprintf(stdout, "wrote %s (DeepSpeed config for %s)\n", out, plan_path);
        if (slurm) fprintf(lines, "wrote %s (sbatch script)\n", slurm);
        fputs(notes, lines);
        dt_ft_print_framework(&p.finetune, lines);   /* a fine-tuning plan: PEFT / bitsandbytes / LLaMA-Factory */
        dt_obj_print_framework(&p, lines);           /* an objective: TRL / LLaMA-Factory names */
        fputs(launch, lines);
    }
    free(config);
    free(notes);
    free(launch);
    free(sbatch);
    return rc;
}
