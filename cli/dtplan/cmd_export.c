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
#include "dt_mgexport.h"
#include "dt_ttexport.h"
#include "dt_json.h"
#include "dt_plan.h"
#include "dt_userexport.h"
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtplan export --deepspeed PLAN.json [-o ds_config.json] [--slurm launch.slurm]\n"
            "       dtplan export --megatron PLAN.json [--slurm launch.slurm]\n"
            "       dtplan export --torchtitan PLAN.json -o train.toml [--slurm launch.slurm]\n"
            "                     [--script train.py] [--master-addr A] [--master-port P] [--job-name N]\n"
            "\n"
            "Writes the DeepSpeed config equivalent to the plan (zero_optimization, bf16/fp16,\n"
            "batch triple, gradient_clipping, optimizer, scheduler) and prints the torchrun,\n"
            "dtrun and SLURM launch lines.\n"
            "  -o FILE          write the config to FILE (atomically); the launch lines go to stdout.\n"
            "                   Without -o the config goes to stdout and the launch lines to stderr.\n"
            "  --slurm FILE     also write an sbatch script (one torchrun per node)\n"
            "  --megatron       instead: Megatron-LM's torchrun line (pretrain_gpt.py and its arguments: the\n"
            "                   layout, model, batch, precision, recompute, optimizer, schedule); ZeRO 0-1 only\n"
            "  --torchtitan     instead: torchtitan's job TOML (-o FILE, a new file) and its torchrun line\n"
            "                   (model flavor, batch, layout as FSDP2 / TP / CP / PP, checkpointing, optimizer)\n"
            "  --script S       training script in the torchrun line (default train.py; pretrain_gpt.py for\n"
            "                   --megatron)\n"
            "  --master-addr A  (default $MASTER_ADDR)   --master-port P (default %d)\n"
            "\n"
            "example: dtplan export --deepspeed plan.json -o ds_config.json --slurm launch.slurm\n"
            "\n"
            "       dtplan export (--llamafactory | --hf-trainer | --runbook) PLAN.json -o FILE.yaml [--config MINE.yaml]\n"
            "Writes the plan as a LLaMA-Factory training YAML, Hugging Face TrainingArguments YAML or the\n"
            "runbook's training: block, the DeepSpeed JSON it names beside it (FILE_ds_config.json, when\n"
            "the plan uses ZeRO or offload) and prints the llamafactory-cli / torchrun / SLURM lines.\n"
            "  --config MINE     start from the user's own file: only the keys whose value changes are\n"
            "                    rewritten, in place; comments and everything else stay (docs/configs.md)\n"
            "  Neither FILE nor the DeepSpeed JSON may exist already (dtplan replaces no file it did not write).\n",
            DT_DEFAULT_MASTER_PORT);
}

static int fail(const char *msg) { return dt_cli_fail(2, "%s", msg); }

/* --megatron: the torchrun line with pretrain_gpt.py's arguments on stdout; --slurm FILE also
 * writes the sbatch script (atomically). */
static int export_megatron(const dt_plan *p, const dt_dsexport_opts *o, const char *slurm) {
    dt_error err = {0};
    char *launch = dt_mgexport_launch(p, o, &err);
    char *sbatch = launch && slurm ? dt_mgexport_sbatch(p, o, &err) : NULL;
    int rc = 0;
    if (!launch || (slurm && !sbatch)) rc = dt_cli_fail_err(err.code, &err);
    else if (slurm && dt_json_write_file_atomic(slurm, sbatch, &err)) rc = dt_cli_fail_err(err.code, &err);
    else {
        if (slurm) printf("wrote %s (sbatch script)\n", slurm);
        fputs(launch, stdout);
    }
    free(launch);
    free(sbatch);
    return rc;
}

/* --torchtitan: the job TOML written to out (a new file, atomically), the torchrun line on
 * stdout; --slurm FILE also writes the sbatch script. */
static int export_torchtitan(const dt_plan *p, const dt_dsexport_opts *o, const char *out, const char *slurm) {
    char msg[DT_ERROR_MSG_MAX + 256];
    struct stat st;
    if (!out) return fail("export: --torchtitan needs -o FILE.toml (the job config torchtitan.train reads)");
    if (stat(out, &st) == 0) {
        snprintf(msg, sizeof msg, "export: '%s' exists; dtplan replaces no file it did not write (choose another -o, "
                 "or move it away)", out);
        return fail(msg);
    }
    dt_error err = {0};
    char *toml = dt_ttexport_toml(p, &err);
    char *launch = toml ? dt_ttexport_launch(p, o, out, &err) : NULL;
    char *sbatch = launch && slurm ? dt_ttexport_sbatch(p, o, out, &err) : NULL;
    int rc = 0;
    if (!launch || (slurm && !sbatch)) rc = dt_cli_fail_err(err.code, &err);
    else if (dt_json_write_file_atomic(out, toml, &err)) rc = dt_cli_fail_err(err.code, &err);
    else if (slurm && dt_json_write_file_atomic(slurm, sbatch, &err)) rc = dt_cli_fail_err(err.code, &err);
    else {
        printf("wrote %s (torchtitan job config)\n", out);
        if (slurm) printf("wrote %s (sbatch script)\n", slurm);
        fputs(launch, stdout);
    }
    free(toml);
    free(launch);
    free(sbatch);
    return rc;
}

/* --llamafactory / --hf-trainer / --runbook: the config, its DeepSpeed JSON, the launch lines. */
static int export_user(const dt_plan *p, const char *plan_path, dt_ucfg_format fmt, const char *out,
                       const char *mine, const dt_dsexport_opts *o) {
    char msg[DT_ERROR_MSG_MAX + 256];
    struct stat st;
    if (!out) return fail("export: -o FILE is required for --llamafactory / --hf-trainer / --runbook");
    char ds[DT_PATH_MAX + 32] = "";
    if (dt_userexport_needs_deepspeed(p)) {
        const char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
        int stem = dot && (!slash || dot > slash) ? (int)(dot - out) : (int)strlen(out);
        snprintf(ds, sizeof ds, "%.*s_ds_config.json", stem, out);
    }
    const char *paths[2] = {out, ds};
    for (int i = 0; i < 2; i++)
        if (paths[i][0] && stat(paths[i], &st) == 0) {
            snprintf(msg, sizeof msg, "export: '%s' exists; dtplan replaces no file it did not write (choose another "
                     "-o, or move it away)", paths[i]);
            return fail(msg);
        }
    size_t ol = strlen(out);
    if (!mine && ol > 5 && !strcmp(out + ol - 5, ".json")) {
        snprintf(msg, sizeof msg, "export: '%s': a new config is written as YAML (TrainingArguments reads it with "
                 "parse_yaml_file); name it .yaml, or start from your JSON with --config", out);
        return fail(msg);
    }
    dt_error err = {0};
    char *orig = NULL;
    size_t len = 0;
    if (mine && dt_read_file(mine, 4u << 20, &orig, &len, &err)) {
        snprintf(msg, sizeof msg, "export: --config: %s", err.msg);
        return fail(msg);
    }
    char notes[2048];
    char *text = dt_userexport(p, fmt, ds[0] ? ds : NULL, orig, len, mine, notes, sizeof notes, &err);
    char *dsj = text && ds[0] ? dt_dsexport_config(p, &err) : NULL;
    int rc = 0;
    if (!text || (ds[0] && !dsj)) rc = err.code == DT_ENOMEM ? 1 : 2;
    else if (ds[0] && dt_json_write_file_atomic(ds, dsj, &err)) rc = 2;
    else if (dt_json_write_file_atomic(out, text, &err)) rc = 2;
    if (rc) fprintf(stderr, "dtplan: %s\n", err.msg);
    else {
        const int64_t nodes = p->cluster.nodes, per = p->cluster.gpus_per_node;
        printf("wrote %s (%s config for %s)%s%s%s\n", out, dt_ucfg_format_name(fmt), plan_path, ds[0] ? " and " : "",
               ds, ds[0] ? " (DeepSpeed config it names)" : "");
        fputs(notes, stdout);
        dt_ft_print_framework(&p->finetune, &p->model, stdout);   /* the method as PEFT / bitsandbytes / LLaMA-Factory spell it */
        if (fmt == DT_UCFG_LLAMAFACTORY && !mine)
            printf("note: LLaMA-Factory needs dataset: and template: to train; the plan names no LLaMA-Factory dataset: add "
                   "yours (or export with --config YOUR.yaml)\n");
        if (fmt == DT_UCFG_LLAMAFACTORY)
            printf("launch (each node): FORCE_TORCHRUN=1 NNODES=%lld NPROC_PER_NODE=%lld NODE_RANK=$NODE_RANK "
                   "MASTER_ADDR=%s MASTER_PORT=%d llamafactory-cli train %s\n",
                   (long long)nodes, (long long)per, o->master_addr, o->master_port, out);
        else
            printf("launch (each node): torchrun --nnodes %lld --nproc_per_node %lld --node_rank $NODE_RANK "
                   "--master_addr %s --master_port %d %s %s\n",
                   (long long)nodes, (long long)per, o->master_addr, o->master_port, o->script, out);
        printf("slurm: srun --nodes %lld --ntasks-per-node 1 bash -c 'NODE_RANK=$SLURM_NODEID <the launch line>' "
               "(one launcher per node; dtplan export --deepspeed --slurm writes a full sbatch script)\n",
               (long long)nodes);
    }
    free(orig);
    free(text);
    free(dsj);
    return rc;
}

int dt_cmd_export(int argc, char **argv) {
    const char *plan_path = NULL, *out = NULL, *slurm = NULL, *mine = NULL;
    int deepspeed = 0, megatron = 0, titan = 0;
    dt_ucfg_format fmt = DT_UCFG_AUTO;
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
        } else if (!strcmp(a, "--megatron")) {
            megatron = 1;
        } else if (!strcmp(a, "--torchtitan")) {
            titan = 1;
        } else if (!strcmp(a, "--llamafactory") || !strcmp(a, "--hf-trainer") || !strcmp(a, "--runbook")) {
            dt_ucfg_format f = a[2] == 'l' ? DT_UCFG_LLAMAFACTORY : a[2] == 'h' ? DT_UCFG_HF : DT_UCFG_RUNBOOK;
            if (fmt != DT_UCFG_AUTO && fmt != f) return fail("export: one target at a time");
            fmt = f;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--slurm") ||
                   !strcmp(a, "--script") || !strcmp(a, "--master-addr") ||
                   !strcmp(a, "--master-port") || !strcmp(a, "--job-name") || !strcmp(a, "--config")) {
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
            else if (!strcmp(a, "--config")) mine = v;
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
    if (deepspeed + megatron + titan + (fmt != DT_UCFG_AUTO) == 0)
        return fail("export: say what to export: --deepspeed, --megatron, --torchtitan, --llamafactory, --hf-trainer "
                    "or --runbook");
    if (deepspeed + megatron + titan + (fmt != DT_UCFG_AUTO) > 1) return fail("export: one target at a time");
    if (megatron && out)
        return fail("export: --megatron prints the launch line; -o is --deepspeed's config file (use --slurm FILE "
                    "for a script)");
    if (!plan_path) return fail("export: no plan given (usage: dtplan export --deepspeed plan.json)");
    if (mine && (deepspeed || megatron || titan)) return fail("export: --config applies to --llamafactory, --hf-trainer and --runbook");

    dt_plan p;
    dt_error err = {0};
    if (dt_plan_load(plan_path, &p, &err)) return fail(err.msg);
    if (fmt != DT_UCFG_AUTO) return export_user(&p, plan_path, fmt, out, mine, &o);
    o.plan_path = plan_path;
    if (out) o.config_path = out;
    if (megatron) return export_megatron(&p, &o, slurm);
    if (titan) return export_torchtitan(&p, &o, out, slurm);

    char *config = dt_dsexport_config(&p, &err);
    char *notes = config ? dt_dsexport_notes(&p, &err) : NULL;
    char *launch = notes ? dt_dsexport_launch(&p, &o, &err) : NULL;
    char *sbatch = launch && slurm ? dt_dsexport_sbatch(&p, &o, &err) : NULL;
    int rc = 0;
    if (!launch || (slurm && !sbatch)) {
        rc = dt_cli_fail_err(err.code, &err);
    } else if (out && dt_json_write_file_atomic(out, config, &err)) {
        rc = dt_cli_fail_err(err.code, &err);
    } else if (slurm && dt_json_write_file_atomic(slurm, sbatch, &err)) {
        rc = dt_cli_fail_err(err.code, &err);
    } else {
        FILE *lines = out ? stdout : stderr;
        if (!out) fputs(config, stdout);
        else fprintf(stdout, "wrote %s (DeepSpeed config for %s)\n", out, plan_path);
        if (slurm) fprintf(lines, "wrote %s (sbatch script)\n", slurm);
        fputs(notes, lines);
        dt_ft_print_framework(&p.finetune, &p.model, lines);   /* a fine-tuning plan: PEFT / bitsandbytes / LLaMA-Factory */
        dt_obj_print_framework(&p, lines);                      /* an objective: TRL / LLaMA-Factory names */
        fputs(launch, lines);
    }
    free(config);
    free(notes);
    free(launch);
    free(sbatch);
    return rc;
}
