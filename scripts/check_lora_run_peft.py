#!/usr/bin/env python3
"""check_lora_run_peft.py — dev-time check (not CI: it needs torch, transformers, peft) that the
adapter a dtrun LoRA run writes beside a checkpoint (CKPT/adapter/, engine/run/dt_runadapter.h)
is what PEFT loads: PeftModel.from_pretrained(base, CKPT/adapter) with no missing / unexpected
key, and its logits for a byte prompt equal those `dtrun sample CKPT --dump-logits` computes from
the checkpoint (base + adapters in dtrun's own forward).

    /tmp/hfvenv/bin/python scripts/check_lora_run_peft.py BASE_DIR CKPT_DIR DTRUN_LOGITS PROMPT [QUANT]

BASE_DIR: the run's --init (a Hugging Face directory); DTRUN_LOGITS: the file `dtrun sample
CKPT_DIR --prompt PROMPT --tokens 1 --dump-logits FILE` wrote (fp32 [len, V]); PROMPT: its text
(byte-level models: token ids are the bytes). Prints the largest difference; exits non-zero above
1e-4 (fp32 arithmetic in another order) or on a key warning. Result in docs/finetune.md.

QUANT (a QLoRA run: nf4, nf4-dq, fp4, fp4-dq): the base is loaded as QLoRA loads it,
BitsAndBytesConfig(load_in_4bit, bnb_4bit_quant_type, bnb_4bit_use_double_quant,
bnb_4bit_compute_dtype=torch.float32) on bitsandbytes' CPU back-end, and the model kept in train()
mode (dropout is 0): in eval mode bitsandbytes repacks the weights for its bf16 CPU gemv
(nn/modules.py Linear4bit.forward), which is not the fp32 computation dtrun runs.
"""
import sys
import warnings

import numpy as np
import torch
import transformers
from peft import PeftModel


def main():
    base_dir, ckpt, dump, prompt = sys.argv[1:5]
    quant = sys.argv[5] if len(sys.argv) > 5 else None
    kw = {}
    if quant:
        kw["quantization_config"] = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type=quant.split("-")[0], bnb_4bit_use_double_quant=quant.endswith("-dq"),
            bnb_4bit_compute_dtype=torch.float32)
        kw["device_map"] = "cpu"
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, **kw)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        model = PeftModel.from_pretrained(base, ckpt + "/adapter")
    bad = [str(x.message) for x in w if "key" in str(x.message).lower()]
    if quant:
        model.train()
    ids = torch.tensor([list(prompt.encode())])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].numpy()
    ours = np.fromfile(dump, dtype=np.float32).reshape(logits.shape)
    diff = float(np.abs(ours - logits).max())
    print(f"PEFT vs dtrun logits [{logits.shape[0]} x {logits.shape[1]}]: max |diff| {diff:.3g}"
          f" (scale {float(np.abs(logits).max()):.3g}); key warnings: {bad or 'none'}")
    sys.exit(1 if bad or diff > 1e-4 else 0)


if __name__ == "__main__":
    main()
