#!/usr/bin/env python3
"""gen_train_golden.py — the training-loop golden: 20 optimizer steps of dtrun's own loop
(data windows, gradient accumulation, global-norm clipping, the plan's LR schedule, AdamW with
dtrun's weight-decay rule, checkpointed layers) replayed in Hugging Face transformers + torch.

Dev-time only: CI has no Python and reads the committed files under
tests/kernels/golden/train/; tests/engine/test_train_golden.sh runs dtrun on the committed
plans and compares. To regenerate (CPU, some seconds):

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers safetensors
    cmake -S . -B build && make -C build dtplan
    /tmp/hfvenv/bin/python scripts/gen_train_golden.py [--dtplan build/dtplan] [--out DIR]

(default OUT tests/kernels/golden/train; run from anywhere, paths written into the plans are
relative to the repository root). The committed files were made with torch 2.15.0 and
transformers 5.24.0 (in every golden's metadata). `--norms` only prints each case's per-step
gradient norms without clipping (how the clip values below were chosen) and writes nothing.

Cases (both float32, attn_implementation="eager", dropout 0, vocab 256 = dtrun's byte tokens):
  gpt2  : GPT2LMHeadModel, n_embd 64, 3 layers, 4 heads, n_positions 256, gelu_new (dtrun's
          tanh GELU), layer_norm_epsilon 1e-5, tied lm_head.
  qwen3 : Qwen3ForCausalLM, tests/kernels/golden/llama/qwen3/config.json's model (hidden 64,
          4 heads / 2 kv heads, head_dim 32, q_norm/k_norm, ffn 96, untied, RoPE theta 1e6)
          with vocab_size 256 (byte tokens), max_position_embeddings 256 (T = 160 must fit:
          dtrun refuses seq_len > max_pos) and 3 layers.
Initial weights (torch.manual_seed(SEED + the case's seed_index), torch.randn in named_parameters()
order): tensors with ndim >= 2 ~ N(0, 0.125^2) (1/sqrt(hidden): attention far from uniform),
norm weights 1 + 0.1 N(0,1), biases 0.1 N(0,1). Written as OUT/gpt2/init.safetensors (the
model's named_parameters(): "transformer.*", GPT-2 Conv1D weights [in, out], no lm_head: it is
tied) and, for qwen3, model.save_pretrained(OUT/qwen3) (config.json, generation_config.json,
model.safetensors: a Hugging Face model directory, which output.init accepts). Both are the
plans' output.init, so dtrun and this script start from the same bits.

Data: OUT/apache-2.0.txt, a copy of Debian's /usr/share/common-licenses/Apache-2.0
(11358 bytes of ASCII), read by dtrun as data.format "text" with the byte tokenizer
(token = byte value).

Plans OUT/<case>.plan.json: `dtplan solve --model OUT/<case>/config.json --mem 4G --hardware cpu
--precision fp32 --stages 0 --global-batch 4 --seq 160 --steps 20 ...` (the exact command is in
each golden's metadata, "plan.solve"), then edited here: micro_batch 2, grad_accum 2 (global
batch 4, world size 1, ZeRO stage 0), activations.ckpt_layers 2 of 3, the optimizer and
schedule below, data.train/output.init/output.dir as repository-relative paths, eval off
(eval_interval 0), prediction {"valid": false} (the solver predicted its own micro-batch
choice, which the edit replaced). T = 160 = 64 + 64 + 32: the CPU flash attention's key tile
is 64 (docs/engine.md), so every row past 64 crosses tiles, the last tile partial.
  gpt2  : lr 3e-3, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1, grad_clip 1.4,
          WarmupDecayLR, warmup 5 linear from warmup_min_lr 3e-4, total_steps 20, seed 1337.
  qwen3 : lr 2e-3, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1, grad_clip 2.0,
          WarmupCosineLR, warmup 5 log from ratio 0.1, cos_min_ratio 0.1, 20 steps, seed 4242.
The clip values are below the gradient norm in some steps and above it in others (checked
here: at least 3 steps of each kind, else the script fails).

What dtrun does per optimizer step and how it is reproduced here (sources read):
 * Windows (engine/data/data.c, dt_corpus_windows / dt_split_windows / make_perm /
   dt_loader_next_masked / read_window; engine/run/train.c setup_data): the text is one token
   stream of n bytes; it holds W = (n - 1) // T windows (n > T), window w = tokens
   [w T, w T + T] (inputs w T .. w T + T - 1, targets shifted by one). Without data.valid the
   last v = clamp(int(valid_fraction * W + 0.5), 1, W - 1) windows are validation, the first
   W - v training. The training loader's permutation of epoch e: perm = 0..count-1; state =
   seed; key = splitmix64(state) ^ e (splitmix64 advances state by 0x9e3779b97f4a7c15 first);
   state = key; for i = count-1 down to 1: j = splitmix64(state) % (i + 1), swap perm[i],
   perm[j]. Each micro-batch: if cursor + B > count, epoch += 1, cursor = 0, new permutation;
   the micro-batch is windows perm[cursor .. cursor + B - 1]; cursor += B. With 66 training
   windows and B = 2 the epoch ends after 33 micro-batches, i.e. inside step 17 (between its
   micro-batches), so the reshuffle is exercised. The windows used are stored ("windows").
 * Loss (engine/model/lm.c dt_lm_forward, train.c train_step): each micro-batch's loss is the
   mean cross-entropy over its B*T tokens, returned as float32; the step's logged loss
   (metrics.jsonl "loss") is the double mean of the grad_accum float32 losses. Here:
   F.cross_entropy (float32) per micro-batch, the mean of the float32 values in float64.
 * Gradients: dtrun backpropagates each micro-batch with grad_scale 1/grad_accum (d loss /
   d logits = grad_scale / N per token) and accumulates into one buffer. Here:
   (loss / grad_accum).backward() accumulating into .grad.
 * Norm and clip (engine/model/optim.c dt_grad_sumsq / dt_clip_divisor, DeepSpeed
   unscale_and_clip_grads; train.c): norm = sqrt(sum of all gradients squared, in double);
   with grad_clip > 0, div = max(1, (norm + 1e-6) / grad_clip), and AdamW reads g * (float)(1 /
   div). metrics.jsonl "grad_norm" = norm (before clipping). Here: the float64 sum of squares of
   every parameter's .grad (the tied GPT-2 embedding once, holding both uses), the same div,
   .grad *= float32(1 / div).
 * LR (optim.c dt_schedule_lr, DeepSpeed lr_schedules.py): step s (1-based) uses t = s - 1
   (the successful steps before it), and DeepSpeed's engine gives it the scheduler's value at
   last_batch_iteration i = t - 1 (engine.py _take_model_step steps the scheduler after the
   optimizer; i = -1 is __init__'s value: warmup_min_lr, or 0 for WarmupCosineLR);
   W = max(warmup_steps, 2); warmup gamma = i / W (linear) or ln(i + 1) / ln(W) (log) for
   i < W, else 1; WarmupDecayLR: min + (lr - min) * gamma, after warmup gamma = max(0, (T - i)
   / max(1, T - W)); WarmupCosineLR: lr * r, warmup r = wmin + (1 - wmin) gamma, then r =
   max(0, cmin + (1 - cmin)(1 + cos(pi min(1, (i - W + 1) / max(1, T - W)))) / 2).
   Reimplemented in schedule_lr below; every step of it is DeepSpeed's (scripts/
   gen_lr_schedule_goldens.py, tests/engine/test_lr_golden.c).
 * AdamW (optim.c dt_adamw_apply, engine/dist/zero.c dt_zero_optimizer_step): torch.optim.AdamW
   semantics, p = p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps), bias correction at step s;
   weight decay only on tensors with ndim >= 2 (zero.c: decay = tt->ndim >= 2). Here:
   torch.optim.AdamW(foreach=False), two parameter groups (ndim >= 2 with the plan's
   weight_decay, the rest 0), each group's lr set to the schedule's value before step().
 * Activation checkpointing recomputes the first ckpt_layers blocks bitwise (docs/engine.md),
   so the reference runs the plain model.

Files written under OUT:
  apache-2.0.txt, gpt2/config.json, gpt2/init.safetensors, qwen3/{config.json,
  generation_config.json, model.safetensors}, <case>.plan.json (as above),
  <case>.golden.safetensors (this script's byte-reproducible writer, gen_llama_goldens.save_file):
      "step_losses"      F32 [20]   metrics.jsonl "loss" of steps 1..20
      "step_grad_norms"  F32 [20]   metrics.jsonl "grad_norm" (unclipped global norm)
      "step_lrs"         F32 [20]   metrics.jsonl "lr"
      "step_clip"        F32 [20]   the factor the gradients were multiplied by (1: no clip)
      "windows"          I32 [20, grad_accum, micro_batch]  training-window indices used
      "<hf name>"        F32        every parameter after step 20, with the names of dtrun's
                                    checkpoint model.safetensors (= the HF model's
                                    named_parameters(); GPT-2 "transformer.*", no lm_head)
      "illcond.<hf name>" I32 [k]   flat indices of the tensor's AdamW-ill-conditioned elements
                                    (below); only tensors that have some
      __metadata__: case, plan, solve command, every hyper-parameter, the algorithms above in
      short, versions, the ill-conditioned rule and counts (illcond.*), and check.* figures:
      the same 20 steps run in float64 (model.double() for GPT-2, gen_llama_goldens.ref_forward
      for Qwen3; float64 AdamW) against this float32 run: how much float32 rounding alone moves
      the losses and final parameters. The script fails unless they are within the test's
      tolerances (losses 1e-5 relative, parameters 1e-3 lr outside the ill-conditioned set).

AdamW-ill-conditioned elements. AdamW moves each element by lr m_hat / (sqrt(v_hat) + eps): a
step normalised by the element's own gradient history. Where sqrt(v_hat) is near eps the step
is a steep function of the gradient: at step 1 it is lr g / (|g| + eps), whose derivative
eps / (|g| + eps)^2 is up to 1 / (4 eps) = 2.5e7 per unit of g at eps = 1e-8. Float32 gradients
carry rounding noise of ~1e-8 of their tensor's largest entry, here 1e-10..1e-9 absolute (at
worst 1.1e-6 of the maximum: Qwen3's step-1 gradients, dtrun vs float64; torch 8.4e-7), so an
element whose gradient is within ~1e-8 of zero in some step takes a step that two correct
float32 implementations disagree on by up to a few % of lr; AdamW carries the difference on.
Two kinds occur: (1) elements whose gradient is mathematically zero and only rounding noise in
float32 — GPT-2's key biases (c_attn.bias[C:2C]): adding a constant to every key adds q.b to a
whole score row, which softmax ignores, so d loss / d b_k = 0 exactly (float64: |g| ~ 1e-19;
float32: ~1e-10, which AdamW turns into steps of ~1 % of lr with a random sign: 0.1-0.3 lr after
20 steps in either float32 implementation; these elements cannot affect the loss at all);
(2) elements whose gradient happens to come close to zero at some step, mostly step 1 (with
sqrt(v_hat) below 1e-7: about 1 in 10,000 elements here). The rule: an element is
ill-conditioned when its float64 run's bias-corrected sqrt(v_hat) was below 100 eps at some
step (with v > 0). Measured (dtrun vs this golden; elements bucketed by that minimum): below
1e-7 up to 5.9e-3 lr (Qwen3), 2.0e-3 lr (GPT-2) and 0.29 lr (GPT-2 key biases); in [1e-7, 1e-6)
at most 2.1e-4 lr; every other bucket at most 2.3e-4 lr.
The test holds the ill-conditioned elements (454 of 182,848 in gpt2, 187 of 162,432 in qwen3) to
the sum of the run's step LRs (about 11 lr: how far AdamW's normalised steps can move an element
in 20 steps) and every other element to 1e-3 lr. torch float32 vs float64 shows the same picture
(check.* metadata), so the disagreement is float32 rounding amplified by AdamW, not either
implementation being wrong.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Qwen3Config, Qwen3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
# the byte-reproducible safetensors writer and the independent float64 llama-family forward
from gen_llama_goldens import ref_forward, save_file  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "tests", "kernels", "golden", "train")
DATA_SRC = "/usr/share/common-licenses/Apache-2.0"
DATA_NAME = "apache-2.0.txt"
SEED = 20260401
STEPS, T, MICRO, ACCUM, CKPT = 20, 160, 2, 2, 2
MATRIX_STD, NORM_STD, BIAS_STD = 0.125, 0.1, 0.1
MASK64 = (1 << 64) - 1
# the tolerances of tests/engine/test_train_golden.sh, checked here for this float32 reference
# against its own float64 run (so the golden is itself that close to the exact result)
LOSS_REL_TOL, PARAM_TOL_LR = 1e-5, 1e-3
# AdamW normalises each element's step by sqrt(v_hat) + eps: where sqrt(v_hat) is within this
# factor of eps the step is a steep function of float32 gradient rounding (see the docstring)
ILLCOND_EPS_FACTOR = 100

GPT2_CFG = dict(vocab_size=256, n_positions=256, n_embd=64, n_layer=3, n_head=4, n_inner=None,
                activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                layer_norm_epsilon=1e-5, initializer_range=0.02, bos_token_id=255,
                eos_token_id=255, tie_word_embeddings=True)

CASES = {
    "gpt2": dict(
        model="gpt2", seed_index=0, data_seed=1337,
        optimizer=dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.4),
        schedule=dict(kind="WarmupDecayLR", total_steps=STEPS, warmup_steps=5,
                      warmup_type="linear", warmup_min_lr=3e-4),
        solve=["--schedule", "WarmupDecayLR", "--warmup", "5", "--lr", "3e-3"]),
    "qwen3": dict(
        model="qwen3", seed_index=1, data_seed=4242,
        optimizer=dict(lr=2e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=2.0),
        schedule=dict(kind="WarmupCosineLR", total_steps=STEPS, warmup_steps=5,
                      warmup_type="log", warmup_min_lr=0.1, cos_min_ratio=0.1),
        solve=["--schedule", "WarmupCosineLR", "--warmup", "5", "--lr", "2e-3"]),
}


def rel_to_root(path):
    return os.path.relpath(os.path.abspath(path), ROOT)


# ---------------------------------------------------------------------------- models

def build_model(case):
    if case == "gpt2":
        cfg = GPT2Config(**GPT2_CFG)
        cls = GPT2LMHeadModel
    else:
        src = json.load(open(os.path.join(ROOT, "tests/kernels/golden/llama/qwen3/config.json")))
        for k in ("architectures", "transformers_version", "dtype", "model_type"):
            src.pop(k, None)
        src.update(vocab_size=256, max_position_embeddings=256, num_hidden_layers=3,
                   layer_types=["full_attention"] * 3)
        cfg = Qwen3Config(**src)
        cls = Qwen3ForCausalLM
    cfg._attn_implementation = "eager"
    model = cls(cfg).to(torch.float32)
    model.config._attn_implementation = "eager"
    model.eval()  # every dropout is 0 anyway
    return model


def init_params(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape) * MATRIX_STD)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape) * BIAS_STD)
            else:  # LayerNorm / RMSNorm weights
                p.copy_(1.0 + torch.randn(p.shape) * NORM_STD)


def write_model(case, model, out):
    """The initial weights as output.init reads them; returns the plan's output.init path."""
    d = os.path.join(out, case)
    if os.path.isdir(d):
        shutil.rmtree(d)
    if case == "gpt2":
        os.makedirs(d)
        model.config.to_json_file(os.path.join(d, "config.json"))
        tensors = {n: p.detach().clone().contiguous() for n, p in model.named_parameters()}
        assert "lm_head.weight" not in tensors  # tied: named_parameters lists it once, as wte
        path = os.path.join(d, "init.safetensors")
        save_file(tensors, path, {"format": "pt"})
        return path
    model.save_pretrained(d)
    return d


# ---------------------------------------------------------------------------- plan

def make_plan(case, spec, out, dtplan, init_path, data_path):
    cfg = os.path.join(out, case, "config.json")
    tmp = os.path.join(out, ".%s.solve.json" % case)
    cmd = [dtplan, "solve", "--model", cfg, "--mem", "4G", "--hardware", "cpu", "--precision",
           "fp32", "--stages", "0", "--global-batch", str(MICRO * ACCUM), "--seq", str(T),
           "--steps", str(STEPS)] + spec["solve"] + ["-o", tmp]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    plan = json.load(open(tmp))
    os.remove(tmp)
    assert plan["model"]["family"] == ("gpt2" if case == "gpt2" else "llama"), plan["model"]
    plan["parallel"].update(world_size=1, zero_stage=0)
    plan["batch"].update(micro_batch=MICRO, grad_accum=ACCUM, global_batch=MICRO * ACCUM, seq_len=T)
    plan["activations"].update(ckpt_layers=CKPT, attention="flash")
    plan["optimizer"].update(spec["optimizer"])
    plan["schedule"].update(spec["schedule"])
    plan["data"].update(train=rel_to_root(data_path), valid="", format="text", tokenizer="byte",
                        valid_fraction=0.05, eval_interval=0, seed=spec["data_seed"])
    plan["output"].update(dir="out/train-golden-%s" % case, save_interval=0, keep_last=1,
                          init=rel_to_root(init_path))
    plan["prediction"] = {"valid": False}
    path = os.path.join(out, "%s.plan.json" % case)
    with open(path, "w") as f:
        json.dump(plan, f, indent=2)
        f.write("\n")
    # the command as a repository-relative line for the metadata
    shown = ["dtplan"] + [rel_to_root(a) if a in (cfg, tmp) else a for a in cmd[1:]]
    return plan, path, " ".join(shown)


# ---------------------------------------------------------------------------- dtrun's loader

def splitmix64(state):
    """dt_rng_next: returns (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def permutation(count, seed, epoch):
    perm = list(range(count))
    _, key = splitmix64(seed & MASK64)
    st = (key ^ epoch) & MASK64
    for i in range(count - 1, 0, -1):
        st, r = splitmix64(st)
        j = r % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Loader:
    """The training loader of engine/data/data.c for one rank of world 1, text corpus."""

    def __init__(self, tokens, plan):
        self.tok = tokens
        self.T = plan["batch"]["seq_len"]
        self.B = plan["batch"]["micro_batch"]
        n = len(tokens)
        W = (n - 1) // self.T if n > self.T else 0
        vf = plan["data"]["valid_fraction"]
        v = 0
        if vf > 0 and W > 1:
            v = min(max(int(vf * W + 0.5), 1), W - 1)
        self.windows_total, self.valid = W, v
        self.count = W - v
        self.seed = plan["data"]["seed"]
        assert self.count >= self.B
        self.epoch, self.cursor = 0, 0
        self.perm = permutation(self.count, self.seed, 0)

    def next(self):
        if self.cursor + self.B > self.count:
            self.epoch += 1
            self.cursor = 0
            self.perm = permutation(self.count, self.seed, self.epoch)
        ws = [self.perm[self.cursor + b] for b in range(self.B)]
        self.cursor += self.B
        inp = torch.tensor([self.tok[w * self.T: w * self.T + self.T] for w in ws], dtype=torch.long)
        tgt = torch.tensor([self.tok[w * self.T + 1: w * self.T + self.T + 1] for w in ws],
                           dtype=torch.long)
        return ws, inp, tgt


# ---------------------------------------------------------------------------- schedule

def schedule_lr(s, lr, t):
    """dt_schedule_lr (engine/model/optim.c) for t successful steps so far: DeepSpeed's
    scheduler at last_batch_iteration i = t - 1 (its engine steps the scheduler after each
    applied optimizer step; i = -1 is what __init__ sets). Checked against DeepSpeed's own
    classes by tests/engine/golden/lr_schedules.txt (scripts/gen_lr_schedule_goldens.py)."""
    i = t - 1
    W = max(s["warmup_steps"], 2)
    Tt = s["total_steps"]

    def gamma():
        if s["warmup_type"] == "linear":
            return i / W
        return 1.0 / math.log(W) * math.log(i + 1)

    kind = s["kind"]
    if kind == "constant":
        return lr
    if kind in ("WarmupLR", "WarmupDecayLR"):
        if i < 0:
            return s["warmup_min_lr"]
        if i < W:
            g = gamma()
        elif kind == "WarmupLR":
            g = 1.0
        else:
            g = max(0.0, (Tt - i) / max(1.0, float(Tt - W)))
        return s["warmup_min_lr"] + (lr - s["warmup_min_lr"]) * g
    if kind == "WarmupCosineLR":
        if i < 0:
            return 0.0
        if i < W:
            r = s["warmup_min_lr"] + (1.0 - s["warmup_min_lr"]) * gamma()
        else:
            progress = min(1.0, (i - W + 1) / max(1, Tt - W))
            c = (1.0 + math.cos(math.pi * progress)) / 2.0
            r = max(0.0, s["cos_min_ratio"] + (1.0 - s["cos_min_ratio"]) * c)
        return lr * r
    raise ValueError(kind)


# ---------------------------------------------------------------------------- training

def train(named, forward, plan, tokens, dtype, clip_on=True):
    """STEPS optimizer steps as dtrun takes them, on the parameters named (name, tensor) that
    forward(inputs) -> logits uses. Returns per-step records, final params and the loader."""
    o, s = plan["optimizer"], plan["schedule"]
    opt = torch.optim.AdamW(
        [{"params": [p for _, p in named if p.ndim >= 2], "weight_decay": o["weight_decay"]},
         {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0}],
        lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], foreach=False)
    loader = Loader(tokens, plan)
    accum = plan["batch"]["grad_accum"]
    rec = dict(loss=[], norm=[], lr=[], clip=[], windows=[])
    # per element: the smallest bias-corrected sqrt(v_hat) over the steps where v > 0 (inf: never)
    min_sv = {n: torch.full_like(p, math.inf, dtype=torch.float64) for n, p in named}
    for step in range(1, s["total_steps"] + 1):
        opt.zero_grad(set_to_none=True)
        losses, wins = [], []
        for _ in range(accum):
            ws, inp, tgt = loader.next()
            logits = forward(inp)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
            (loss / accum).backward()
            losses.append(float(loss.detach()))
            wins.append(ws)
        sumsq = sum(float(p.grad.double().pow(2).sum()) for _, p in named)
        norm = math.sqrt(sumsq)
        div = max(1.0, (norm + 1e-6) / o["grad_clip"]) if (clip_on and o["grad_clip"] > 0) else 1.0
        mul = torch.tensor(1.0 / div, dtype=dtype)
        with torch.no_grad():
            for _, p in named:
                p.grad.mul_(mul)
        lr = schedule_lr(s, o["lr"], step - 1)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        with torch.no_grad():
            for n, p in named:
                sv = (opt.state[p]["exp_avg_sq"].double() / (1 - o["beta2"] ** step)).sqrt()
                min_sv[n] = torch.where(sv > 0, torch.minimum(min_sv[n], sv), min_sv[n])
        rec["loss"].append(sum(losses) / accum)
        rec["norm"].append(norm)
        rec["lr"].append(lr)
        rec["clip"].append(float(mul))
        rec["windows"].append(wins)
    params = {n: p.detach().clone() for n, p in named}
    rec["min_sqrt_vhat"] = min_sv
    return rec, params, loader


def run_case(index, case, spec, out, dtplan, data_path, tokens, norms_only):
    torch.manual_seed(SEED + spec["seed_index"])
    model = build_model(case)
    init_params(model)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}

    def run(dtype, clip_on=True, plan=None):
        """The 20 steps from the initial weights: float32 through the transformers model;
        float64 through model.double() for GPT-2 (all float64 inside) and through
        gen_llama_goldens.ref_forward for Qwen3 (transformers' Qwen3 in .double() computes its
        RMSNorm and softmax in float32)."""
        m = build_model(case)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.copy_(initial[n])
        if dtype == torch.float32:
            named = list(m.named_parameters())
            return train(named, lambda inp: m(input_ids=inp).logits, plan, tokens, dtype, clip_on)
        if case == "gpt2":
            m = m.double()
            named = list(m.named_parameters())
            return train(named, lambda inp: m(input_ids=inp).logits, plan, tokens, dtype, clip_on)
        W = {n: p.detach().double().clone().requires_grad_(True) for n, p in initial.items()}
        return train(list(W.items()), lambda inp: ref_forward(m.config, W, inp), plan, tokens,
                     dtype, clip_on)

    if norms_only:
        plan = {"batch": dict(micro_batch=MICRO, grad_accum=ACCUM, seq_len=T),
                "data": dict(valid_fraction=0.05, seed=spec["data_seed"]),
                "optimizer": spec["optimizer"],
                "schedule": dict(spec["schedule"], cos_min_ratio=spec["schedule"].get("cos_min_ratio", 0))}
        for clip_on in (False, True):
            rec = run(torch.float32, clip_on, plan)[0]
            print("%-6s %s norms: %s" % (case, "clipped at %g," % spec["optimizer"]["grad_clip"]
                                         if clip_on else "unclipped", " ".join("%.3f" % x for x in rec["norm"])))
        return

    init_path = write_model(case, model, out)
    plan, plan_path, solve_cmd = make_plan(case, spec, out, dtplan, init_path, data_path)

    rec, params, loader = run(torch.float32, plan=plan)
    rec64, params64, _ = run(torch.float64, plan=plan)

    clipped = sum(1 for c in rec["clip"] if c < 1.0)
    if not (3 <= clipped <= STEPS - 3):
        sys.exit("%s: grad_clip %g clips %d of %d steps; choose a value that clips some, not all"
                 % (case, plan["optimizer"]["grad_clip"], clipped, STEPS))
    lr = plan["optimizer"]["lr"]
    # AdamW-ill-conditioned elements (see ILLCOND_EPS_FACTOR): from the float64 run
    tau = ILLCOND_EPS_FACTOR * plan["optimizer"]["eps"]
    illcond = {n: (v < tau).flatten().nonzero().flatten().to(torch.int32)
               for n, v in rec64["min_sqrt_vhat"].items()}
    illcond = {n: i for n, i in illcond.items() if i.numel()}
    n_ill = sum(i.numel() for i in illcond.values())

    def split_err(n):
        """max |f32 - f64| over the strict elements and over the ill-conditioned ones of n"""
        e = (params[n].double() - params64[n]).abs().flatten()
        mask = torch.zeros_like(e, dtype=torch.bool)
        if n in illcond:
            mask[illcond[n].long()] = True
        return (e[~mask].max().item() if (~mask).any() else 0.0,
                e[mask].max().item() if mask.any() else 0.0)

    errs = {n: split_err(n) for n in params}
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(rec["loss"], rec64["loss"]))
    norm_rel = max(abs(a - b) / abs(b) for a, b in zip(rec["norm"], rec64["norm"]))
    worst = max(errs, key=lambda n: errs[n][0])
    par_abs, ill_abs = errs[worst][0], max(e[1] for e in errs.values())
    sum_lr = sum(rec["lr"])

    W = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    tensors = {"step_losses": W(rec["loss"]), "step_grad_norms": W(rec["norm"]),
               "step_lrs": W(rec["lr"]), "step_clip": W(rec["clip"]),
               "windows": torch.tensor(rec["windows"], dtype=torch.int32)}
    for n, p in params.items():
        tensors[n] = p.contiguous()
    for n, i in illcond.items():
        tensors["illcond." + n] = i.contiguous()
    o, s, d = plan["optimizer"], plan["schedule"], plan["data"]
    meta = {
        "case": case, "architecture": type(model).__name__, "generator": "scripts/gen_train_golden.py",
        "plan": rel_to_root(plan_path), "plan.solve": solve_cmd + " (then edited: see the script)",
        "init": rel_to_root(init_path) + "; seed %d; ndim>=2 N(0,%g^2), norm weights 1+%gN(0,1), "
                "biases %gN(0,1)" % (SEED + spec["seed_index"], MATRIX_STD, NORM_STD, BIAS_STD),
        "data": "%s, text, byte tokens; %d tokens, %d windows of T=%d, %d validation, %d training; "
                "seed %d; %d epoch boundaries crossed"
                % (d["train"], len(tokens), loader.windows_total, T, loader.valid, loader.count,
                   d["seed"], loader.epoch),
        "batch": "micro_batch %d, grad_accum %d, world 1, zero_stage 0, seq_len %d, ckpt_layers %d of %d"
                 % (MICRO, ACCUM, T, CKPT, plan["model"]["n_layer"]),
        "steps": str(STEPS),
        "lr": repr(o["lr"]), "beta1": repr(o["beta1"]), "beta2": repr(o["beta2"]), "eps": repr(o["eps"]),
        "weight_decay": repr(o["weight_decay"]), "grad_clip": repr(o["grad_clip"]),
        "schedule": json.dumps(s, sort_keys=True),
        "decay_rule": "weight_decay only on parameters with ndim >= 2 (engine/dist/zero.c)",
        "loss": "per micro-batch: mean cross-entropy over B*T tokens, float32; per step: float64 mean "
                "of the grad_accum float32 losses (metrics.jsonl loss)",
        "clip": "norm = sqrt(float64 sum of squares of every gradient); div = max(1, (norm + 1e-6) / "
                "grad_clip); grads *= float32(1/div)",
        "clipped_steps": ",".join(str(i + 1) for i, c in enumerate(rec["clip"]) if c < 1.0),
        "optimizer": "torch.optim.AdamW(foreach=False), per-step lr set on both parameter groups",
        "attn_implementation": "eager", "dtype": "float32",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "illcond.rule": "elements whose bias-corrected sqrt(v_hat) fell below %g * eps = %g at some "
                        "step (steps with v > 0) in the float64 run; indices (flat, per tensor) in "
                        "illcond.<name>" % (ILLCOND_EPS_FACTOR, tau),
        "illcond.count": "%d of %d" % (n_ill, sum(p.numel() for p in params.values())),
        "illcond.tensors": ", ".join("%s:%d" % (n, i.numel()) for n, i in illcond.items()),
        "illcond.sum_lr": "%.9g" % sum_lr,
        "check.loss_rel_f32_vs_f64": "%.3g" % loss_rel,
        "check.grad_norm_rel_f32_vs_f64": "%.3g" % norm_rel,
        "check.param_maxabs_f32_vs_f64_over_lr": "%.3g" % (par_abs / lr),
        "check.param_worst_tensor": worst,
        "check.illcond_maxabs_f32_vs_f64_over_lr": "%.3g" % (ill_abs / lr),
    }
    gpath = os.path.join(out, "%s.golden.safetensors" % case)
    save_file(tensors, gpath, meta)
    print("%-6s %d params; losses %s .. %s; clipped steps %s" % (
        case, sum(p.numel() for p in params.values()), "%.6f" % rec["loss"][0],
        "%.6f" % rec["loss"][-1], meta["clipped_steps"]))
    print("       norms %s" % " ".join("%.3f" % x for x in rec["norm"]))
    print("       lrs   %s" % " ".join("%.3g" % x for x in rec["lr"]))
    print("       float32 vs float64: loss rel %.2e, grad_norm rel %.2e, params max abs %.2e lr (%s); "
          "%d AdamW-ill-conditioned elements: max abs %.2e lr (sum of step lrs: %.2f lr)"
          % (loss_rel, norm_rel, par_abs / lr, worst, n_ill, ill_abs / lr, sum_lr / lr))
    print("       ill-conditioned: %s" % meta["illcond.tensors"])
    if not (loss_rel <= LOSS_REL_TOL and par_abs <= PARAM_TOL_LR * lr):
        sys.exit("%s: the float32 reference is farther than the test's tolerances (loss %g relative, "
                 "params %g lr) from the float64 run" % (case, LOSS_REL_TOL, PARAM_TOL_LR))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--dtplan", default=os.path.join(ROOT, "build", "dtplan"))
    ap.add_argument("--norms", action="store_true", help="print unclipped gradient norms only")
    ap.add_argument("cases", nargs="*", default=list(CASES))
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))
    data_path = os.path.join(out, DATA_NAME)
    if not a.norms:
        shutil.copyfile(DATA_SRC, data_path)
    tokens = list(open(DATA_SRC, "rb").read())
    assert 0 not in tokens and max(tokens) < 256
    for i, case in enumerate(a.cases):
        run_case(i, case, CASES[case], out, a.dtplan, data_path, tokens, a.norms)


if __name__ == "__main__":
    main()
