#!/usr/bin/env python3
"""Dev-time generator of the fine-tuning activation goldens (tests/planner/golden/ft_activations.txt).

For a small Llama (tests/planner/golden/llama-ft-probe.json) in bf16 with SDPA attention,
transformers + PEFT run one training forward per method — full fine-tuning, freeze (the last
2 blocks trained), LoRA r 8 on all linears, on q_proj/v_proj, and on all linears with
dropout 0.1 — the PEFT model cast to bf16 as DeepSpeed's engine does (module.bfloat16()).
torch.autograd.graph.saved_tensors_hooks inside each decoder layer's forward records every
tensor autograd keeps for backward; the bytes of their distinct storages (parameters
excluded) per layer are written out. tests/planner/test_finetune_memory.c checks the planner's
activation terms (runtime deepspeed) against them. CI reads the committed file.

Run: /tmp/hfvenv/bin/python scripts/gen_finetune_activation_goldens.py
"""
import json
import os

import torch
import transformers
import peft
from peft import LoraConfig, get_peft_model

from golden_text import write_lines

ROOT = os.path.join(os.path.dirname(__file__), "..")
CONFIG = os.path.join(ROOT, "tests", "planner", "golden", "llama-ft-probe.json")
OUT = os.path.join(ROOT, "tests", "planner", "golden", "ft_activations.txt")
B, T = 2, 128
# (name, method, targets, rank, dropout, trainable_layers)
METHODS = [
    ("full", "full", "-", 0, 0.0, 0),
    ("freeze_last2", "freeze", "-", 0, 0.0, 2),
    ("lora_all", "lora", "all", 8, 0.0, 0),
    ("lora_qv", "lora", "q_proj,v_proj", 8, 0.0, 0),
    ("lora_all_dropout", "lora", "all", 8, 0.1, 0),
]


def build(cfg):
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.train()
    return model


def saved_per_layer(model, vocab):
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = base.model.layers
    per_layer, st = [], {}

    def pack(t):
        sp = t.untyped_storage().data_ptr()
        if sp not in params and sp not in st["seen"]:
            st["seen"].add(sp)
            st["bytes"] += t.untyped_storage().nbytes()
        return t

    def pre(mod, args):
        st["seen"], st["bytes"] = set(), 0
        st["ctx"] = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        st["ctx"].__enter__()

    def post(mod, args, out):
        st["ctx"].__exit__(None, None, None)
        per_layer.append(st["bytes"])

    hooks = [l.register_forward_pre_hook(pre) for l in layers] + [l.register_forward_hook(post) for l in layers]
    ids = torch.randint(0, vocab, (B, T))
    model(input_ids=ids, labels=ids)
    for h in hooks:
        h.remove()
    return per_layer


def main():
    torch.manual_seed(0)
    with open(CONFIG) as f:
        cfg = json.load(f)
    lines = ["# saved-for-backward bytes per decoder layer: transformers %s, peft %s, torch %s (CPU, bf16, sdpa); "
             "scripts/gen_finetune_activation_goldens.py" % (transformers.__version__, peft.__version__, torch.__version__),
             "# batch seq", "%d %d" % (B, T), "# name method targets rank dropout trainable_layers bytes per layer..."]
    for (name, method, targets, r, p, n) in METHODS:
        model = build(cfg)
        if method == "freeze":
            L = cfg["num_hidden_layers"]
            model.requires_grad_(False)
            for pn, prm in model.named_parameters():
                if any(".layers.%d." % i in pn for i in range(L - n, L)):
                    prm.requires_grad_(True)
        elif method == "lora":
            tm = "all-linear" if targets == "all" else targets.split(",")
            model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=p, target_modules=tm))
            model = model.to(torch.bfloat16)   # DeepSpeed bf16: engine.module.bfloat16()
        per = saved_per_layer(model, cfg["vocab_size"])
        lines.append("%s %s %s %d %g %d %s" % (name, method, targets, r, p, n, " ".join(str(b) for b in per)))
    write_lines(OUT, lines)


if __name__ == "__main__":
    main()
