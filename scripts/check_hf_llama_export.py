#!/usr/bin/env python3
"""check_hf_llama_export.py — dev-time check that a llama-family checkpoint directory (as the
engine exports it: config.json plus model.safetensors, or model-0000k-of-0000n.safetensors
shards with model.safetensors.index.json) loads into Hugging Face transformers and gives the
golden logits.

The directory is loaded with AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32,
attn_implementation="eager") (bf16/f16 tensors are widened to float32; computation in
float32); the script fails if transformers reports missing, unexpected or mismatched tensors
(it would silently random-initialise a missing one). It then runs the golden "inputs" I32
[B, T] and prints max |logits - golden logits| (and relative to max |golden logits|); the exit
status is 1 when that exceeds --tol, 2 on a loading problem, 0 otherwise.

Usage:
  /tmp/hfvenv/bin/python scripts/check_hf_llama_export.py DIR GOLDEN [--tol 1e-4]
  /tmp/hfvenv/bin/python scripts/check_hf_llama_export.py DIR --dtrun build/dtrun [--prompt TEXT]
The second form checks a dtrun checkpoint (byte-level vocabulary) against dtrun itself:
`dtrun sample DIR --prompt TEXT --tokens 1 --dump-logits F` writes dtrun's fp32 logits
[len(TEXT), V] of the prompt's bytes, which transformers must reproduce.
e.g.
  scripts/check_hf_llama_export.py tests/kernels/golden/llama/qwen2 \\
      tests/kernels/golden/llama/qwen2/golden.safetensors --tol 0
GOLDEN is any safetensors file with "inputs" I32 [B, T] and "logits" F32 [B, T, V]: a
golden.safetensors or expected.safetensors written by scripts/gen_llama_goldens.py, or the
engine's own dump. Needs torch, transformers, safetensors
(python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers safetensors).
Not run in CI.
"""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors import safe_open
from transformers import AutoModelForCausalLM


def dtrun_logits(dtrun, ckpt, prompt, vocab):
    """dtrun's fp32 logits [1, len, V] of the prompt's bytes, and those ids [1, len]."""
    import subprocess
    import tempfile
    ids = list(prompt.encode())
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "logits.bin")
        subprocess.run([dtrun, "sample", ckpt, "--prompt", prompt, "--tokens", "1", "--dump-logits", dump],
                       check=True, stdout=subprocess.DEVNULL)
        raw = open(dump, "rb").read()
    logits = torch.frombuffer(bytearray(raw), dtype=torch.float32).double().reshape(1, len(ids), vocab)
    return torch.tensor([ids]), logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="checkpoint directory (config.json + safetensors)")
    ap.add_argument("golden", nargs="?", help="safetensors with 'inputs' [B,T] and 'logits' [B,T,V]")
    ap.add_argument("--dtrun", help="compare with this dtrun's `sample --dump-logits` instead of GOLDEN")
    ap.add_argument("--prompt", default="Hello, world", help="prompt for --dtrun (bytes are the ids)")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="maximum allowed max |logits difference| (default 1e-4)")
    args = ap.parse_args()
    if (args.golden is None) == (args.dtrun is None):
        ap.error("give GOLDEN or --dtrun, not both")

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    cfg = json.load(open(os.path.join(args.dir, "config.json")))
    files = sorted(f for f in os.listdir(args.dir) if f.endswith(".safetensors")
                   and (f == "model.safetensors" or f.startswith("model-")))
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    print("%s: %s (%s), weights %s" % (args.dir, cfg.get("architectures"), cfg.get("dtype"),
                                       ", ".join(files) or "none"))
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            args.dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    except Exception as e:  # noqa: BLE001 - report any loading failure the same way
        print("FAIL: from_pretrained: %s" % e)
        return 2
    problems = {k: sorted(v) for k, v in info.items() if v}
    if problems:
        print("FAIL: loading info: %s" % problems)
        return 2
    model.eval()

    if args.dtrun:
        inputs, golden = dtrun_logits(args.dtrun, args.dir, args.prompt, cfg["vocab_size"])
    else:
        with safe_open(args.golden, "pt") as f:
            inputs = f.get_tensor("inputs").long()
            golden = f.get_tensor("logits").double()
    with torch.no_grad():
        logits = model(input_ids=inputs).logits.double()
    if logits.shape != golden.shape:
        print("FAIL: logits shape %s, golden %s" % (tuple(logits.shape), tuple(golden.shape)))
        return 1
    diff = (logits - golden).abs().max().item()
    scale = golden.abs().max().item()
    print("max |logits - golden| over [%s]: %.3g (relative to max |golden| %.3g: %.3g)"
          % (", ".join(map(str, golden.shape)), diff, scale, diff / scale if scale else diff))
    if diff <= args.tol:
        print("ok (tol %g)" % args.tol)
        return 0
    print("FAIL: exceeds tol %g" % args.tol)
    return 1


if __name__ == "__main__":
    sys.exit(main())
