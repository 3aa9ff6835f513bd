#!/usr/bin/env python3
"""gen_lora_goldens.py — the golden files of dtrun's LoRA (tests/kernels/test_lora.c),
computed by Hugging Face transformers + PEFT themselves.

Dev-time only: CI has no Python and reads the committed files under
tests/kernels/golden/lora/. To regenerate (CPU, seconds):

    /tmp/hfvenv/bin/python scripts/gen_lora_goldens.py [OUT]   (default tests/kernels/golden/lora)

(torch, transformers 5.x, peft, safetensors; the versions are in each file's metadata.)

Base models: the committed random float32 checkpoints of the llama-family goldens,
tests/kernels/golden/llama/{llama,qwen3} (scripts/gen_llama_goldens.py: Llama with GQA and
llama3 RoPE scaling; Qwen3 with q/k norm and head_dim 32 != hidden / heads), loaded with
AutoModelForCausalLM (float32, attn_implementation="eager").

Adapters: peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none",
target_modules = every linear of the blocks: q_proj, k_proj, v_proj, o_proj, gate_proj,
up_proj, down_proj), get_peft_model. Scale alpha / r = 2. PEFT initialises B to 0, which
makes every lora_A gradient 0 at the start; so after PEFT's init every adapter is overwritten
(torch.manual_seed(SEED + case index), named_parameters() order): lora_A ~ U(-1/sqrt(in),
1/sqrt(in)) (PEFT's own kaiming_uniform_(a=sqrt(5)) bound), lora_B ~ N(0, 0.05^2). These are
stored as init.<name> and the C test loads them by name.

Dropout (the "-dropout" cases, lora_dropout 0.1): PEFT's nn.Dropout of every adapter is
replaced by the engine's counter-based mask (engine/model/lm_layer.c lora_mask): element e
(flat index of the module's input [B*T, in]) of module (block l, module m; m the index in
q, k, v, o, gate, up, down) is kept when the uniform ((splitmix64(stream, e + 1) >> 11) +
0.5) / 2^53 >= p, stream = splitmix64(key, l * 7 + m + 1), and kept elements are multiplied
by float32(1 / (1 - p)); the key of micro-batch (s, a) is splitmix64(splitmix64(DROP_SEED,
s + 1), a + 1) (dt_lm_dropout_key), micro-batch (0, 0)'s for the gradient check. Autograd
through x * mask gives the input gradient through the mask, as nn.Dropout's.

Names: the engine's tensor names, i.e. PEFT's key without "base_model.model." and the
adapter name: "model.layers.0.self_attn.q_proj.lora_A.weight" (PEFT's state-dict key is
"base_model.model." + that name).

Batch: B = 2, T = 13 (a sequence length that is no multiple of any tile). STEPS x ACCUM
random sequences seq I32 [STEPS, ACCUM, B, T+1] (same RNG, after the adapters); micro-batch
(s, a): inputs = seq[s, a, :, :T], targets = seq[s, a, :, 1:]. Loss: mean cross-entropy
over its B*T positions.

Forward / gradient check (micro-batch (0, 0)): logits F32 [B, T, V], loss F32 [1],
grad.<name> for every adapter (the base is frozen: requires_grad False, as PEFT sets it).

Training (the loop dtrun runs, engine/run/train.c): STEPS optimizer steps, each over ACCUM
micro-batches, each micro-batch's loss scaled by 1/ACCUM before backward (gradients
accumulate); step_losses F32 [STEPS] = the mean of the step's micro-batch losses; the
global L2 norm of the accumulated adapter gradients clipped to MAX_NORM
(torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6) when below 1, the
divisor DeepSpeed and dt_clip_divisor use); torch.optim.AdamW(lr set per step, betas
(0.9, 0.95), eps 1e-8, weight_decay 0.1 on every adapter matrix, as HF Trainer's groups:
decay on all but biases and norms); the learning rate of step t (0-based) is DeepSpeed's
WarmupDecayLR with linear warmup as DeepSpeed's engine steps it (lr_at below; dt_schedule_lr,
warmup_min_lr 0). after.<name>: every adapter after the STEPS steps. The
metadata holds lr, warmup, steps, accum, max_norm, betas, eps, weight_decay, r, alpha.

bf16 (the "-bf16" cases: dtrun's mixed-bf16, the default of `dtplan solve`): what Hugging
Face Trainer with bf16=True runs without DeepSpeed. The base is loaded in bfloat16
(from_pretrained(dtype=torch.bfloat16), LLaMA-Factory's default compute dtype);
get_peft_model's autocast_adapter_dtype=True upcasts the adapters to float32 (peft
tuners_utils.py cast_adapter_dtype); forward and loss run under torch.autocast("cpu",
torch.bfloat16) as Trainer's bf16 does; lora.Linear.forward casts the input to lora_A's
dtype (float32) before dropout (_cast_input_dtype) and autocast runs lora_A / lora_B as
bf16 GEMMs; the adapters' gradients, AdamW and its moments are float32 with no master copy.
Same init, data and loop as the float32 cases; stored as above. Besides, "ref.*" holds the
same quantities (logits, loss, grad.*, step_losses, step_norms, after.*) from the same
PEFT model run in float32 without autocast on the same bf16-rounded base
(model.float() after loading in bf16): the exact answer the bf16 run approximates, against
which the C test measures both PEFT's bf16 error and dtrun's (tests/kernels/test_lora.c).
"""
import json
import os
import sys

import numpy as np
import peft
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_llama_goldens import save_file  # noqa: E402  the reproducible writer of the llama goldens

SEED = 4242
B, T = 2, 13
STEPS, ACCUM = 20, 2
R, ALPHA = 8, 16
LR, WARMUP, MAX_NORM = 2e-3, 3, 0.5
BETAS, EPS, WD = (0.9, 0.95), 1e-8, 0.1
B_STD = 0.05
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CASES = [("llama", 0.0), ("qwen3", 0.0), ("llama", 0.1), ("qwen3", 0.1)]
BF16_CASES = [("llama", 0.0), ("qwen3", 0.0), ("qwen3", 0.1)]
DROP_SEED = 1234
MODULE_IDS = {n: i for i, n in enumerate(TARGETS)}
GAMMA, MASK64 = 0x9E3779B97F4A7C15, (1 << 64) - 1


def splitmix64(seed, counter):
    """splitmix64 at counter of the stream seeded with seed (numpy uint64 arrays or ints)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.asarray(counter, dtype=np.uint64) * np.uint64(GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def drop_key(s, a):
    return int(splitmix64(int(splitmix64(DROP_SEED, s + 1)), a + 1))


class CounterDropout(torch.nn.Module):
    """The engine's LoRA dropout mask for module id (block * 7 + module) under KEY[0]."""
    KEY = [0]

    def __init__(self, ident, p):
        super().__init__()
        self.ident, self.p = ident, p

    def forward(self, x):
        stream = int(splitmix64(self.KEY[0], self.ident + 1))
        e = np.arange(1, x.numel() + 1, dtype=np.uint64)
        u = ((splitmix64(stream, e) >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0 ** 53
        keep = torch.from_numpy(u >= self.p).reshape(x.shape)
        inv = torch.tensor(1.0 / (1.0 - self.p), dtype=torch.float32)
        return x * (keep.to(torch.float32) * inv)


def use_counter_dropout(model, p):
    n = 0
    for name, mod in model.named_modules():
        if hasattr(mod, "lora_dropout") and "default" in mod.lora_dropout:
            layer = int(name.split(".layers.")[1].split(".")[0])
            ident = layer * len(TARGETS) + MODULE_IDS[name.rsplit(".", 1)[1]]
            mod.lora_dropout["default"] = CounterDropout(ident, p)
            n += 1
    assert n == 7 * model.config.num_hidden_layers
HERE = os.path.dirname(os.path.abspath(__file__))
BASES = os.path.join(HERE, "..", "tests", "kernels", "golden", "llama")


def our_name(peft_name):
    """base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight ->
    model.layers.0.self_attn.q_proj.lora_A.weight"""
    assert peft_name.startswith("base_model.model.")
    return peft_name[len("base_model.model."):].replace(".default.", ".")


def lr_at(t):
    """dt_schedule_lr's WarmupDecayLR (linear warmup, warmup_min_lr 0) for t successful steps
    so far: DeepSpeed's scheduler at last_batch_iteration i = t - 1, as
    scripts/gen_train_golden.py's schedule_lr (checked against DeepSpeed's own classes)."""
    i, w = t - 1, max(WARMUP, 2)
    if i < 0:
        return 0.0
    if i < w:
        return LR * i / w
    return LR * max(0.0, (STEPS - i) / max(1.0, float(STEPS - w)))


def init_adapters(model, index):
    """every adapter overwritten after PEFT's init (B = 0 would make every lora_A gradient 0):
    torch.manual_seed(SEED + index), lora_A ~ U(-1/sqrt(in), 1/sqrt(in)), lora_B ~ N(0, B_STD^2),
    in named_parameters() order; returns [(name, parameter)]"""
    torch.manual_seed(SEED + index)
    adapters = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert adapters and all(".lora_" in n for n, _ in adapters)
    with torch.no_grad():
        for n, p in adapters:
            if ".lora_A." in n:
                bound = 1.0 / p.shape[1] ** 0.5
                p.copy_(torch.empty_like(p).uniform_(-bound, bound))
            else:
                p.copy_(torch.randn_like(p) * B_STD)
    return adapters


def loss_of(model, seq, bf16=False):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=seq[:, :T]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                 seq[:, 1:].reshape(-1))
    return logits, loss


def peft_model(case, drop, bf16):
    """The PEFT model on the case's base: float32, or (bf16) loaded in bfloat16 with the
    adapters PEFT upcasts to float32."""
    dtype = torch.bfloat16 if bf16 else torch.float32
    base = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(BASES, case), dtype=dtype,
                                                             attn_implementation="eager")
    cfg = peft.LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=drop, bias="none", target_modules=TARGETS)
    model = peft.get_peft_model(base, cfg)
    if drop > 0:
        use_counter_dropout(model, drop)
    return model


def train_case(model, index, bf16, prefix, tensors):
    """The gradient check and the STEPS-step loop on model (adapters drawn under SEED + index),
    stored under prefix; returns the first loss, the step losses and the norms."""
    adapters = init_adapters(model, index)
    assert all(p.dtype == torch.float32 for _, p in adapters)
    V = model.config.vocab_size
    seq = torch.randint(0, V, (STEPS, ACCUM, B, T + 1), dtype=torch.int64)
    if not prefix:
        tensors["seq"] = seq.to(torch.int32)
        for n, p in adapters:
            tensors["init." + our_name(n)] = p.detach().clone()

    CounterDropout.KEY[0] = drop_key(0, 0)
    logits, loss = loss_of(model, seq[0, 0], bf16)
    loss.backward()
    tensors[prefix + "logits"] = logits.detach().float().clone()
    tensors[prefix + "loss"] = loss.detach().float().reshape(1).clone()
    for n, p in adapters:
        tensors[prefix + "grad." + our_name(n)] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)

    params = [p for _, p in adapters]
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    step_losses, norms = [], []
    for s in range(STEPS):
        total = 0.0
        for a in range(ACCUM):
            CounterDropout.KEY[0] = drop_key(s, a)
            _, l = loss_of(model, seq[s, a], bf16)
            (l / ACCUM).backward()
            total += l.item()
        step_losses.append(total / ACCUM)
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, MAX_NORM)))
        for group in opt.param_groups:
            group["lr"] = lr_at(s)
        opt.step()
        opt.zero_grad(set_to_none=True)
    tensors[prefix + "step_losses"] = torch.tensor(step_losses, dtype=torch.float32)
    tensors[prefix + "step_norms"] = torch.tensor(norms, dtype=torch.float32)
    for n, p in adapters:
        tensors[prefix + "after." + our_name(n)] = p.detach().clone()
    return loss.item(), step_losses, norms, len(adapters)


def run_case(index, case, drop, out, bf16=False):
    tensors = {}
    loss, step_losses, norms, n = train_case(peft_model(case, drop, bf16), index, bf16, "", tensors)
    if bf16:   # the exact answer: the same PEFT model in float32 on the bf16-rounded base
        train_case(peft_model(case, drop, True).float(), index, False, "ref.", tensors)
    meta = {"case": case, "base": "tests/kernels/golden/llama/" + case, "versions":
            "torch %s, transformers %s, peft %s" % (torch.__version__, transformers.__version__, peft.__version__),
            "r": str(R), "alpha": str(ALPHA), "dropout": repr(drop), "drop_seed": str(DROP_SEED), "B": str(B), "T": str(T), "steps": str(STEPS), "accum": str(ACCUM),
            "lr": repr(LR), "warmup": str(WARMUP), "max_norm": repr(MAX_NORM), "beta1": repr(BETAS[0]),
            "beta2": repr(BETAS[1]), "eps": repr(EPS), "weight_decay": repr(WD)}
    if bf16:
        meta["precision"] = "bf16 base, fp32 adapters, torch.autocast bf16 (HF Trainer bf16=True)"
    name = case + ("-dropout" if drop > 0 else "") + ("-bf16" if bf16 else "")
    save_file(tensors, os.path.join(out, name + ".safetensors"), meta)
    print("%s p %g%s: %d adapter tensors, loss %.6f, steps %.4f -> %.4f, norms %.3f .. %.3f" %
          (case, drop, " bf16" if bf16 else "", n, loss, step_losses[0], step_losses[-1], min(norms), max(norms)))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "kernels", "golden", "lora")
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for i, (case, p) in enumerate(CASES):
        run_case(i % 2, case, p, out)
    for case, p in BF16_CASES:
        run_case(0 if case == "llama" else 1, case, p, out, bf16=True)


if __name__ == "__main__":
    main()
