#!/bin/bash
# dtplan show / dtplan export: output checks and every bad-input path (exit 2, one line).
# args: dtplan dtrun source-dir
set -u
DTPLAN=$1
SRC=$3
TINY=$SRC/configs/plans/tiny-cpu.json
BIG=$SRC/tests/plan/fixtures/gpt2-2x4-zero3.json
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
has() { grep -qF -- "$2" "$1" || bad "$1 lacks: $2"; }

# expect_err WANT_SUBSTRING cmd...: exit 2, one line on stderr containing WANT
expect_err() {
    local want=$1; shift
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ $rc -eq 2 ] || bad "exit $rc (want 2): $*"
    [ "$(wc -l <"$T/err")" -eq 1 ] || bad "stderr is not one line: $* -> $(cat "$T/err")"
    grep -qF -- "$want" "$T/err" || bad "stderr of '$*' lacks '$want': $(cat "$T/err")"
    grep -q '^dtplan: ' "$T/err" || bad "stderr does not start with 'dtplan: ': $*"
}

# ---- show ----
"$DTPLAN" show "$TINY" >"$T/show" 2>"$T/err" || bad "show tiny-cpu exit $?"
for s in "plan         $TINY (dtplan.plan/1)" "model        gpt2-tiny (gpt2): 2 layers, hidden 64" \
         "cluster      1 node(s) x 1 rank(s)" "4.00 GiB per device (reserve 0.25 GiB)" \
         "ZeRO stage 0 (DDP" "global 16 sequences = micro 8 x accumulation 2 x world 1" \
         "precision    fp32" "0 of 2 layers checkpointed" "WarmupCosineLR: 300 steps" \
         "data         /usr/share/games/fortunes (text, byte tokenizer)" "prediction   none stored"; do
    has "$T/show" "$s"
done
"$DTPLAN" show --units GB "$TINY" >"$T/showgb" || bad "show --units GB"
has "$T/showgb" "4.29 GB per device"
"$DTPLAN" show "$BIG" >"$T/big" || bad "show big"
for s in "2 node(s) x 4 rank(s) = 8 rank(s), device cuda" "ZeRO stage 3" "offload: optimizer cpu, parameters cpu" \
         "loss scale: dynamic from 2^16" "6 of 12 layers checkpointed" "step 295.76 ms: compute 56.60" \
         "communicated per rank per step: allreduce 8 B, reduce_scatter 1.85 GiB" "MFU 9.6%"; do
    has "$T/big" "$s"
done
# a plan whose model carries RoPE scaling (Llama-3.1's llama3 rescaling) shows it
"$DTPLAN" solve --model llama-3.1-8b --mem 80G --gpus 8 -o "$T/l31.json" >/dev/null || bad "solve llama-3.1-8b"
"$DTPLAN" show "$T/l31.json" >"$T/l31" || bad "show llama-3.1-8b"
has "$T/l31" "rope scaling llama3 (factor 8, low 1, high 4, original 8192 positions)"
"$DTPLAN" show --help >"$T/help" || bad "show --help"
has "$T/help" "usage: dtplan show"

expect_err "no plan given" "$DTPLAN" show
expect_err "unknown option '--frobnicate'" "$DTPLAN" show --frobnicate "$TINY"
expect_err "$T/missing.json: cannot open" "$DTPLAN" show "$T/missing.json"
expect_err "unknown unit 'furlongs'" "$DTPLAN" show --units furlongs "$TINY"
sed 's/"global_batch": 16/"global_batch": 30/' "$TINY" >"$T/triple.json"
expect_err "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 30 != 8 * 2 * 1" \
    "$DTPLAN" show "$T/triple.json"
sed 's/"seq_len": 64/"seq_len": 64, "seq_lem": 64/' "$TINY" >"$T/unknown.json"
expect_err "\$.batch.seq_lem: unknown key" "$DTPLAN" show "$T/unknown.json"
sed 's/"micro_batch": 8/"micro_batch": "8"/' "$TINY" >"$T/type.json"
expect_err "\$.batch.micro_batch: expected a positive integer, got \"8\"" "$DTPLAN" show "$T/type.json"
sed 's/"zero_stage": 0/"zero_stage": 5/' "$TINY" >"$T/stage.json"
expect_err "Maximum supported ZeRO stage is 3" "$DTPLAN" show "$T/stage.json"
sed 's/"offload_param": "none"/"offload_param": "cpu"/' "$TINY" >"$T/offp.json"
expect_err "offload_param = cpu needs zero_stage 3" "$DTPLAN" show "$T/offp.json"
printf '{\n  "format": "dtplan.plan/1",\n  "model": {"name": }\n}\n' >"$T/syntax.json"
expect_err "$T/syntax.json:3:21: invalid JSON" "$DTPLAN" show "$T/syntax.json"

# ---- export ----
"$DTPLAN" export --deepspeed "$TINY" >"$T/ds_stdout.json" 2>"$T/launch" || bad "export to stdout"
has "$T/ds_stdout.json" '"train_batch_size": 16,'
has "$T/ds_stdout.json" '"type": "WarmupCosineLR"'
has "$T/ds_stdout.json" '"warmup_min_ratio": 0,'
has "$T/launch" "torchrun --nnodes 1 --nproc_per_node 1 --node_rank 0 --master_addr \$MASTER_ADDR --master_port 29500 train.py --deepspeed ds_config.json"
has "$T/launch" "dtrun $TINY"

"$DTPLAN" export --deepspeed "$BIG" -o "$T/ds.json" --slurm "$T/launch.slurm" --master-port 6000 \
    >"$T/out" 2>"$T/err" || bad "export -o: $(cat "$T/err")"
[ -s "$T/err" ] && bad "export -o wrote to stderr: $(cat "$T/err")"
has "$T/out" "wrote $T/ds.json"
has "$T/out" "torchrun --nnodes 2 --nproc_per_node 4 --node_rank \$NODE_RANK --master_addr \$MASTER_ADDR --master_port 6000 train.py --deepspeed $T/ds.json"
has "$T/out" "dtrun --nnodes 2 --node-rank \$NODE_RANK --master-addr \$MASTER_ADDR --master-port 6000 $BIG"
has "$T/out" "note: the plan recomputes 6 of 12 layers"
for s in '"train_batch_size": 256,' '"train_micro_batch_size_per_gpu": 4,' '"gradient_accumulation_steps": 8,' \
         '"gradient_clipping": 1,' '"stage": 3,' '"offload_optimizer": {' '"offload_param": {' '"device": "cpu",' \
         '"pin_memory": true' '"reduce_bucket_size": 500000000,' '"allgather_bucket_size": 500000000,' \
         '"stage3_prefetch_bucket_size": 50000000,' '"stage3_max_live_parameters": 1000000000' \
         '"overlap_comm": true,' '"contiguous_gradients": true,' '"loss_scale": 0,' '"initial_scale_power": 16,' \
         '"loss_scale_window": 1000,' '"hysteresis": 2,' '"min_loss_scale": 1' '"type": "AdamW",' \
         '"lr": 0.0006,' '"betas": [0.9, 0.999],' '"weight_decay": 0.1' '"type": "WarmupDecayLR",' \
         '"total_num_steps": 5000,' '"warmup_max_lr": 0.0006,' '"warmup_num_steps": 700,' '"warmup_type": "log"'; do
    has "$T/ds.json" "$s"
done
# bf16 off, fp16 on
tr -d ' \n' <"$T/ds.json" | grep -qF '"bf16":{"enabled":false},"fp16":{"enabled":true,' || bad "bf16/fp16 sections"
for s in '#SBATCH --nodes=2' '#SBATCH --ntasks-per-node=1' '#SBATCH --gres=gpu:4' 'export GPUS_PER_NODE=4' \
         'export MASTER_PORT=6000' 'scontrol show hostnames' \
         "--nnodes \$SLURM_NNODES --nproc_per_node \$GPUS_PER_NODE --node_rank \$SLURM_NODEID --master_addr \$MASTER_ADDR --master_port \$MASTER_PORT train.py --deepspeed $T/ds.json"; do
    has "$T/launch.slurm" "$s"
done
bash -n "$T/launch.slurm" || bad "sbatch script is not valid bash"

# NVMe offload: nvme_path in both offload sections
sed -e 's/"zero_stage": 3/"zero_stage": 3/' -e 's/"offload_optimizer": "cpu"/"offload_optimizer": "nvme"/' \
    -e 's/"offload_param": "cpu"/"offload_param": "nvme"/' -e 's|"nvme_path": ""|"nvme_path": "/local_nvme"|' \
    "$BIG" >"$T/nvme.json"
"$DTPLAN" export --deepspeed "$T/nvme.json" -o "$T/nvme_ds.json" >/dev/null || bad "export nvme"
[ "$(grep -c '"nvme_path": "/local_nvme"' "$T/nvme_ds.json")" -eq 2 ] || bad "nvme_path not in both offload sections"

# an existing output is replaced only by a complete config
echo keep >"$T/keep.json"
expect_err "Check batch related parameters" "$DTPLAN" export --deepspeed "$T/triple.json" -o "$T/keep.json"
[ "$(cat "$T/keep.json")" = keep ] || bad "failed export clobbered the output"

expect_err "say what to export: --deepspeed" "$DTPLAN" export "$TINY"
expect_err "no plan given" "$DTPLAN" export --deepspeed
expect_err "cluster.device cpu: torchtitan trains on GPUs" "$DTPLAN" export --torchtitan "$TINY" -o "$T/tiny.toml"
expect_err "the plan is for CPU ranks; Megatron-LM trains on GPUs" "$DTPLAN" export --megatron "$TINY"
expect_err "bad --master-port '70000'" "$DTPLAN" export --deepspeed "$TINY" --master-port 70000
expect_err "-o needs a value" "$DTPLAN" export --deepspeed "$TINY" -o
expect_err "cannot open" "$DTPLAN" export --deepspeed "$T/missing.json"
# an output that cannot be written is an I/O failure: exit 1, one line naming it
"$DTPLAN" export --deepspeed "$TINY" -o "$T/no/such/dir/ds.json" >/dev/null 2>"$T/err"
[ $? -eq 1 ] || bad "unwritable -o: want exit 1"
grep -qF "dtplan: cannot create '$T/no/such/dir/ds.json" "$T/err" || bad "unwritable -o message: $(cat "$T/err")"

[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
