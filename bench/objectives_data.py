#!/usr/bin/env python3
"""objectives_data.py — synthetic data for the objectives' benchmarks (bench/validate_mem.sh
--objectives, bench/bench_objectives.sh): KIND dpo writes preference pairs (TRL's prompt /
chosen / rejected), KIND grpo prompt-only records with an answer (dtrun's exact-answer reward;
TRL's GRPOTrainer reads "prompt"). Words of the qwen2-mini tokenizer's alphabet, seeded, so the
same file is written on every machine; about 100 tokens per pair side, 40 per prompt.

usage: objectives_data.py dpo|grpo OUT.jsonl [RECORDS]"""
import json
import os
import random
import sys

SYLLABLES = ["ba", "de", "fi", "go", "hu", "ja", "ke", "li", "mo", "nu", "pa", "re", "si", "to", "vu", "wa"]


def words(r, n):
    return " ".join(r.choice(SYLLABLES) + r.choice(SYLLABLES) for _ in range(n))


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("dpo", "grpo"):
        sys.exit(__doc__.split("\n\n")[1])
    kind, out = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) == 4 else 64
    r = random.Random(33)
    with open(out + ".tmp", "w") as f:
        for _ in range(n):
            if kind == "dpo":
                rec = {"prompt": words(r, 12), "chosen": " " + words(r, 16), "rejected": " " + words(r, 16)}
            else:
                a, b = r.randrange(10), r.randrange(10)
                rec = {"prompt": words(r, 12) + f" {a}+{b}=", "answer": str(a + b)}
            f.write(json.dumps(rec) + "\n")
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
