#!/usr/bin/env python3
"""Dev-time generator of the learning-rate schedule golden (tests/engine/golden/lr_schedules.txt).

DeepSpeed's own classes (deepspeed/runtime/lr_schedules.py WarmupLR, WarmupDecayLR,
WarmupCosineLR) compute every configuration below, stepped as DeepSpeed's engine steps them
(deepspeed/runtime/engine.py: the scheduler's __init__ sets the first learning rate with
last_batch_iteration = -1, and _take_model_step calls lr_scheduler.step() after each applied
optimizer step, none after an overflow-skipped one). The golden holds, for applied optimizer
steps k = 0, 1, ..., N-1, the learning rate that step k uses: param_groups[0]["lr"] before it.
N runs well past total_num_steps, so the clamps after the end are covered. Before writing, the
stepping order itself is checked against the real engine: deepspeed.initialize (one gloo rank
on the CPU accelerator, the scheduler from the config) trains a 4-input linear layer and the
learning rate of each applied step must equal the class-stepped sequence (engine_check). dtrun's
dt_schedule_lr (engine/model/optim.c) must give the same value for t = k
(tests/engine/test_lr_golden.c). CI reads the committed file; Python is not needed there.

Run: /tmp/hfvenv/bin/python scripts/gen_lr_schedule_goldens.py
"""
import os
import sys

import torch
import deepspeed
from deepspeed.runtime.lr_schedules import WarmupLR, WarmupDecayLR, WarmupCosineLR

sys.path.insert(0, os.path.dirname(__file__))
from golden_text import write_lines  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..")
OUT = os.path.join(ROOT, "tests", "engine", "golden", "lr_schedules.txt")
LR = 1e-3   # the optimizer's lr: WarmupLR / WarmupDecayLR's warmup_max_lr, WarmupCosineLR's base

# (kind, total_num_steps, warmup_num_steps, warmup_type, warmup_min (lr or ratio), cos_min_ratio, N)
CASES = [
    ("WarmupLR", 0, 1, "log", 0.0, 0.0, 8),          # warmup_num_steps < 2: clamped to 2
    ("WarmupLR", 0, 10, "log", 1e-5, 0.0, 16),
    ("WarmupLR", 0, 10, "linear", 1e-4, 0.0, 16),
    ("WarmupDecayLR", 20, 5, "log", 3e-4, 0.0, 30),
    ("WarmupDecayLR", 20, 5, "linear", 0.0, 0.0, 30),
    ("WarmupDecayLR", 3, 10, "linear", 1e-4, 0.0, 16),  # total < warmup
    ("WarmupDecayLR", 1, 1, "log", 0.0, 0.0, 6),
    ("WarmupDecayLR", 2, 2, "linear", 0.0, 0.0, 6),     # total == warmup: max(1, T - W)
    ("WarmupCosineLR", 20, 5, "log", 0.1, 0.1, 40),
    ("WarmupCosineLR", 20, 5, "linear", 0.0, 0.0001, 40),
    ("WarmupCosineLR", 10, 1, "linear", 0.0, 0.0001, 24),  # warmup 1: clamped to 2
    ("WarmupCosineLR", 3, 10, "log", 0.2, 0.05, 20),        # total < warmup: floor after warmup
    ("WarmupCosineLR", 4, 4, "linear", 0.0, 0.3, 12),       # total == warmup
    ("WarmupCosineLR", 5, 2, "log", 0.5, 0.0, 14),
    ("WarmupCosineLR", 1000, 100, "log", 0.0, 0.0001, 1205),
]


def make(kind, T, W, wt, wmin, cmin):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    if kind == "WarmupLR":
        return opt, WarmupLR(opt, warmup_min_lr=wmin, warmup_max_lr=LR, warmup_num_steps=W, warmup_type=wt)
    if kind == "WarmupDecayLR":
        return opt, WarmupDecayLR(opt, T, warmup_min_lr=wmin, warmup_max_lr=LR, warmup_num_steps=W,
                                  warmup_type=wt)
    return opt, WarmupCosineLR(opt, T, warmup_min_ratio=wmin, warmup_num_steps=W, cos_min_ratio=cmin,
                               warmup_type=wt)


# one configuration per scheduler, run through the real engine by engine_check
ENGINE_CASES = [CASES[1], CASES[3], CASES[13]]


def class_lrs(kind, T, W, wt, wmin, cmin, n):
    opt, sched = make(kind, T, W, wt, wmin, cmin)
    vals = []
    for _ in range(n):
        vals.append(float(opt.param_groups[0]["lr"]))
        sched.step()
    return vals


def scheduler_params(kind, T, W, wt, wmin, cmin):
    if kind == "WarmupCosineLR":
        p = {"warmup_min_ratio": wmin, "cos_min_ratio": cmin}
    else:
        p = {"warmup_min_lr": wmin, "warmup_max_lr": LR}
    if kind != "WarmupLR":
        p["total_num_steps"] = T
    p.update({"warmup_num_steps": W, "warmup_type": wt})
    return p


def engine_check():
    """The engine's order (scheduler stepped after each applied step) on the real engine."""
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29533"), ("RANK", "0"),
                 ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    for kind, T, W, wt, wmin, cmin, n in ENGINE_CASES:
        model = torch.nn.Linear(4, 1)
        cfg = {"train_micro_batch_size_per_gpu": 1,
               "optimizer": {"type": "AdamW", "params": {"lr": LR, "torch_adam": True}},
               "scheduler": {"type": kind, "params": scheduler_params(kind, T, W, wt, wmin, cmin)}}
        engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
        got = []
        for _ in range(n):
            got.append(float(opt.param_groups[0]["lr"]))
            engine.backward(engine(torch.randn(1, 4)).sum())
            engine.step()
        want = class_lrs(kind, T, W, wt, wmin, cmin, n)
        if got != want:
            sys.exit("engine_check: %s T=%d W=%d: the engine's lrs %r differ from the class-stepped %r"
                     % (kind, T, W, got, want))
    print("engine_check: the real engine steps the schedulers as the golden does")


def main():
    engine_check()
    lines = [
        "# DeepSpeed %s lr_schedules.py, stepped as engine.py _take_model_step steps them" % deepspeed.__version__,
        "# (scripts/gen_lr_schedule_goldens.py). One configuration per line:",
        "# KIND TOTAL WARMUP TYPE WARMUP_MIN COS_MIN LR N lr(step 0) ... lr(step N-1)",
    ]
    for kind, T, W, wt, wmin, cmin, n in CASES:
        vals = class_lrs(kind, T, W, wt, wmin, cmin, n)
        lines.append(" ".join([kind, str(T), str(W), wt, repr(wmin), repr(cmin), repr(LR), str(n)] +
                              ["%.17g" % v for v in vals]))
    write_lines(OUT, lines)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
