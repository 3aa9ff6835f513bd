#!/bin/bash
# ZeRO-3 checkpoints read and written slice by slice (docs/dtrun.md "Bounded
# checkpoint I/O", docs/zero.md "Flat buffers"), gpt2-tiny on 2 ranks:
#   - resume: 6 steps straight == 3 steps, stop, --resume, 3 steps — the final
#     model.safetensors, both optimizer shards and every logged loss / norm byte
#     for byte — for offload none, cpu (optimizer + parameters) and nvme, fp32
#     and mixed-bf16 (fp32 master); the interrupted run with
#     DT_TEST_IO_CHUNK_BYTES=4096, so every save and load goes through many
#     chunks, the straight one with the default 64 MiB: the files do not depend
#     on the chunk size;
#   - stage 0 (one writer, the flat buffers) saved in chunks: byte-identical too;
#   - output.init: a model.safetensors file and a checkpoint directory (a Hugging
#     Face directory) read by each ZeRO-3 rank slice by slice train exactly as
#     ZeRO-2 reading the whole file does.
# Usage: test_zero3_ckpt.sh DTPLAN DTRUN SRCDIR
set -u
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3 mpirun
dt_need_fortunes
export OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/dt_test_z3ckpt_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
FAIL=0
SMALL_CHUNK=4096   # bytes: 1024 fp32 elements, a small fraction of any unit of gpt2-tiny

# plan STAGE OFFLOAD PRESET OUT [INIT]: tiny-cpu on 2 ranks, 6 steps, no validation
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$@" "$TMP/nvme" <<'PY'
import json, sys
args = sys.argv[1:]
src, stage, off, preset, out = args[:5]
init = args[5] if len(args) > 6 else ""
nvme = args[-1]
p = json.load(open(src))
p["parallel"].update(zero_stage=int(stage), world_size=2, offload_optimizer=off,
                     offload_param=off if int(stage) == 3 else "none", nvme_path=nvme if off == "nvme" else "")
p["cluster"]["gpus_per_node"] = 2
p["batch"].update(micro_batch=4, grad_accum=2, global_batch=16)
p["schedule"].update(total_steps=6, warmup_steps=2)
p["data"]["eval_interval"] = 0
p["output"].update(save_interval=0, keep_last=1, init=init)
if preset == "mixed-bf16":   # as tests/dist/test_bf16.sh writes it
    p["precision"].update(preset="mixed-bf16", param="bf16", grad="bf16", has_master=True, master="fp32",
                          moment="fp32", activation="bf16", bytes_per_param={"param": 2, "grad": 2, "optimizer": 12})
    p.pop("prediction", None)
json.dump(p, open(out, "w"), indent=2)
PY
}
mkdir -p "$TMP/nvme"

run() {  # PLAN OUT [args]
    local pl=$1 out=$2
    shift 2
    mpirun -n 2 --oversubscribe "$DTRUN" "$pl" --out "$out" --quiet "$@" >"$out.log" 2>&1
}

# same_files A B LABEL: model, optimizer shards and the losses / norms of two runs
same_run() {
    local a=$1 b=$2 label=$3 f bad=""
    for f in model.safetensors optim-00000-of-00002.safetensors optim-00001-of-00002.safetensors; do
        [ -s "$a/ckpt-00000006/$f" ] && cmp -s "$a/ckpt-00000006/$f" "$b/ckpt-00000006/$f" || bad="$bad $f"
    done
    cmp -s <(cut -d, -f1-2,6 "$a/metrics.jsonl") <(cut -d, -f1-2,6 "$b/metrics.jsonl") || bad="$bad losses"
    if [ -z "$bad" ]; then echo "ok   $label"; else echo "FAIL $label: differs:$bad"; FAIL=1; fi
}

for cfg in "none fp32" "cpu fp32" "nvme fp32" "none mixed-bf16" "nvme mixed-bf16"; do
    set -- $cfg
    off=$1 preset=$2
    label="ZeRO-3, offload $off, $preset"
    pl=$TMP/p-$off-$preset.json
    plan 3 "$off" "$preset" "$pl" || { echo "FAIL: cannot write the plan"; exit 1; }
    a=$TMP/straight-$off-$preset b=$TMP/split-$off-$preset
    run "$pl" "$a" || { echo "FAIL $label: straight run: $(tail -2 "$a.log")"; FAIL=1; continue; }
    DT_TEST_IO_CHUNK_BYTES=$SMALL_CHUNK run "$pl" "$b" --max-steps 3 ||
        { echo "FAIL $label: first half: $(tail -2 "$b.log")"; FAIL=1; continue; }
    DT_TEST_IO_CHUNK_BYTES=$SMALL_CHUNK run "$pl" "$b" --resume ||
        { echo "FAIL $label: resumed half: $(tail -2 "$b.log")"; FAIL=1; continue; }
    same_run "$a" "$b" "$label: 6 steps == 3 + resume + 3 (chunked I/O), bitwise"
done

# stage 0: rank 0 writes the whole state from the flat buffers, in chunks
pl=$TMP/p0.json
plan 0 none fp32 "$pl"
if run "$pl" "$TMP/s0a" && DT_TEST_IO_CHUNK_BYTES=$SMALL_CHUNK run "$pl" "$TMP/s0b"; then
    for f in model.safetensors optim-00000-of-00001.safetensors; do
        if cmp -s "$TMP/s0a/ckpt-00000006/$f" "$TMP/s0b/ckpt-00000006/$f"; then echo "ok   ZeRO-0: $f written in chunks byte-identical"
        else echo "FAIL ZeRO-0: $f written in chunks differs"; FAIL=1; fi
    done
else
    echo "FAIL ZeRO-0 runs: $(tail -2 "$TMP/s0b.log")"; FAIL=1
fi

# output.init, read slice by slice at stage 3, whole at stage 2: the same training
W=$TMP/straight-none-fp32/ckpt-00000006
for init in "$W/model.safetensors" "$W"; do
    kind=file; [ -d "$init" ] && kind="Hugging Face directory"
    plan 3 none fp32 "$TMP/i3.json" "$init"
    plan 2 none fp32 "$TMP/i2.json" "$init"
    rm -rf "$TMP/i3" "$TMP/i2"
    if run "$TMP/i3.json" "$TMP/i3" --max-steps 2 && run "$TMP/i2.json" "$TMP/i2" --max-steps 2; then
        if cmp -s "$TMP/i3/ckpt-00000002/model.safetensors" "$TMP/i2/ckpt-00000002/model.safetensors" &&
           cmp -s <(cut -d, -f1-2,6 "$TMP/i3/metrics.jsonl") <(cut -d, -f1-2,6 "$TMP/i2/metrics.jsonl"); then
            echo "ok   output.init ($kind): ZeRO-3 slices train as ZeRO-2's whole load, bitwise"
        else echo "FAIL output.init ($kind): ZeRO-3 differs from ZeRO-2"; FAIL=1; fi
    else
        echo "FAIL output.init ($kind) runs: $(tail -2 "$TMP/i3.log") $(tail -2 "$TMP/i2.log")"; FAIL=1
    fi
done
exit $FAIL
