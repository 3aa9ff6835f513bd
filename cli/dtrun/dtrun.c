/* dtrun — executes a plan written by dtplan (docs/dtrun.md, docs/launch.md).
 *
 *   dtrun [LAUNCH FLAGS] PLAN.json [--out DIR] [--max-steps N] [--data PATH] [--init PATH] [--init-adapter DIR]
 *         [--resume | --overwrite]
 *                                  [--timeout SECONDS] [--trace FILE] [--quiet]
 *   dtrun sample CKPT_DIR [--prompt TEXT] [--tokens N] [--seed S] [--temperature X] [--tokenizer T]
 *                         [--dump-logits FILE]
 *
 * LAUNCH FLAGS (torchrun's): --nnodes N --node-rank R --nproc-per-node M
 * --master-addr A --master-port P. A plan with world_size > 1 started without
 * mpirun/srun/torchrun makes this process start every local rank itself.
 *
 * Exit status: 0 success, 2 bad input (arguments, plan, data, launch), 1 other
 * failures (a rank that died or timed out included). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dt_dtrun_cli.h"
#include "dt_adapter.h"
#include "dt_ckpt.h"
#include "dt_cli_prepared.h"
#include "dt_comm.h"
#include "dt_data.h"
#include "dt_file.h"
#include "dt_gemm_cpu.h"
#include "dt_lm.h"
#include "dt_launch.h"
#include "dt_objrun.h"
#include "dt_pgroup.h"
#include "dt_plan.h"
#include "dt_rendezvous.h"
#include "dt_runadapter.h"
#include "dt_rundir.h"
#include "dt_timemodel.h"
#include "dt_train.h"
#include "dt_vlmtrain.h"
#ifdef DT_HAVE_CUDA
#include "dt_nccl.h"
#endif

/* Default --timeout: seconds a collective (and the TCP rendezvous) may wait for
 * a peer before the run is declared dead; torchrun/NCCL use minutes too
 * (docs/launch.md §4). Equal to the rendezvous default. */
#define DT_TIMEOUT_S DT_RENDEZVOUS_TIMEOUT_S
/* grpo: a reward command's default wall-clock limit per call (TRL has none; ours bounds a hang) */
#define DT_REWARD_TIMEOUT_S 60.0

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtrun [--nnodes N --node-rank R --nproc-per-node M --master-addr A --master-port P]\n"
            "             PLAN.json [--out DIR] [--max-steps N] [--data PATH] [--init PATH] [--init-adapter DIR]\n"
            "             [--resume | --overwrite] [--timeout SECONDS] [--trace FILE] [--quiet] [--no-progress]\n"
            "             [--reward-command CMD] [--reward-timeout SECONDS]  (grpo plans)\n"
            "       dtrun sample CKPT_DIR [--prompt TEXT] [--tokens N] [--seed S] [--temperature X]\n"
            "                         [--tokenizer TOKENIZER] [--dump-logits FILE]\n"
            "       dtrun calibrate -o PROFILE.json [--plan PLAN.json] [--no-mpi]\n"
            "       dtrun calibrate --device cuda -o PROFILE.json [--base PROFILE] [--gpu N] [--name NAME]\n"
            "       dtrun tokenize --tokenizer TOKENIZER.json|.model [--decode] [--no-special]  (stdin -> ids per line)\n"
            "       dtrun prepare --tokenizer TOKENIZER --out DIR INPUT...  (text, JSONL -> token shards; see prepare --help)\n"
            "       dtrun merge --base HFDIR --adapter DIR -o OUTDIR [--max-shard-size 5GB] [--dtype bf16|fp16|fp32]\n"
            "                   (a PEFT LoRA adapter merged into its base: a Hugging Face model directory)\n"
            "\n"
            "Trains the plan's model exactly as planned (ZeRO stage, offload, cpu or cuda device),\n"
            "one process per rank: alone, a plan with world_size > 1 starts its ranks itself\n"
            "(through mpirun; with --nnodes, this node's ranks); under mpirun, srun or torchrun\n"
            "each process is one rank. --out, --data and --init override the plan's output.dir,\n"
            "data.train and output.init (the starting weights: a Hugging Face model directory,\n"
            "sharded or not, or a .safetensors file); --init-adapter starts a LoRA plan's adapters\n"
            "from a PEFT adapter directory (its r, alpha and modules the plan's; a LoRA run writes\n"
            "one beside each checkpoint: CKPT/adapter/); --max-steps stops early without\n"
            "changing the LR schedule. A grpo plan scores its completions with --reward-command\n"
            "(a shell line reading {\"prompt\", \"completion\", \"answer\"} JSON lines, printing one\n"
            "number per line; killed after --reward-timeout, default %.0f s) or, without it, the\n"
            "built-in exact-answer check against each prompt's \"answer\". A new run needs an absent or empty output directory;\n"
            "--resume continues the run in it from its newest complete checkpoint (a finished run\n"
            "is left as it is); --overwrite starts a new run there after removing what dtrun wrote\n"
            "(metrics, reports, heartbeats, checkpoints), keeping every other file. Checkpoints\n"
            "carry a CRC-32C per file, checked when resuming. --timeout (default %.0f s) bounds\n"
            "every wait for another rank (collectives, rendezvous): a rank that died or hangs is\n"
            "then named and every rank exits non-zero; --trace writes the run as Chrome trace\n"
            "JSON (dtplan compare reads it).\n"
            "--quiet: no log lines (metrics and reports are still written); --no-progress: log lines\n"
            "instead of the progress bar, even on a terminal.\n"
            "Writes metrics.jsonl, run-report.json, hb/ heartbeats and\n"
            "checkpoints (ckpt-NNNNNNNN/: Hugging Face model directories, loadable by transformers'\n"
            "from_pretrained).\n"
            "'sample' prints text from a checkpoint (or the newest one under a run directory).\n"
            "'calibrate' measures this machine and writes a hardware profile (also: dtplan calibrate).\n",
            DT_REWARD_TIMEOUT_S, DT_TIMEOUT_S);
}

static int parse_seconds(const char *s, const char *what, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v > 0) || !isfinite(v)) {
        fprintf(stderr, "dtrun: %s expects a number of seconds > 0, got '%s'\n", what, s);
        return 2;
    }
    *out = v;
    return 0;
}

#ifdef DT_HAVE_CUDA
/* TCP bootstrap of NCCL (torchrun / launch flags): rank 0's unique id goes to
 * every rank over the rendezvous channel (docs/launch.md §3). */
static int rdzv_exchange(void *ctx, void *id, size_t bytes, int rank, int size, dt_error *err) {
    (void)rank;
    (void)size;
    return dt_rendezvous_broadcast((dt_rdzv *)ctx, id, bytes, err);
}
#endif

/* The communicator for the launched world (dt_launch_bootstrap's choice).
 * *rdzv is the TCP channel to close after training (NULL otherwise). */
static int open_comm(const dt_launch_info *li, int is_cuda, double timeout_s, dt_comm **comm, dt_rdzv **rdzv,
                     dt_error *err) {
    *comm = NULL;
    *rdzv = NULL;
    dt_launch_boot boot;
    int rc = dt_launch_bootstrap(li, is_cuda, &boot, err);
    if (rc) return rc;
    if (boot == DT_BOOT_SELF) return dt_comm_init_self(comm, err);
#ifdef DT_HAVE_CUDA
    if (is_cuda) {
        if (boot == DT_BOOT_TCP) {
            if ((rc = dt_rendezvous_open(rdzv, li->master_addr, li->master_port + DT_RENDEZVOUS_PORT_OFFSET,
                                         li->rank, li->world, timeout_s, err)))
                return rc;
            dt_nccl_set_id_exchange(rdzv_exchange, *rdzv);
        }
        return dt_comm_init_nccl(comm, timeout_s, err);
    }
#else
    if (is_cuda)
        return dt_errorf(err, DT_EINVAL,
                         "the plan's device is cuda but this dtrun was built without CUDA/NCCL "
                         "(rebuild with the CUDA toolkit and NCCL installed)");
#endif
    if (boot == DT_BOOT_TCP) {   /* CPU ranks without mpirun: one MPI world joined over TCP */
        if ((rc = dt_rendezvous_open(rdzv, li->master_addr, li->master_port + DT_RENDEZVOUS_PORT_OFFSET, li->rank,
                                     li->world, timeout_s, err)))
            return rc;
        return dt_comm_init_mpi_tcp(comm, timeout_s, *rdzv, li->rank, li->world, err);
    }
    return dt_comm_init_mpi(comm, timeout_s, err);
}

/* --init PATH overrides the plan's output.init: the path must name a weights file
 * or a Hugging Face model directory (checked here, before any rank starts). */
static int set_init(dt_plan *plan, const char *path, dt_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return dt_errorf(err, DT_EINVAL, "--init %s: %s: give a Hugging Face model directory (config.json + "
                         "safetensors) or a .safetensors / llm.c .bin file", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))
        return dt_errorf(err, DT_EINVAL, "--init %s: not a directory or a regular file", path);
    if (snprintf(plan->output.init, sizeof plan->output.init, "%s", path) >= (int)sizeof plan->output.init)
        return dt_errorf(err, DT_EINVAL, "--init: the path is longer than %zu bytes", sizeof plan->output.init - 1);
    return DT_OK;
}

/* After a run on a profile that measured nothing of this machine (the built-in `cpu`, a
 * GPU datasheet) whose step missed the prediction by more than DT_PREDICTION_HINT_FRACTION:
 * one line saying how to make the plan predict this machine. */
static void hint_calibrate(const dt_plan *plan, double measured_s) {
    const dt_hardware *hw = &plan->cluster.hw;
    const double predicted_s = plan->prediction.time.step_s;
    if (dt_hardware_is_measured(hw) || predicted_s <= 0 || measured_s <= 0) return;
    const double off = measured_s / predicted_s - 1.0;
    if (fabs(off) <= DT_PREDICTION_HINT_FRACTION) return;
    const int cuda = plan->cluster.device == DT_DEVICE_CUDA;
    fprintf(stderr,
            "dtrun: the step was %.0f%% %s the prediction of profile '%s', which holds no measurement of "
            "this machine: `dtplan calibrate%s -o %s` measures it, and `dtplan solve --hardware %s ...` "
            "plans with it (docs/hardware.md)\n",
            fabs(off) * 100.0, off < 0 ? "below" : "above", hw->name, cuda ? " --device cuda" : "",
            cuda ? "gpu.json" : "local.json", cuda ? "gpu.json" : "local.json");
}

/* The training data: a plan that names none (data.train absent: a model with a real
 * vocabulary, planned without --data) needs --data, which may be a `dtrun prepare` output
 * (its shards, tokenizer fingerprint and loss mask then become the plan's, as dtplan solve
 * --data DIR sets them). A plan that names its data keeps --data as an override of the
 * path (checked against the plan's tokenizer as before). */
static int plan_data(dt_plan *plan, const char *plan_path, dt_train_opts *o, dt_error *err) {
    struct stat sb;
    /* a path that is not there, or a FIFO / device: refused before any rank or directory */
    if (o->data_path && stat(o->data_path, &sb) != 0)
        return dt_errorf(err, DT_EINVAL, "--data %s: data path not found: %s", o->data_path, strerror(errno));
    if (o->data_path && !S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))
        return dt_errorf(err, DT_EINVAL, "--data %s: is %s, not a regular file or a directory: give a data file, a "
                         "directory of data files or a dtrun prepare output", o->data_path, dt_file_kind(sb.st_mode));
    if (plan->data.train[0]) return DT_OK;
    if (!o->data_path)
        return dt_errorf(err, DT_EINVAL,
                         "%s names no training data (data.train): pass --data PREPARED_DIR (a dtrun prepare output), "
                         "or prepare one with: dtrun prepare --tokenizer TOKENIZER --out DIR INPUT...", plan_path);
    if (!dt_prepared_is_output(o->data_path)) return DT_OK;   /* text or llm.c shards: read as given */
    char note[1024];
    if (dt_solve_apply_prepared(plan, o->data_path, note, sizeof note, err)) return err->code;
    o->data_path = NULL;   /* the plan's data section now names the shards */
    return DT_OK;
}

/* The plan's fine-tuning method against what this engine trains (dt_lm_check_method) and
 * against the model (a hand-edited plan.json reaches here unchecked by dtplan). */
static int check_finetune(const dt_plan *plan, const char *plan_path, dt_error *err) {
    const dt_finetune *ft = &plan->finetune;
    if (ft->method == DT_FT_FULL) return DT_OK;
    if (dt_lm_check_method(&plan->precision, plan->cluster.device, ft, err))
        return dt_error_prefix(err, "%s plans a %s fine-tune (finetune.method)", plan_path,
                               dt_ft_method_name(ft->method));
    dt_pgroups *pg = malloc(sizeof *pg);
    if (!pg) return dt_errorf(err, DT_ENOMEM, "out of memory");
    int rc = dt_finetune_check(ft, "finetune", err);
    if (!rc) rc = dt_model_pgroups(&plan->model, ft, plan->precision.param, DT_ROLE_POLICY, pg, err);
    free(pg);
    return rc ? dt_error_prefix(err, "%s", plan_path) : DT_OK;
}

static int cmd_train(int argc, char **argv) {
    const char *plan_path = NULL, *init_path = NULL;
    dt_train_opts o;
    memset(&o, 0, sizeof o);
    o.progress = -1;
    o.log = stderr;
    o.reward_timeout_s = DT_REWARD_TIMEOUT_S;
    double timeout_s = DT_TIMEOUT_S;
    dt_error err;
    dt_error_clear(&err);
    /* torchrun-style launch flags first: they leave argv, the rest is dtrun's */
    dt_launch_flags lf;
    dt_launch_flags_init(&lf);
    if (dt_launch_flags_parse(&lf, &argc, argv, &err)) return dt_cli_fail_err(DT_EINVAL, &err);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (strcmp(a, "--out") == 0 && has_val) o.out_dir = argv[++i];
        else if (strcmp(a, "--data") == 0 && has_val) o.data_path = argv[++i];
        else if (strcmp(a, "--init") == 0 && has_val) init_path = argv[++i];
        else if (strcmp(a, "--init-adapter") == 0 && has_val) o.init_adapter = argv[++i];
        else if (strcmp(a, "--max-steps") == 0 && has_val) {
            if (dt_cli_parse_i64(argv[++i], "--max-steps", 1, &o.max_steps)) return 2;
        } else if (strcmp(a, "--timeout") == 0 && has_val) {
            if (parse_seconds(argv[++i], "--timeout", &timeout_s)) return 2;
        } else if (strcmp(a, "--reward-command") == 0 && has_val) {
            o.reward_cmd = argv[++i];
        } else if (strcmp(a, "--reward-timeout") == 0 && has_val) {
            if (parse_seconds(argv[++i], "--reward-timeout", &o.reward_timeout_s)) return 2;
        } else if (strcmp(a, "--resume") == 0) o.resume = 1;
        else if (strcmp(a, "--overwrite") == 0) o.overwrite = 1;
        else if (strcmp(a, "--quiet") == 0) o.log = NULL;
        else if (strcmp(a, "--trace") == 0 && has_val) o.trace_path = argv[++i];   /* engine/dist/dt_tracer.h */
        else if (strcmp(a, "--no-progress") == 0) o.progress = 0;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "dtrun: unknown option '%s'%s (see dtrun --help)\n", a,
                    has_val ? "" : " or missing value");
            return 2;
        } else if (!plan_path) plan_path = a;
        else {
            fprintf(stderr, "dtrun: unexpected argument '%s' (one plan file)\n", a);
            return 2;
        }
    }
    if (!plan_path) {
        usage(stderr);
        return 2;
    }
    if (o.resume && o.overwrite) {
        fprintf(stderr, "dtrun: --resume and --overwrite exclude each other: --resume continues the run in the "
                        "output directory, --overwrite starts a new one there\n");
        return 2;
    }
    o.plan_path = plan_path;
    dt_plan plan;
    /* an unreadable plan is bad input too (exit 2), like an invalid one */
    int rc = dt_plan_load(plan_path, &plan, &err);
    if (!rc) rc = dt_plan_validate(&plan, &err);
    if (!rc && init_path) rc = set_init(&plan, init_path, &err);
    /* what of a vision-language plan this engine does not train (dt_vlmtrain.h): one line each */
    if (!rc && dt_vlm_active(&plan.vlm) && dt_vlmtrain_ops()->check(&plan, &err))
        rc = dt_error_prefix(&err, "%s plans a vision-language model (%s tower, stage %s)", plan_path,
                             dt_vit_kind_name(plan.vlm.tower.kind), dt_vlm_stage_name(plan.vlm.stage));
    if (!rc && plan.runtime.kind != DT_RUNTIME_DTRUN)   /* a plan predicting another framework's run */
        rc = dt_errorf(&err, DT_EINVAL,
                       "%s predicts a %s run (runtime.kind); dtrun trains plans made for itself: re-plan with "
                       "dtplan solve ... --runtime dtrun, or run this one with %s", plan_path,
                       dt_runtime_name(plan.runtime.kind),
                       plan.runtime.kind == DT_RUNTIME_DEEPSPEED ? "deepspeed (dtplan export writes its config)"
                       : plan.runtime.kind == DT_RUNTIME_MEGATRON ? "Megatron-LM (dtplan export --megatron writes its "
                                                                    "arguments)"
                                                                  : "torchrun and PyTorch FSDP");
    if (!rc) rc = check_finetune(&plan, plan_path, &err);
    /* an objective beyond next-token prediction with no table in engine/run/dt_objrun.h (ppo) */
    if (!rc && plan.objective.kind >= DT_OBJ_RM && !dt_objrun_for(plan.objective.kind))
        rc = dt_errorf(&err, DT_EINVAL,
                       "%s plans a %s run (objective.kind); this dtrun trains pt / sft / rm / dpo / grpo: run it with TRL or "
                       "LLaMA-Factory on DeepSpeed (dtplan export writes the config)", plan_path,
                       dt_obj_name(plan.objective.kind));
    if (!rc && dt_objrun_for(plan.objective.kind) && dt_objrun_for(plan.objective.kind)->check(&plan, &err))
        rc = dt_error_prefix(&err, "%s", plan_path);   /* what of rm / dpo this engine does not train */
    if (!rc) rc = plan_data(&plan, plan_path, &o, &err);   /* after what no --data could change */
    if (!rc && o.init_adapter) {   /* checked here, before any rank starts or anything is written */
        dt_adapter *ad = NULL;
        rc = dt_run_adapter_open(&plan, o.init_adapter, &ad, &err);
        dt_adapter_free(ad);
    }
    if (rc) return dt_cli_fail_err(DT_EINVAL, &err);
    const int world = (int)plan.parallel.world_size, gpn = (int)plan.cluster.gpus_per_node;
    const int nodes = (int)plan.cluster.nodes, is_cuda = plan.cluster.device == DT_DEVICE_CUDA;
    /* where this process stands: a lone agent, or a rank of mpirun/srun/torchrun */
    dt_launch_info li;
    if (dt_launch_discover(&lf, &li, &err)) return dt_cli_fail_err(DT_EINVAL, &err);
    if (dt_launch_must_spawn(&li, world)) {   /* `dtrun plan.json` with world > 1: start the ranks */
        /* a refused output directory: one line here, before any rank starts (the ranks check again) */
        const char *out = o.out_dir ? o.out_dir : plan.output.dir;
        if (dt_rundir_check(out, o.resume ? DT_OUT_RESUME : o.overwrite ? DT_OUT_OVERWRITE : DT_OUT_NEW, &err))
            return dt_cli_fail_err(DT_EINVAL, &err);
        /* no usable GPU: one line here, not one per rank */
        const dt_device_ops *dev = NULL;
        if (is_cuda && dt_device_cuda_count() == 0 && dt_device_get(DT_DEVICE_CUDA, 0, &dev, &err) != DT_OK) {
            fprintf(stderr, "dtrun: %s\n", err.msg);
            return 1;
        }
        return dt_launch_spawn_local(&li, world, gpn, argc, argv, stderr, &err);
    }
    if (dt_launch_check_world(&li, world, gpn, nodes, &err)) {
        if (li.rank == 0) fprintf(stderr, "dtrun: %s\n", err.msg);   /* one line, not one per rank */
        return 2;
    }
    dt_comm *comm = NULL;
    dt_rdzv *rdzv = NULL;
    rc = open_comm(&li, is_cuda, timeout_s, &comm, &rdzv, &err);
    if (rc) {
        dt_rendezvous_close(rdzv);
        return dt_cli_fail_err(rc, &err);
    }
    const int rank = dt_comm_rank(comm);
    /* a hand-edited plan: recompute the prediction; warn when the stored one is stale */
    char what[256];
    int stale = 0;
    if ((rc = dt_plan_refresh_prediction(&plan, &stale, what, sizeof what, &err))) {
        dt_comm_free(comm);
        dt_rendezvous_close(rdzv);
        return dt_cli_fail_err(DT_EINVAL, &err);
    }
    if (stale && rank == 0)
        fprintf(stderr,
                "dtrun: warning: %s: the stored prediction is stale (%s); using a recomputed one "
                "(dtplan estimate --plan %s refreshes the file)\n",
                plan_path, what, plan_path);
    if (o.max_steps > plan.schedule.total_steps && rank == 0)
        fprintf(stderr,
                "dtrun: warning: --max-steps %lld is beyond the plan's %lld steps; stopping at %lld, where its "
                "LR schedule ends (for a longer run: dtplan solve ... --steps %lld)\n",
                (long long)o.max_steps, (long long)plan.schedule.total_steps,
                (long long)plan.schedule.total_steps, (long long)o.max_steps);
    o.comm = comm;
    dt_train_result r;
    rc = dt_train(&plan, &o, &r, &err);
    if (rc && r.refused) {   /* every rank refused the output directory alike: one line, nothing to abort */
        if (rank == 0) fprintf(stderr, "dtrun: %s\n", err.msg);
        dt_comm_free(comm);
        dt_rendezvous_close(rdzv);
        return dt_cli_exit_code(rc);
    }
    if (rc) {
        /* a collective timeout already carries the heartbeat diagnosis naming the rank */
        fprintf(stderr, "dtrun: rank %d: %s\n", rank, err.msg);
        /* the other ranks may be blocked in a collective: end them all now */
        if (world > 1) dt_comm_abort(comm, dt_cli_exit_code(rc));
        dt_comm_free(comm);
        dt_rendezvous_close(rdzv);
        return dt_cli_exit_code(rc);
    }
    dt_comm_free(comm);
    dt_rendezvous_close(rdzv);
    if (rank != 0) o.log = NULL;
    if (o.log && r.finished)
        fprintf(stderr, "dtrun: %s: already finished at step %lld; nothing changed\n",
                o.out_dir ? o.out_dir : plan.output.dir, (long long)r.steps);
    else if (o.log)
        fprintf(stderr, "dtrun: done: step %lld, loss %.4f -> %.4f%s, %.0f tokens/s, step %.1f ms (predicted %.1f ms)\n",
                (long long)r.steps, r.first_loss, r.last_loss, r.skipped ? " (some fp16 steps skipped)" : "",
                r.tokens_per_s, r.step_time_s * 1e3, plan.prediction.time.step_s * 1e3);
    if (o.log && !r.finished) hint_calibrate(&plan, r.step_time_s);
    return 0;
}

/* DT_GEMM (engine/device/dt_gemm_cpu.h) is read where the first GEMM runs, which
 * would fall back to the rule on a value it cannot parse: refuse it up front instead */
static int check_gemm_env(void) {
    dt_gemm_kernel f = DT_GEMM_OPENBLAS, b = DT_GEMM_WIDEN;
    int ff, fb;
    dt_error err;
    dt_error_clear(&err);
    if (dt_gemm_parse(getenv("DT_GEMM"), &f, &b, &ff, &fb, &err) == DT_OK) return 0;
    fprintf(stderr, "dtrun: %s; unset DT_GEMM to let the rule choose (docs/engine.md \"GEMM kernels\")\n",
            err.msg);
    return 2;
}

int main(int argc, char **argv) {
    dt_cli_set_prog("dtrun");
    /* under dtrun's own spawner this process only supervises the real rank */
    int st = dt_launch_supervisor(argc, argv);
    if (st >= 0) return st;
    if ((st = check_gemm_env())) return st;
    if (dt_cli_split_equals(&argc, &argv)) return dt_cli_fail(1, "out of memory reading the command line");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "sample") == 0) return dt_cmd_sample(argc - 1, argv + 1);
    if (strcmp(argv[1], "tokenize") == 0) return dt_cmd_tokenize(argc - 1, argv + 1);
    if (strcmp(argv[1], "prepare") == 0) return dt_cmd_prepare(argc - 1, argv + 1);
    if (strcmp(argv[1], "merge") == 0) return dt_cmd_merge(argc - 1, argv + 1);
    if (strcmp(argv[1], "calibrate") == 0) {
        /* `dtplan calibrate` execs this binary with argv[0] = "dtplan" */
        const char *base = strrchr(argv[0], '/');
        base = base ? base + 1 : argv[0];
        return dt_cmd_calibrate(strcmp(base, "dtplan") == 0 ? "dtplan" : "dtrun", argc - 1, argv + 1);
    }
    return cmd_train(argc, argv);
}
