#!/usr/bin/env python3
"""Dev-time generator of the QLoRA storage goldens (tests/models/golden/qlora_bytes.txt).

A small Llama (tests/planner/golden/llama-ft-probe.json), saved in bf16 and loaded by
transformers with a BitsAndBytesConfig (load_in_4bit, nf4 / fp4, double quantisation on /
off; bitsandbytes' CPU back-end): the bytes the loaded model holds — every parameter (the
packed 4-bit weights, the 16-bit embeddings, norms and lm_head) and every QuantState tensor
(absmax, code book, nested absmax, dynamic map, offset), each storage once. models/pgroup.c's
frozen bytes for the same QLoRA settings must be equal (tests/models/test_pgroup.c).

Run: /tmp/hfvenv/bin/python scripts/gen_qlora_bytes_goldens.py
"""
import json
import os
import tempfile

import torch
import transformers
import bitsandbytes
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

from golden_text import write_lines

ROOT = os.path.join(os.path.dirname(__file__), "..")
CONFIG = os.path.join(ROOT, "tests", "planner", "golden", "llama-ft-probe.json")
OUT = os.path.join(ROOT, "tests", "models", "golden", "qlora_bytes.txt")
CASES = [("nf4", True), ("nf4", False), ("fp4", True), ("fp4", False)]


def live_bytes(model):
    seen, total = set(), 0
    for p in model.parameters():
        tensors = [p]
        qs = getattr(p, "quant_state", None)
        if qs is not None:
            tensors += [qs.absmax, qs.code]
            if qs.nested:
                tensors += [qs.offset, qs.state2.absmax, qs.state2.code]
        for t in tensors:
            if torch.is_tensor(t) and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total += t.untyped_storage().nbytes()
    return total


def main():
    torch.manual_seed(0)
    with open(CONFIG) as f:
        cfg = json.load(f)
    model = AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg)).to(torch.bfloat16)
    lines = ["# QLoRA base bytes: transformers %s, bitsandbytes %s (CPU); scripts/gen_qlora_bytes_goldens.py"
             % (transformers.__version__, bitsandbytes.__version__), "# quant_type double_quant bytes"]
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        for qt, dq in CASES:
            q = AutoModelForCausalLM.from_pretrained(
                d, dtype=torch.bfloat16, device_map="cpu",
                quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=qt,
                                                       bnb_4bit_use_double_quant=dq,
                                                       bnb_4bit_compute_dtype=torch.bfloat16))
            lines.append("%s %d %d" % (qt, int(dq), live_bytes(q)))
    write_lines(OUT, lines)


if __name__ == "__main__":
    main()
