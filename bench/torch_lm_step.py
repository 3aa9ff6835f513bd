#!/usr/bin/env python3
"""PyTorch eager's forward + backward of a catalog model, timed the way bench/bench_gpt2
times ours.

transformers' causal-LM class for the model's configuration (--config: a file of
models/catalog/, which holds the model's Hugging Face config.json; default GPT-2 124M),
random weights, dropout off (the engine has none), train mode, random input and target
tokens; per step zero_grad, forward with the labels (the loss inside the model) and
backward.
--precision bf16 runs the forward under torch.autocast("cpu", dtype=torch.bfloat16)
(parameters stay fp32: PyTorch's mixed precision). Step 0 warms up and is not
counted. --optimizer makes each step a full training step, as bench_gpt2 --optimizer: after the
backward, the global gradient norm clipped to 1.0 (torch.nn.utils.clip_grad_norm_) and
torch.optim.AdamW (its default implementation: foreach; lr 6e-4, betas 0.9 / 0.95, eps
1e-8, weight decay 0.1 on 2-D tensors only, as dtrun and bench_gpt2 apply it), timed as
"train step"; the forward + backward inside it still as "fwd+bwd".
--lora R wraps the model with PEFT (peft.get_peft_model, LoraConfig r R, lora_alpha 2R,
lora_dropout 0) on exactly the modules bench_gpt2 --finetune lora adapts: every linear of
the blocks, not the output layer (GPT-2: c_attn, c_proj of attention and MLP, c_fc, Conv1D
so fan_in_fan_out=True; Llama / Qwen: q, k, v, o, gate, up, down_proj); the base is frozen
and the optimizer (and clipping) covers the trainable parameters only. Prints
"trainable params: N of M" as bench_gpt2 does, so the two sets can be compared. Prints the same
lines bench/vs_pytorch.sh reads from bench_gpt2:

    fwd+bwd: mean 1354.2 ms (best 1340.0 ms) over 3 steps, loss 10.9440
    train step: mean 1600.0 ms (best 1580.0 ms) over 3 steps, AdamW 245.8 ms of it

and the process's CPU time per timed step divided by the thread count
("cpu per thread: ... ms per step"), vs_pytorch.sh --clock cpu's figure.

Dev-time only (needs torch and transformers; CI has no Python packages).
"""
import argparse
import time

import torch
import json

from transformers import AutoConfig, AutoModelForCausalLM

DROPOUT_KEYS = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout")
# --lora: every linear of a block, per family (the engine's LoRA modules, engine/model/lm_gpt2.c
# and lm_llama.c); GPT-2's are transformers' Conv1D, weights [in, out] (fan_in_fan_out)
LORA_TARGETS = {"gpt2": ["c_attn", "c_proj", "c_fc"]}
LORA_TARGETS_LLAMA = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_ALPHA_PER_RANK = 2   # bench_gpt2.c LORA_ALPHA_PER_RANK (LLaMA-Factory's default alpha)
# --optimizer: the settings bench_gpt2.c's OPT_* use (nanoGPT's GPT-2 training values)
OPT_LR, OPT_BETAS, OPT_EPS, OPT_WEIGHT_DECAY, OPT_CLIP = 6e-4, (0.9, 0.95), 1e-8, 0.1, 1.0


def load_config(path):
    """The catalog file's Hugging Face configuration, every dropout set to 0."""
    d = json.load(open(path))
    d = {k: v for k, v in d.items() if not k.startswith("_") and k != "architectures"}
    for k in DROPOUT_KEYS:
        if k in d:
            d[k] = 0.0
    return AutoConfig.for_model(d.pop("model_type"), **d)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=None,
                   help="a models/catalog/*.json file (default: GPT-2 124M, gpt2.json)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--optimizer", action="store_true",
                   help="full training step: clip + AdamW after the backward")
    p.add_argument("--lora", type=int, default=0, metavar="R",
                   help="PEFT LoRA of rank R (alpha 2R) on every linear of the blocks")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    if a.config is None:
        import os
        a.config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models",
                                "catalog", "gpt2.json")
    cfg = load_config(a.config)
    model = AutoModelForCausalLM.from_config(cfg)
    how = "full"
    if a.lora:
        import peft
        targets = LORA_TARGETS.get(cfg.model_type, LORA_TARGETS_LLAMA)
        lc = peft.LoraConfig(r=a.lora, lora_alpha=LORA_ALPHA_PER_RANK * a.lora, lora_dropout=0.0,
                             target_modules=targets, fan_in_fan_out=cfg.model_type == "gpt2",
                             bias="none", task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lc)
        how = (f"lora r {a.lora} alpha {LORA_ALPHA_PER_RANK * a.lora} on {','.join(targets)}, "
               f"peft {peft.__version__}")
    model.train()
    g = torch.Generator().manual_seed(42)
    x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=g)
    y = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=g)

    opt = None
    params = [q for q in model.parameters() if q.requires_grad]
    if a.optimizer:
        groups = [{"params": [q for q in params if q.dim() >= 2], "weight_decay": OPT_WEIGHT_DECAY},
                  {"params": [q for q in params if q.dim() < 2], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=OPT_LR, betas=OPT_BETAS, eps=OPT_EPS)

    times, step_times, loss, cpu0 = [], [], float("nan"), 0.0
    for it in range(a.steps + 1):   # step 0 warms up
        if it == 1:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = model(input_ids=x, labels=y)
        out.loss.backward()
        t1 = time.perf_counter()
        if opt is not None:
            torch.nn.utils.clip_grad_norm_(params, OPT_CLIP)
            opt.step()
        t2 = time.perf_counter()
        loss = out.loss.item()
        if it > 0:
            times.append(t1 - t0)
            step_times.append(t2 - t0)
    cpu = (time.process_time() - cpu0) / a.steps / a.threads
    mean = sum(times) / len(times)
    print(f"torch {torch.__version__}, {type(model).__name__}, "
          f"{sum(q.numel() for q in model.parameters())} params, "
          f"{torch.get_num_threads()} threads, attention "
          f"{model.config._attn_implementation}, {a.precision}")
    print(f"trainable params: {sum(q.numel() for q in params)} of "
          f"{sum(q.numel() for q in model.parameters())} ({how})")
    print(f"fwd+bwd: mean {mean * 1e3:.1f} ms (best {min(times) * 1e3:.1f} ms) over {a.steps} "
          f"steps, loss {loss:.4f}")
    if opt is not None:
        smean = sum(step_times) / len(step_times)
        print(f"train step: mean {smean * 1e3:.1f} ms (best {min(step_times) * 1e3:.1f} ms) over "
              f"{a.steps} steps, AdamW {(smean - mean) * 1e3:.1f} ms of it")
    print(f"cpu per thread: {cpu * 1e3:.1f} ms per step")


if __name__ == "__main__":
    main()
