#!/usr/bin/env python3
"""check_vlm_export.py — dev-time check that transformers loads what dtrun exports as a
LlavaForConditionalGeneration directory (engine/store/vlmdir.c, dt_vlmdir_save) and computes
the golden's logits with it.

    /tmp/hfvenv/bin/python scripts/check_vlm_export.py BUILD_DIR

Runs BUILD_DIR/tests/engine/test_engine_vlm_golden with DT_KEEP_EXPORT set (the test reads the
golden's hf/ directory, exports it sharded, and keeps the export per case), then for each case
loads the export with LlavaForConditionalGeneration.from_pretrained (float32, eager attention;
every tensor must be used: no missing or unexpected key) and compares its logits on the
golden's micro-batch (0, 0) with the golden's (tests/engine/golden/vlm/CASE/golden.safetensors,
pretrain.logits) within 2e-5, test_vlm_golden.c's logits bound."""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from transformers import LlavaForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "tests", "engine", "golden", "vlm")
TOL = 2e-5


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "build")
    with tempfile.TemporaryDirectory() as keep:
        env = dict(os.environ, DT_KEEP_EXPORT=keep)
        subprocess.run([os.path.join(build, "tests", "engine", "test_engine_vlm_golden"), GOLDEN], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        for case in ("llama", "qwen2"):
            model, info = LlavaForConditionalGeneration.from_pretrained(
                os.path.join(keep, case), dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
            assert not info["missing_keys"] and not info["unexpected_keys"], info
            with safe_open(os.path.join(GOLDEN, case, "golden.safetensors"), "pt") as f:
                inputs = f.get_tensor("inputs")[0, 0].long()
                pixels = f.get_tensor("pixels")[0, 0]
                want = f.get_tensor("pretrain.logits")
            with torch.no_grad():
                got = model.eval()(input_ids=inputs, pixel_values=pixels).logits
            err = (got - want).abs().max().item()
            print("%s: transformers on dtrun's export: logits |diff| %.3g (bound %g)" % (case, err, TOL))
            assert err <= TOL, case


if __name__ == "__main__":
    main()
