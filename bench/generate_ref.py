#!/usr/bin/env python3
"""generate_ref.py — transformers' generate on the prompts bench_generate.c draws (the same
splitmix64 ids), greedy, KV cache on (use_cache=True, the default DynamicCache), batch of
BATCH prompts of one length (no padding), NEW tokens each, no EOS; prints the best of REPEATS
wall times (time.perf_counter) after a warm-up and new tokens per second.

    python generate_ref.py MODEL_DIR BATCH PROMPT_LEN NEW [REPEATS] [THREADS]
"""
import sys
import time

import torch
from transformers import AutoModelForCausalLM

M64 = (1 << 64) - 1


def mix(z):
    z = (z + 0x9e3779b97f4a7c15) & M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def main():
    d, B, P, NEW = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    if len(sys.argv) > 6:
        torch.set_num_threads(int(sys.argv[6]))
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    V = model.config.vocab_size
    ids = torch.tensor([[mix(i * P + t) % V for t in range(P)] for i in range(B)])
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    best = float("inf")
    with torch.no_grad():
        for r in range(reps + 1):
            t0 = time.perf_counter()
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, num_beams=1,
                           max_new_tokens=NEW, min_new_tokens=NEW, use_cache=True)
            t = time.perf_counter() - t0
            if r > 0:
                best = min(best, t)
    print("transformers   batch %d prompt %d new %d: %.3f s, %.1f tokens/s (torch %s, %d threads)"
          % (B, P, NEW, best, B * NEW / best, torch.__version__, torch.get_num_threads()))


if __name__ == "__main__":
    main()
