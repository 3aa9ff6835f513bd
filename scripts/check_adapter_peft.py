#!/usr/bin/env python3
"""check_adapter_peft.py — dev-time check (not CI: it needs Python, torch, transformers, peft)
that PeftModel.from_pretrained loads an adapter written by dt_adapter_write
(engine/store/dt_adapter.h) and gives the same logits as the PEFT original.

For each golden case of tests/engine/golden/adapter (scripts/gen_adapter_goldens.py: tiny Llama
with modules_to_save, Qwen3 with rsLoRA, GPT-2 with Conv1D), the C test test_engine_adapter
reads PEFT's adapter with dt_adapter_read and writes its tensors again with dt_adapter_write
(DT_ADAPTER_KEEP=DIR keeps them in DIR/rt_<case>). This script loads each written adapter onto
the base with PeftModel.from_pretrained (no warning about missing or unexpected keys allowed),
runs the golden batch and compares the logits with the PEFT original's (logits.safetensors).
It also merges PEFT's adapter with `dtrun merge` and loads the merged directory with
AutoModelForCausalLM.from_pretrained: its logits against the PEFT model's (the merge reorders
the arithmetic, so they agree to fp32 rounding, not bit for bit).

    cmake --build build --target test_engine_adapter
    /tmp/hfvenv/bin/python scripts/check_adapter_peft.py [BUILD_DIR]     (default build)

Prints one line per case and exits non-zero when any differs. The result is recorded in
docs/finetune.md "Adapter files".
"""
import os, subprocess, sys, tempfile, warnings

import torch
import transformers
from peft import PeftConfig, PeftModel
from safetensors.torch import load_file

GOLD = "tests/engine/golden/adapter"


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    keep = os.path.join(tempfile.mkdtemp(prefix="dt_adapter_check_"), "out")
    env = dict(os.environ, DT_ADAPTER_KEEP=keep)
    subprocess.run([os.path.join(build, "tests/engine/test_engine_adapter"), GOLD], env=env, check=True)
    torch.set_num_threads(1)
    bad = 0
    for case in ["llama", "qwen3", "gpt2"]:
        ours = os.path.join(keep, "rt_" + case)
        cfg = PeftConfig.from_pretrained(ours)
        base = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(GOLD, case, "base"),
                                                                 attn_implementation="eager")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            model = PeftModel.from_pretrained(base, ours)
        keywarn = [str(x.message) for x in w if "key" in str(x.message).lower()]
        model.eval()
        g = load_file(os.path.join(GOLD, case, "logits.safetensors"))
        with torch.no_grad():
            logits = model(input_ids=g["input_ids"].long()).logits.float()
        diff = (logits - g["logits"]).abs().max().item()
        ok = diff == 0.0 and not keywarn
        bad += not ok
        print(f"{case}: PeftModel.from_pretrained(dt_adapter_write's adapter) r={cfg.r} alpha={cfg.lora_alpha} "
              f"rslora={cfg.use_rslora} fan_in_fan_out={cfg.fan_in_fan_out} modules_to_save={cfg.modules_to_save}: "
              f"max |logits - PEFT original's| = {diff:.3g}{'' if not keywarn else ' KEY WARNINGS: ' + '; '.join(keywarn)}"
              f" -> {'OK' if ok else 'DIFFERS'}")
        merged = os.path.join(keep, "cli_merged_" + case)
        subprocess.run([os.path.join(build, "dtrun"), "merge", "--base", os.path.join(GOLD, case, "base"),
                        "--adapter", os.path.join(GOLD, case, "adapter"), "-o", merged], check=True,
                       stdout=subprocess.DEVNULL)
        mm = transformers.AutoModelForCausalLM.from_pretrained(merged, attn_implementation="eager").eval()
        with torch.no_grad():
            ml = mm(input_ids=g["input_ids"].long()).logits.float()
        mdiff = (ml - g["logits"]).abs().max().item()
        scale = g["logits"].abs().max().item()
        mok = mdiff <= 1e-5 * max(1.0, scale)
        bad += not mok
        print(f"{case}: transformers on `dtrun merge`'s directory: max |logits - PeftModel's| = {mdiff:.3g} "
              f"(max |logit| {scale:.3g}) -> {'OK' if mok else 'DIFFERS'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
