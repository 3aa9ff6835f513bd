#!/usr/bin/env python3
"""gen_llama_goldens.py — writes the golden files the engine's llama-family tests (Llama,
Qwen2, Qwen3 decoders) compare against, computed by Hugging Face transformers itself.

Dev-time only: CI has no Python and reads the committed files under
tests/kernels/golden/llama/. To regenerate (CPU is enough, takes seconds):

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers safetensors
    /tmp/hfvenv/bin/python scripts/gen_llama_goldens.py [OUT]   (default tests/kernels/golden/llama)

The committed files were made with torch 2.15.0 and transformers 5.24.0 (the exact versions
are in every output's metadata). Other versions may differ in the last bits, and transformers
4.x spells the RoPE settings differently in config.json (rope_theta / rope_scaling at the top
level rather than 5.x's "rope_parameters" object).

Cases: three tiny random decoders, float32, attn_implementation="eager", dropout 0.
  llama : LlamaForCausalLM   hidden 64, 2 layers, 4 heads, 2 kv heads (GQA), head_dim 16,
          intermediate 96, vocab 128, max_position_embeddings 64, untied lm_head,
          rms_norm_eps 1e-5, RoPE theta 1e4 with llama3 scaling {factor 8, low_freq_factor 1,
          high_freq_factor 4, original_max_position_embeddings 16}, no biases. With these
          values the RoPE wavelengths 2*pi*1e4^(2i/16) are 6.3, 19.9, 62.8, ...: dimension pair
          0 falls in the smoothed band (4 <= wavelength <= 16; inv_freq 1 -> 0.576), pairs 1..7
          are divided by 8, and no pair is in the unscaled band (wavelength < 4).
  qwen2 : Qwen2ForCausalLM   same sizes (head_dim 16), tied embeddings (no lm_head tensor),
          rope theta 1e6 (default rope), q/k/v biases (Qwen2 always has them), eps 1e-5.
  qwen3 : Qwen3ForCausalLM   hidden 64, 4 heads, 2 kv heads, head_dim 32 (heads*head_dim =
          128 != hidden), intermediate 96, vocab 128, untied, rope theta 1e6 (default rope),
          q_norm/k_norm (RMSNorm over head_dim, before RoPE), no biases, eps 1e-5.
Every parameter is overwritten with random values (torch.manual_seed(SEED + case index),
then torch.randn in named_parameters() order): tensors with ndim >= 2 (embeddings,
projections, lm_head) ~ N(0, 0.125^2) (0.125 = 1/sqrt(hidden): large enough that attention
is far from uniform and RoPE/scaling mistakes move the logits by O(1)); RMSNorm weights
1 + 0.1 N(0,1); biases 0.1 N(0,1). So no parameter is trivially 0 or 1.
Batch: B = 2, T = 16. A random token sequence seq I32 [B, T+1] is drawn (same RNG, after the
parameters); inputs = seq[:, :T], targets = seq[:, 1:] (next-token targets, shifted inputs).
Loss: mean cross-entropy over all B*T positions (no ignore index), computed from the logits
with torch.nn.functional.cross_entropy (the model's labels= argument, which shifts, is not
used). Everything is computed in float32 (torch.set_num_threads(1), deterministic algorithms).

Files written, per case <case> in {llama, qwen2, qwen3}, under OUT/<case>/:
  config.json, generation_config.json, model.safetensors
      model.save_pretrained() of the initial (random) weights, float32, transformers' own
      tensor names (e.g. "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"; a tied
      model stores no lm_head.weight).
  golden.safetensors  (safetensors, written by this script's own byte-reproducible writer and
      read back with the safetensors library; __metadata__ holds string values: case, architecture,
      B, T, seed, init, targets, loss, steps, lr, beta1, beta2, eps, weight_decay,
      decay_rule, clip, schedule, torch, transformers, versions, generator, plus the fp32 vs
      fp64 agreement figures check.*)
      "inputs"        I32 [B, T]
      "targets"       I32 [B, T]
      "logits"        F32 [B, T, V]    of the initial weights
      "loss"          F32 [1]          mean cross-entropy, initial weights
      "grad.<name>"   F32 (shape of the parameter) d loss / d parameter at the initial weights,
                      for every parameter <name> of model.named_parameters() (a tied model has
                      one tensor, "grad.model.embed_tokens.weight", holding the summed gradient
                      of the embedding and lm_head uses)
      "step_losses"   F32 [3]          the loss before each AdamW step (step_losses[0] == loss)
      "after.<name>"  F32              every parameter after 3 AdamW steps on the same batch
AdamW: torch.optim.AdamW, lr 1e-3 (constant), betas (0.9, 0.95), eps 1e-8, weight_decay 0.1
applied only to parameters with ndim >= 2 (two parameter groups; norms and biases get 0), no
gradient clipping. Per step t = 1..3 with g the gradient of the mean loss on the same batch:
  p = p * (1 - lr * wd);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
  p = p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

One fixture written by transformers with bf16 shards, OUT/qwen3-bf16-sharded/:
  config.json, generation_config.json, model-0000k-of-0000n.safetensors (n = 3),
  model.safetensors.index.json
      the qwen3 case's initial model converted with .to(torch.bfloat16) and saved with
      save_pretrained(max_shard_size="80KB").
  expected.safetensors
      "inputs" I32 [B, T] (the qwen3 case's inputs), "logits" F32 [B, T, V]: the logits
      transformers computes for that checkpoint loaded with
      AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32) (the bf16 weights widened
      to float32, computation in float32).

Check before writing: the float32 results are compared with an independent float64
re-implementation of the three architectures written here (pure float64 torch, autograd for
the gradients, torch.optim.AdamW in float64); the transformers model run in .double() is not
a float64 reference, because its RMSNorm, softmax and RoPE tables compute in float32. Each
quantity's error is max|f32 - f64| / max|f64| over the tensor (worst tensor for grad.* and
after.*); the script fails if any exceeds 1e-5 (and reports the figures; they go into the
metadata too). For after.* that bound is applied to the well-conditioned elements only:
AdamW normalises each element by its own gradient, so an element whose gradient is tiny next
to the rest of its tensor (0 < |g| < 1e-4 max|g| at some step) turns float32 rounding noise of
the gradient into a relative error of its update. In Qwen2 those are the k_proj.bias entries of
the slowest RoPE dimensions (their gradient would be exactly 0 without rotation, by the
softmax's shift invariance; theta 1e6 hardly rotates them over 16 positions): there float32
and float64 differ by up to ~3e-5 absolute (~1.3e-4 relative to the tensor) after 3 steps,
which a test comparing another float32 implementation with after.* must allow for. All
elements' figures are in the metadata as well (check.after_*_all).
"""
import copy
import json
import math
import os
import shutil
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "kernels", "golden", "llama")

SEED = 20260301
B, T = 2, 16
STEPS = 3
LR, BETA1, BETA2, ADAM_EPS, WD = 1e-3, 0.9, 0.95, 1e-8, 0.1
MATRIX_STD, NORM_STD, BIAS_STD = 0.125, 0.1, 0.1
REL_TOL = 1e-5
ILLCOND_REL = 1e-4
SHARD_SIZE = "80KB"

COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=96, vocab_size=128, max_position_embeddings=64,
              rms_norm_eps=1e-5, attention_dropout=0.0, hidden_act="silu")

CASES = [
    ("llama", LlamaConfig, LlamaForCausalLM,
     dict(COMMON, head_dim=16, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
          rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 16})),
    ("qwen2", Qwen2Config, Qwen2ForCausalLM,
     dict(COMMON, tie_word_embeddings=True, use_sliding_window=False,
          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    ("qwen3", Qwen3Config, Qwen3ForCausalLM,
     dict(COMMON, head_dim=32, tie_word_embeddings=False, attention_bias=False,
          use_sliding_window=False,
          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
]


def save_file(tensors, path, metadata):
    """Writes a safetensors file byte-for-byte reproducibly (safetensors.torch.save_file orders
    the __metadata__ keys differently from run to run). Layout: u64 little-endian header length,
    JSON header ({"__metadata__": {...}, name: {"dtype", "shape", "data_offsets"}, ...} in
    insertion order, space-padded to a multiple of 8 bytes), then the raw little-endian data."""
    assert sys.byteorder == "little"
    dtypes = {torch.float32: "F32", torch.int32: "I32", torch.bfloat16: "BF16", torch.uint8: "U8"}
    header, blobs, off = {"__metadata__": dict(metadata)}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for raw in blobs:
            f.write(raw)
    with safe_open(path, "pt") as f:  # read back with the reference reader
        assert f.metadata() == dict(metadata)
        for name, t in tensors.items():
            assert torch.equal(f.get_tensor(name), t), name


def versions():
    return "torch %s, transformers %s" % (torch.__version__, transformers.__version__)


# ----------------------------------------------------------------------------------------
# Independent float64 reference (HF semantics: RMSNorm x*rsqrt(mean x^2 + eps)*w, rotate-half
# RoPE, GQA kv head = head // (H/KV), causal softmax attention scaled by 1/sqrt(head_dim),
# SwiGLU MLP down(silu(gate(x)) * up(x)), final norm, lm_head or tied embedding).

def head_dim(cfg):
    # Qwen2Config has no head_dim attribute (nor config.json key): hidden / heads
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def ref_inv_freq(cfg):
    rp = cfg.rope_parameters
    D = head_dim(cfg)
    inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    if rp["rope_type"] == "llama3":
        factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > lo_wl, inv / factor, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < hi_wl) & ~(wl > lo_wl)
        inv = torch.where(medium, smoothed, scaled)
    else:
        assert rp["rope_type"] == "default"
    return inv


def ref_forward(cfg, W, inputs):
    H, KV, D, eps = cfg.num_attention_heads, cfg.num_key_value_heads, head_dim(cfg), cfg.rms_norm_eps
    Bn, Tn = inputs.shape

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        return y + W[name + ".bias"] if name + ".bias" in W else y

    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * ref_inv_freq(cfg)[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(x):
        x1, x2 = x[..., :D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    mask = torch.triu(torch.full((Tn, Tn), float("-inf"), dtype=torch.float64), 1)
    x = W["model.embed_tokens.weight"][inputs.long()]
    for l in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % l
        h = rms(x, W[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").view(Bn, Tn, H, D)
        k = lin(h, p + "self_attn.k_proj").view(Bn, Tn, KV, D)
        v = lin(h, p + "self_attn.v_proj").view(Bn, Tn, KV, D)
        if p + "self_attn.q_norm.weight" in W:
            q = rms(q, W[p + "self_attn.q_norm.weight"])
            k = rms(k, W[p + "self_attn.k_norm.weight"])
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + mask, -1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, H * D)
        x = x + lin(y, p + "self_attn.o_proj")
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        x = x + lin(F.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"),
                    p + "mlp.down_proj")
    x = rms(x, W["model.norm.weight"])
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    return x @ head.T


# ----------------------------------------------------------------------------------------

def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


def make_optimizer(named):
    decay = [p for _, p in named if p.ndim >= 2]
    other = [p for _, p in named if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                              {"params": other, "weight_decay": 0.0}],
                             lr=LR, betas=(BETA1, BETA2), eps=ADAM_EPS, foreach=False)


def train(named, forward, targets):
    """Returns logits, loss, grads (initial weights), step_losses, params after STEPS steps."""
    opt = make_optimizer(named)
    logits0 = loss0 = grads = None
    step_losses = []
    illcond = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in named}
    for s in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits = forward()
        loss = loss_of(logits, targets)
        loss.backward()
        if s == 0:
            logits0, loss0 = logits.detach().clone(), loss.detach().clone()
            grads = {n: p.grad.detach().clone() for n, p in named}
        for n, p in named:
            a = p.grad.detach().abs()
            illcond[n] |= (a > 0) & (a < ILLCOND_REL * a.max())
        step_losses.append(loss.item())
        opt.step()
    after = {n: p.detach().clone() for n, p in named}
    return logits0, loss0, grads, step_losses, after, illcond


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def init_params(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape) * MATRIX_STD)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape) * BIAS_STD)
            else:  # RMSNorm weights (input/post-attention/final norm, q_norm, k_norm)
                p.copy_(1.0 + torch.randn(p.shape) * NORM_STD)


def run_case(index, case, ConfigCls, ModelCls, kwargs, out):
    torch.manual_seed(SEED + index)
    cfg = ConfigCls(**kwargs)
    cfg._attn_implementation = "eager"
    model = ModelCls(cfg).to(torch.float32)
    model.config._attn_implementation = "eager"
    model.eval()  # dropout is 0 anyway
    init_params(model)
    V = cfg.vocab_size
    seq = torch.randint(0, V, (B, T + 1))
    inputs, targets = seq[:, :T].to(torch.int32), seq[:, 1:].to(torch.int32)

    d = os.path.join(out, case)
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.save_pretrained(d)
    saved = json.load(open(os.path.join(d, "config.json")))
    if case == "llama":
        rp = saved.get("rope_parameters") or saved.get("rope_scaling")
        assert rp and rp.get("rope_type") == "llama3" and rp.get("factor") == 8.0, saved
    initial = copy.deepcopy(model)  # for the bf16 fixture

    # float32, transformers
    named = list(model.named_parameters())
    logits, loss, grads, step_losses, after, _ = train(
        named, lambda: model(input_ids=inputs.long()).logits, targets)
    assert logits.dtype == torch.float32 and logits.shape == (B, T, V)

    # float64 independent reference, same initial weights
    W = {n: p.detach().double().clone().requires_grad_(True) for n, p in initial.named_parameters()}
    named64 = list(W.items())
    l64, loss64, g64, sl64, a64, ill64 = train(named64, lambda: ref_forward(cfg, W, inputs),
                                                targets)
    # AdamW normalises every element by its own gradient history (m / (sqrt(v) + eps)), so
    # where an element's gradient is tiny next to the rest of its tensor (it is then a sum of
    # cancelling terms whose float32 rounding noise scales with the tensor's large entries) the
    # relative noise of the gradient becomes the relative error of the update. Such elements
    # (0 < |g| < ILLCOND_REL * max|g| of their tensor at some step, in the float64 run) are
    # reported separately; in Qwen2 they are the k_proj.bias entries of the slowest RoPE
    # dimensions, whose gradient would be exactly 0 without rotation (softmax shift invariance).
    well = {n: ~ill64[n] for n in after}
    check = {
        "logits": rel(logits, l64),
        "loss": rel(loss, loss64),
        "grad": max(rel(grads[n], g64[n]) for n in grads),
        "step_losses": rel(torch.tensor(step_losses), torch.tensor(sl64)),
        "after_wellcond": max(rel(after[n][well[n]], a64[n][well[n]]) if well[n].any() else 0.0
                              for n in after),
    }
    after_all = max(rel(after[n], a64[n]) for n in after)
    after_abs = max((after[n].double() - a64[n]).abs().max().item() for n in after)
    illcond = ["%s:%d" % (n, int((~w).sum())) for n, w in well.items() if not w.all()]
    # also: transformers' own model in .double() (RMSNorm/softmax/RoPE tables stay float32 in it)
    m64 = copy.deepcopy(initial).double()
    with torch.no_grad():
        hf64 = m64(input_ids=inputs.long()).logits
    check_hf64 = rel(logits, hf64)

    meta = {
        "case": case, "architecture": ModelCls.__name__, "B": str(B), "T": str(T),
        "seed": str(SEED + index),
        "init": "ndim>=2: N(0,%g^2); norm weights: 1+%g*N(0,1); biases: %g*N(0,1)"
                % (MATRIX_STD, NORM_STD, BIAS_STD),
        "targets": "inputs shifted: seq[B,T+1] random, inputs=seq[:,:T], targets=seq[:,1:]",
        "loss": "mean cross-entropy over all B*T positions, no ignore index, float32",
        "steps": str(STEPS), "optimizer": "torch.optim.AdamW",
        "lr": repr(LR), "beta1": repr(BETA1), "beta2": repr(BETA2), "eps": repr(ADAM_EPS),
        "weight_decay": repr(WD), "decay_rule": "weight_decay only on parameters with ndim >= 2",
        "clip": "none", "schedule": "constant lr",
        "attn_implementation": "eager", "dtype": "float32",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "versions": versions(), "generator": "scripts/gen_llama_goldens.py",
    }
    for k, v in check.items():
        meta["check.%s_rel_f32_vs_f64" % k] = "%.3g" % v
    meta["check.logits_rel_f32_vs_hf_double"] = "%.3g" % check_hf64
    meta["check.after_rel_f32_vs_f64_all"] = "%.3g" % after_all
    meta["check.after_maxabs_f32_vs_f64_all"] = "%.3g" % after_abs
    meta["check.illcond_elements"] = (
        "elements with 0 < |grad| < %g * max|grad| of the tensor at some step: %s"
        % (ILLCOND_REL, ", ".join(illcond) if illcond else "none"))

    tensors = {"inputs": inputs.contiguous(), "targets": targets.contiguous(),
               "logits": logits.contiguous(), "loss": loss.reshape(1).contiguous(),
               "step_losses": torch.tensor(step_losses, dtype=torch.float32)}
    for n, g in grads.items():
        tensors["grad." + n] = g.contiguous()
    for n, p in after.items():
        tensors["after." + n] = p.contiguous()
    save_file(tensors, os.path.join(d, "golden.safetensors"), metadata=meta)

    print("%-6s loss %.6f  step_losses %s  params %d" % (
        case, loss.item(), " ".join("%.6f" % x for x in step_losses),
        sum(p.numel() for _, p in named)))
    print("       f32 vs f64 rel: " + "  ".join("%s %.2e" % kv for kv in check.items())
          + "  (logits vs transformers .double(): %.2e)" % check_hf64)
    print("       after.* all elements: rel %.2e, max abs %.2e; ill-conditioned (|g| < %g max): %s"
          % (after_all, after_abs, ILLCOND_REL, ", ".join(illcond) if illcond else "none"))
    bad = {k: v for k, v in check.items() if not v <= REL_TOL}
    if bad:
        sys.exit("%s: float32 differs from the float64 reference beyond %g: %s" % (case, REL_TOL, bad))
    return initial, inputs


def write_bf16_sharded(model, inputs, out):
    d = os.path.join(out, "qwen3-bf16-sharded")
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.to(torch.bfloat16).save_pretrained(d, max_shard_size=SHARD_SIZE)
    shards = sorted(f for f in os.listdir(d) if f.startswith("model-"))
    assert 2 <= len(shards) <= 3 and os.path.exists(os.path.join(d, "model.safetensors.index.json")), shards
    loaded = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    with torch.no_grad():
        logits = loaded(input_ids=inputs.long()).logits
    meta = {"case": "qwen3-bf16-sharded", "B": str(B), "T": str(T),
            "load": "AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32), eager",
            "source": "qwen3 case's initial weights .to(torch.bfloat16), save_pretrained("
                      "max_shard_size=%r)" % SHARD_SIZE,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "versions": versions(), "generator": "scripts/gen_llama_goldens.py"}
    save_file({"inputs": inputs.contiguous(), "logits": logits.contiguous()},
              os.path.join(d, "expected.safetensors"), metadata=meta)
    print("qwen3-bf16-sharded: %s" % ", ".join(shards))


def main():
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    print(versions())
    qwen3 = None
    for i, (case, C, M, kw) in enumerate(CASES):
        model, inputs = run_case(i, case, C, M, kw, out)
        if case == "qwen3":
            qwen3 = (model, inputs)
    write_bf16_sharded(qwen3[0], qwen3[1], out)
    for root, _, files in sorted(os.walk(out)):
        for f in sorted(files):
            p = os.path.join(root, f)
            print("%8d  %s" % (os.path.getsize(p), os.path.relpath(p, out)))


if __name__ == "__main__":
    main()
