#!/usr/bin/env python3
"""trl_objectives.py — the TRL side of bench/bench_objectives.sh: TRL 1.16's DPOTrainer or
GRPOTrainer on the CPU (fp32, torch's threads as given) over the same model directory and
JSONL as dtrun, with the same batch, sequence, steps and objective settings. Prints one JSON
line: the mean wall time of an optimizer step (Python's perf_counter around each step, the
first excluded as dtrun's mean_step_s excludes it), the mean CPU time of the process in a step
(process_time: every thread's), the steps timed, and the examples per step.

usage: trl_objectives.py dpo|grpo MODEL_DIR DATA.jsonl --micro B --accum A --steps N --seq T
                         [--threads K] [--completion C --generations G --beta BETA]"""
import argparse
import json
import os
import tempfile
import time


def parse():
    a = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1])
    a.add_argument("kind", choices=["dpo", "grpo"])
    a.add_argument("model")
    a.add_argument("data")
    for k, d in (("micro", 1), ("accum", 1), ("steps", 5), ("seq", 128), ("threads", 0), ("completion", 32),
                 ("generations", 4)):
        a.add_argument("--" + k, type=int, default=d)
    a.add_argument("--beta", type=float, default=0.04)
    a.add_argument("--lr", type=float, default=1e-6)
    return a.parse_args()


def main():
    o = parse()
    import torch
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    if o.threads > 0:
        torch.set_num_threads(o.threads)
    torch.manual_seed(0)
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(o.model, "tokenizer.json"),
                                  eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    model = AutoModelForCausalLM.from_pretrained(o.model, torch_dtype=torch.float32)
    data = load_dataset("json", data_files=o.data, split="train")
    times, cpu = [], []

    class Clock(TrainerCallback):   # wall time and the process's CPU time (all its threads) per step
        def on_step_begin(self, args, state, control, **kw):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)
            cpu.append(time.process_time() - self.c0)

    out = tempfile.mkdtemp(prefix="trl_bench_")
    common = dict(output_dir=out, per_device_train_batch_size=o.micro, gradient_accumulation_steps=o.accum,
                  max_steps=o.steps, learning_rate=o.lr, lr_scheduler_type="constant", warmup_steps=0,
                  logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=False, fp16=False,
                  dataloader_num_workers=0, seed=0, disable_tqdm=True,
                  # TRL 1.16's DPOConfig / GRPOConfig default to True; dtrun's plan keeps every
                  # block (ckpt_layers 0), so both do the same work
                  gradient_checkpointing=False)
    if o.kind == "dpo":
        from trl import DPOConfig, DPOTrainer
        cfg = DPOConfig(max_length=o.seq, beta=0.1, **common)
        tr = DPOTrainer(model=model, ref_model=None, args=cfg, train_dataset=data, processing_class=tok,
                        callbacks=[Clock()])
        per_step = o.micro * o.accum
    else:
        from trl import GRPOConfig, GRPOTrainer

        def exact(completions, answer, **kw):
            return [1.0 if c.strip().startswith(a) else 0.0 for c, a in zip(completions, answer)]
        cfg = GRPOConfig(num_generations=o.generations, max_completion_length=o.completion, beta=o.beta,
                         temperature=1.0, **common)
        tr = GRPOTrainer(model=model, reward_funcs=exact, args=cfg, train_dataset=data, processing_class=tok,
                         callbacks=[Clock()])
        per_step = o.micro * o.accum
    tr.train()
    timed = times[1:] if len(times) > 1 else times
    ctimed = cpu[1:] if len(cpu) > 1 else cpu
    lens = [h.get("completions/mean_length") for h in tr.state.log_history if "completions/mean_length" in h]
    print(json.dumps({"kind": o.kind, "step_s": sum(timed) / len(timed), "cpu_s": sum(ctimed) / len(ctimed),
                      "steps_timed": len(timed),
                      "examples_per_step": per_step, "threads": torch.get_num_threads(),
                      "mean_completion_length": sum(lens) / len(lens) if lens else None}))


if __name__ == "__main__":
    main()
