#!/usr/bin/env python3
"""Dev-time generator of the LoRA parameter-count goldens (tests/models/golden/peft_counts.txt).

For catalog models (tiny Llama / Qwen3 / GPT-2, and full-size Llama-3.1-8B, Qwen2.5-7B,
Llama-2-7B built on the meta device, so no weights are allocated), transformers builds the
model from the catalog's config.json and PEFT wraps it with a LoraConfig; the counts PEFT
reports (PeftModel.get_nb_trainable_parameters: trainable, all) are what models/pgroup.c
must give for the same settings (tests/models/test_pgroup.c). CI reads the committed file.

Run: /tmp/hfvenv/bin/python scripts/gen_peft_count_goldens.py
"""
import json
import os
import sys

import torch
import transformers
import peft
from peft import LoraConfig, get_peft_model

from golden_text import write_lines

ROOT = os.path.join(os.path.dirname(__file__), "..")
OUT = os.path.join(ROOT, "tests", "models", "golden", "peft_counts.txt")

# (catalog model, rank, targets ("all" = PEFT's "all-linear"), modules_to_save or "")
CASES = [
    ("llama-tiny", 8, "all", ""),
    ("qwen3-tiny", 8, "all", ""),
    ("gpt2-tiny", 8, "all", ""),
    ("llama-tiny", 16, "q_proj,v_proj", ""),
    ("qwen3-tiny", 4, "q_proj,k_proj,v_proj,o_proj", "lm_head"),
    ("gpt2-tiny", 4, "c_attn", ""),
    ("llama-tiny", 8, "all", "embed_tokens,lm_head"),
    ("llama-3.1-8b", 8, "all", ""),
    ("qwen2.5-7b", 8, "all", ""),
    ("llama-2-7b", 8, "q_proj,v_proj", ""),
    ("qwen3-0.6b", 16, "all", ""),
]


def build(name):
    with open(os.path.join(ROOT, "models", "catalog", name + ".json")) as f:
        cfg = json.load(f)
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


def main():
    lines = ["# LoRA parameter counts: transformers %s, peft %s; scripts/gen_peft_count_goldens.py"
             % (transformers.__version__, peft.__version__),
             "# model rank targets modules_to_save trainable all"]
    for (name, r, targets, save) in CASES:
        model = build(name)
        tm = "all-linear" if targets == "all" else targets.split(",")
        cfg = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=tm,
                         modules_to_save=save.split(",") if save else None)
        pm = get_peft_model(model, cfg)
        trainable, total = pm.get_nb_trainable_parameters()
        lines.append("%s %d %s %s %d %d" % (name, r, targets, save or "-", trainable, total))
        print(lines[-1], file=sys.stderr)
    write_lines(OUT, lines)


if __name__ == "__main__":
    main()
