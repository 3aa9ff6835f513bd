#!/usr/bin/env python3
"""matrix.py — the configurations bench/validate_runtimes.sh runs, and the table it writes
(issue 34 item 1; dev time only).

  matrix.py configs OUTDIR MODELS QUICK   writes OUTDIR/models/<m>.json (HF config.json,
      random init) and OUTDIR/cfg/<name>.json (DeepSpeed configs), prints one line per run:
      name model runtime stage offload precision buckets ckpt zero_init
  matrix.py table OUTDIR                  reads OUTDIR/rows.jsonl, writes OUTDIR/runtimes.csv:
      one row per (configuration, rank, phase): the phase's peak over the steps (bytes), the
      resident set at its end, its median wall time over the steps after the first, and the
      step's (forward + backward + optimizer) median wall time
"""
import csv
import json
import os
import statistics
import sys

# Model shapes: HF config.json keys, random init. Small enough that 2 ranks of every
# configuration fit a shared 2-core machine; the vocabularies are the real models' (the
# embedding is what ZeRO's largest-layer and bucket terms see).
MODELS = {
    # the calibration model: 2 blocks of 64, vocab 1024, 0.18 M parameters (its states and
    # activations are under 4 MiB: a run's peak is the runtime's own footprint)
    "calib": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 1024,
              "n_positions": 256, "n_embd": 64, "n_layer": 2, "n_head": 2, "bos_token_id": 0, "eos_token_id": 0},
    # GPT-2's vocabulary and positions, 4 blocks of 256: 16.5 M parameters
    "gpt2-s": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 50257,
               "n_positions": 1024, "n_embd": 256, "n_layer": 4, "n_head": 4,
               "bos_token_id": 50256, "eos_token_id": 50256},
    # GPT-2 124M itself (HF "gpt2" config.json)
    "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 50257,
             "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
             "bos_token_id": 50256, "eos_token_id": 50256},
    # Qwen3's block (q/k norms, GQA, SwiGLU, tied embeddings), 4 blocks of 256, vocab 32000
    "qwen3-s": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 32000,
                "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                "tie_word_embeddings": True, "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 0},
    # Llama's block, untied, 4 blocks of 256, vocab 32000
    "llama-s": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32000,
                "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
                "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 1024,
                "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu",
                "bos_token_id": 0, "eos_token_id": 0},
}

MICRO, RANKS = 4, 2
SMALL_BUCKET = 500000   # elements: "small buckets" (DeepSpeed's defaults are 5e8 / 5e7)


def ds_config(stage, offload, precision, buckets, micro=MICRO):
    z = {"stage": stage, "overlap_comm": stage == 3, "contiguous_gradients": True}
    if buckets == "small":
        z.update(reduce_bucket_size=SMALL_BUCKET, allgather_bucket_size=SMALL_BUCKET,
                 stage3_prefetch_bucket_size=SMALL_BUCKET)
    if offload in ("opt", "all"):
        z["offload_optimizer"] = {"device": "cpu"}
    if offload == "all":
        z["offload_param"] = {"device": "cpu"}
    return {"train_batch_size": micro * RANKS, "train_micro_batch_size_per_gpu": micro,
            "gradient_accumulation_steps": 1, "gradient_clipping": 1.0, "zero_optimization": z,
            "bf16": {"enabled": precision == "bf16"},
            "optimizer": {"type": "AdamW", "params": {"lr": 2e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                                                      "weight_decay": 0.01}},
            "wall_clock_breakdown": False}


def runs(quick):
    """(runtime, stage, offload, precision, buckets, ckpt, zero_init) per run."""
    out = []
    for s in (0, 1, 2, 3):
        out.append(("deepspeed", s, "none", "fp32", "default", 0, 0))
    if quick:
        return out + [("ddp", 0, "none", "fp32", "default", 0, 0), ("fsdp", 3, "none", "fp32", "default", 0, 0)]
    out += [("deepspeed", 2, "none", "bf16", "default", 0, 0), ("deepspeed", 3, "none", "bf16", "default", 0, 0),
            ("deepspeed", 2, "none", "fp32", "small", 0, 0), ("deepspeed", 3, "none", "fp32", "small", 0, 0),
            ("deepspeed", 1, "opt", "fp32", "default", 0, 0), ("deepspeed", 2, "opt", "fp32", "default", 0, 0),
            ("deepspeed", 3, "opt", "fp32", "default", 0, 0), ("deepspeed", 3, "all", "fp32", "default", 0, 0),
            ("deepspeed", 3, "none", "fp32", "default", 1, 0), ("deepspeed", 3, "none", "fp32", "default", 0, 1),
            ("deepspeed", 2, "none", "fp32", "default", 1, 0),
            ("ddp", 0, "none", "fp32", "default", 0, 0), ("ddp", 0, "none", "bf16", "default", 0, 0),
            ("ddp", 0, "none", "fp32", "default", 1, 0),
            ("fsdp", 3, "none", "fp32", "default", 0, 0), ("fsdp", 3, "none", "bf16", "default", 0, 0)]
    return out


def configs(outdir, models, quick):
    os.makedirs(os.path.join(outdir, "models"), exist_ok=True)
    os.makedirs(os.path.join(outdir, "cfg"), exist_ok=True)
    with open(os.path.join(outdir, "models", "calib.json"), "w") as f:
        json.dump(MODELS["calib"], f, indent=1)
    for s in range(4):   # the calibration runs: micro-batch 1, DeepSpeed's default buckets, fp32
        with open(os.path.join(outdir, "cfg", f"calib-z{s}.json"), "w") as f:
            json.dump(ds_config(s, "none", "fp32", "default", micro=1), f, indent=1)
    for m in models.split():
        if m not in MODELS:
            sys.exit(f"matrix.py: unknown model '{m}' (one of {', '.join(MODELS)})")
        with open(os.path.join(outdir, "models", m + ".json"), "w") as f:
            json.dump(MODELS[m], f, indent=1)
        for rt, s, off, prec, bk, ck, zi in runs(quick):
            name = f"{m}-{rt}-z{s}-{off}-{prec}-{bk}" + ("-ckpt" if ck else "") + ("-zinit" if zi else "")
            with open(os.path.join(outdir, "cfg", name + ".json"), "w") as f:
                json.dump(ds_config(s, off, prec, bk), f, indent=1)
            print(name, m, rt, s, off, prec, bk, ck, zi)


COLUMNS = ["config", "model", "runtime", "stage", "offload", "precision", "buckets", "ckpt", "zero_init",
           "rank", "phase", "peak_bytes", "rss_end_bytes", "seconds", "step_seconds", "steps", "load1"]


PHASES = ["import", "model", "initialize", "forward", "backward", "step", "save"]


def table(outdir):
    meta = {}
    with open(os.path.join(outdir, "runs.tsv")) as f:
        for line in f:
            w = line.split()
            if len(w) >= 10:
                meta[w[0]] = dict(zip(COLUMNS[1:9], w[1:9]), load1=w[9])
    groups = {}
    with open(os.path.join(outdir, "rows.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            groups.setdefault((r["label"], r["rank"], r["phase"]), []).append(r)
    with open(os.path.join(outdir, "runtimes.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for (label, rank, phase), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], PHASES.index(kv[0][2]))):
            later = [r for r in rows if r["step"] > 0] or rows
            step_s = [r["step_seconds"] for r in later if "step_seconds" in r]
            m = meta.get(label, {})
            w.writerow([label] + [m.get(k, "") for k in COLUMNS[1:9]] +
                       [rank, phase, max(r["peak"] for r in rows), rows[-1]["rss"],
                        round(statistics.median(r["seconds"] for r in later), 6),
                        round(statistics.median(step_s), 6) if step_s else "", len(rows), m.get("load1", "")])


if __name__ == "__main__":
    if sys.argv[1] == "configs":
        configs(sys.argv[2], sys.argv[3], sys.argv[4] == "1")
    else:
        table(sys.argv[2])
