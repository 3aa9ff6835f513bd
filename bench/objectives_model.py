#!/usr/bin/env python3
"""objectives_model.py — the objectives' benchmark model (bench/validate_mem.sh --objectives,
bench/bench_objectives.sh): Qwen3-0.6B's block (models/catalog/qwen3-0.6b.json: hidden 1024,
16 query / 8 key-value heads of 128, MLP 3072, q/k RMSNorm), 8 of its 28 blocks, an untied head
over the qwen2-mini tokenizer's 1500 ids: 129 M parameters. Writes DIR/config.json; with --weights also DIR/model.safetensors (transformers'
initialisation, torch seed 0, fp32) and DIR/tokenizer.json, the one directory dtrun --init and
TRL both load. transformers is needed for --weights only.

usage: objectives_model.py DIR [--weights] [--tokenizer TOKENIZER.json]"""
import json
import os
import shutil
import sys

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "_name_or_path": "dtplan/qwen3-0.6b-8blocks-bench",
    "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 8, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 1500, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False, "attention_bias": False,
    "attention_dropout": 0.0, "hidden_act": "silu", "initializer_range": 0.02, "torch_dtype": "float32",
    "use_sliding_window": False, "sliding_window": None, "max_window_layers": 8,
    "bos_token_id": None, "eos_token_id": 0, "pad_token_id": 0,
}


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__.split("\n\n")[1])
    out = args[0]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json.tmp"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    os.replace(os.path.join(out, "config.json.tmp"), os.path.join(out, "config.json"))
    if "--tokenizer" in args:
        shutil.copyfile(args[args.index("--tokenizer") + 1], os.path.join(out, "tokenizer.json"))
    if "--weights" in args:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out), torch_dtype=torch.float32)
        model.save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    main()
