#!/usr/bin/env python3
"""hf_train.py — one rank of a Hugging Face causal-LM training run under DeepSpeed, PyTorch
DDP or FSDP2, measured from outside the libraries, phase by phase (issue 34; dev time only:
run by bench/validate_runtimes.sh and bench/validate_ds_export.sh under torchrun, never by
a build or a test).

Per phase it writes one JSON line to --out: the kernel's peak resident set of the phase
(VmHWM after a reset through /proc/self/clear_refs "5", as the engine's probe does,
engine/device/memprobe.c), the resident set at its end and its wall time. Phases:
  import      python start-up, import torch / transformers / deepspeed, process group
              (VmHWM since exec: no reset before it)
  model       the model built from its config.json, random init (under zero.Init when
              --zero-init; on the meta device first is not used: what HF's from_config does)
  initialize  deepspeed.initialize / DDP(...) / fully_shard(...) and the optimizer
  forward, backward, step   each step (step = optimizer step + zero_grad)
  save        checkpoint save (engine.save_checkpoint / torch.save / torch.distributed.checkpoint)
A reset that the kernel does not honour (VmHWM still above VmRSS after it) stops the run:
a phase peak is then not a phase peak.

--footprint instead measures the runtime's own resident set once: after the imports, the
process group and one all-reduce, with every tensor freed (the "runtime" term of the
CPU hardware profile, docs/memory-model.md "The CPU runtime term").
"""
import argparse
import json
import os
import sys
import time

KIB = 1024
# a reset leaves VmHWM at VmRSS; the kernel rounds both to pages and the reading
# itself may fault a few in: more than this above VmRSS means the reset did not happen
RESET_SLACK_BYTES = 1 << 20


def status():
    """VmRSS, VmHWM of this process in bytes (the kernel's own accounting)."""
    rss = hwm = None
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * KIB
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * KIB
    return rss, hwm


def reset_hwm():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss, hwm = status()
    if hwm > rss + RESET_SLACK_BYTES:
        sys.exit(f"hf_train: /proc/self/clear_refs \"5\" did not reset VmHWM ({hwm} > VmRSS {rss}): "
                 "phase peaks cannot be measured on this kernel")


class Probe:
    def __init__(self, out, label, rank):
        self.out, self.label, self.rank = out, label, rank
        self.phase, self.t0, self.step = None, 0.0, -1

    def begin(self, phase, step=-1, reset=True):
        if reset:
            reset_hwm()
        self.phase, self.step, self.t0 = phase, step, time.perf_counter()

    def end(self, **extra):
        dt = time.perf_counter() - self.t0
        rss, hwm = status()
        row = dict(label=self.label, rank=self.rank, phase=self.phase, step=self.step, peak=hwm, rss=rss,
                   seconds=round(dt, 6), **extra)
        with open(self.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        return dt


def parse():
    a = argparse.ArgumentParser()
    a.add_argument("--runtime", choices=["deepspeed", "ddp", "fsdp"], default="deepspeed")
    a.add_argument("--ds-config", help="DeepSpeed config JSON (runtime deepspeed)")
    a.add_argument("--model-config", help="Hugging Face config.json of the model (random init)")
    a.add_argument("--micro", type=int, default=0, help="sequences per rank (default: the DeepSpeed config's)")
    a.add_argument("--seq", type=int, default=128)
    a.add_argument("--steps", type=int, default=3)
    a.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="ddp / fsdp (deepspeed: its config)")
    a.add_argument("--grad-ckpt", action="store_true", help="activation checkpointing (HF gradient_checkpointing)")
    a.add_argument("--zero-init", action="store_true", help="build the model under deepspeed.zero.Init")
    a.add_argument("--save", help="checkpoint directory (the save phase); none: no save")
    a.add_argument("--lr", type=float, default=2e-4)
    a.add_argument("--label", default="run")
    a.add_argument("--out", required=True, help="JSON lines, appended")
    a.add_argument("--footprint", action="store_true")
    a.add_argument("--seed", type=int, default=1234)
    return a.parse_args()


def main():
    args = parse()
    rank = int(os.environ.get("RANK", "0"))
    probe = Probe(args.out, args.label, rank)
    probe.begin("import", reset=False)   # VmHWM since exec
    import torch
    import torch.distributed as dist
    import transformers
    ds = None
    if args.runtime == "deepspeed" or args.zero_init:
        import deepspeed as ds
        ds.init_distributed(dist_backend="gloo")
    else:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    world = dist.get_world_size()
    info = dict(world=world, torch=torch.__version__, transformers=transformers.__version__,
                deepspeed=ds.__version__ if ds else None, backend=dist.get_backend(),
                threads=torch.get_num_threads())
    if args.footprint:
        x = torch.ones(1 << 24)       # a 64 MiB all-reduce: gloo's buffers grown once
        dist.all_reduce(x)
        del x
        import gc
        gc.collect()
        probe.end(**info)
        dist.destroy_process_group()
        return
    probe.end(**info)

    ds_cfg = None
    if args.ds_config:
        with open(args.ds_config) as f:
            ds_cfg = json.load(f)
    micro = args.micro or (ds_cfg or {}).get("train_micro_batch_size_per_gpu", 1)
    bf16 = (ds_cfg["bf16"]["enabled"] if ds_cfg and "bf16" in ds_cfg else args.precision == "bf16")

    probe.begin("model")
    cfg = transformers.AutoConfig.from_pretrained(args.model_config)
    cfg.use_cache = False
    build = lambda: transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    if args.zero_init:
        with ds.zero.Init(config_dict_or_path=ds_cfg, dtype=torch.bfloat16 if bf16 else torch.float32):
            model = build()
    else:
        model = build()
    if args.grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    n_params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    probe.end(params=n_params)

    probe.begin("initialize")
    autocast = None
    if args.runtime == "deepspeed":
        engine, _, _, _ = ds.initialize(model=model, model_parameters=model.parameters(), config=ds_cfg)
    elif args.runtime == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        engine = DDP(model)
        opt = torch.optim.AdamW(engine.parameters(), lr=args.lr, weight_decay=0.01)
        if bf16:
            autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
        blocks = model.transformer.h if hasattr(model, "transformer") else model.model.layers
        for b in blocks:
            fully_shard(b, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        engine = model
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    probe.end()

    gen = torch.Generator().manual_seed(args.seed + rank)
    vocab = cfg.vocab_size
    for s in range(args.steps):
        ids = torch.randint(0, vocab, (micro, args.seq), generator=gen)
        t_start = time.perf_counter()
        probe.begin("forward", s)
        if autocast:
            with autocast():
                loss = engine(input_ids=ids, labels=ids).loss
        else:
            loss = engine(input_ids=ids, labels=ids).loss
        probe.end(loss=float(loss))
        if not torch.isfinite(loss):
            sys.exit(f"hf_train: step {s}: loss is {float(loss)}")
        probe.begin("backward", s)
        if args.runtime == "deepspeed":
            engine.backward(loss)
        else:
            loss.backward()
        probe.end()
        del loss
        probe.begin("step", s)
        if args.runtime == "deepspeed":
            engine.step()
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
        probe.end(step_seconds=round(time.perf_counter() - t_start, 6))   # forward + backward + step

    if args.save:
        probe.begin("save")
        if args.runtime == "deepspeed":
            engine.save_checkpoint(args.save, tag="final")
        elif args.runtime == "ddp":
            if rank == 0:
                torch.save({"model": engine.module.state_dict(), "optim": opt.state_dict()},
                           os.path.join(args.save, "ckpt.pt"))
            dist.barrier()
        else:
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=args.save)
        probe.end()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
