#!/usr/bin/env python3
"""check_hf_export.py — dev-time check that a dtrun checkpoint loads into Hugging
Face transformers' GPT2LMHeadModel and gives the same logits as dtrun.

A checkpoint directory (OUT/ckpt-NNNNNNNN/) holds model.safetensors with HF GPT-2
names ("transformer.h.0.attn.c_attn.weight", lm_head tied, not stored) and a
GPT2Config config.json, so `GPT2LMHeadModel.from_pretrained(dir)` reads it as is.

Usage:
  scripts/check_hf_export.py CKPT_DIR [--dtrun build/dtrun] [--tokens 32] [--tol 1e-3]

The script feeds one prompt to `dtrun sample --dump-logits` and compares dtrun's
logits with (1) a float64 NumPy GPT-2 forward computed from the safetensors file
(always) and (2) transformers' GPT2LMHeadModel (when torch + transformers are
installed: pip install torch transformers). Not run in CI.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np


def read_safetensors(path):
    """Minimal reader (format: 8-byte little-endian header length, JSON, bytes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[b:e]
        if info["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        elif info["dtype"] == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            raise SystemExit("%s: unsupported dtype %s" % (name, info["dtype"]))
        out[name] = arr.reshape(info["shape"]).astype(np.float64)
    return out


def numpy_logits(w, cfg, idx):
    """GPT-2 forward in float64 (tanh GELU, pre-LayerNorm, tied head)."""
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    p = lambda k: w["transformer." + k]
    T = len(idx)

    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * g + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    x = p("wte.weight")[idx] + p("wpe.weight")[:T]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        h = "h.%d." % l
        a = ln(x, p(h + "ln_1.weight"), p(h + "ln_1.bias"))
        qkv = a @ p(h + "attn.c_attn.weight") + p(h + "attn.c_attn.bias")
        q, k, v = np.split(qkv, 3, axis=-1)
        hs = C // H
        q = q.reshape(T, H, hs).transpose(1, 0, 2)
        k = k.reshape(T, H, hs).transpose(1, 0, 2)
        v = v.reshape(T, H, hs).transpose(1, 0, 2)
        att = q @ k.transpose(0, 2, 1) / np.sqrt(hs) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ p(h + "attn.c_proj.weight") + p(h + "attn.c_proj.bias")
        a = ln(x, p(h + "ln_2.weight"), p(h + "ln_2.bias"))
        f = gelu(a @ p(h + "mlp.c_fc.weight") + p(h + "mlp.c_fc.bias"))
        x = x + f @ p(h + "mlp.c_proj.weight") + p(h + "mlp.c_proj.bias")
    x = ln(x, p("ln_f.weight"), p("ln_f.bias"))
    return x @ p("wte.weight").T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt", help="a dtrun checkpoint directory (ckpt-NNNNNNNN)")
    ap.add_argument("--dtrun", default="build/dtrun", help="the dtrun binary")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--tol", type=float, default=1e-3)
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.ckpt, "config.json")))
    w = read_safetensors(os.path.join(args.ckpt, "model.safetensors"))
    T = min(args.tokens, cfg["n_positions"])
    rng = np.random.default_rng(0)
    prompt = "".join(chr(c) for c in rng.integers(ord("a"), ord("z") + 1, size=T))
    idx = np.frombuffer(prompt.encode(), dtype=np.uint8).astype(np.int64)

    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "logits.f32")
        subprocess.run([args.dtrun, "sample", args.ckpt, "--prompt", prompt, "--tokens", "1",
                        "--dump-logits", dump], check=True, stdout=subprocess.DEVNULL)
        ours = np.fromfile(dump, dtype="<f4").reshape(T, cfg["vocab_size"]).astype(np.float64)
    ref = numpy_logits(w, cfg, idx)
    worst = np.abs(ours - ref).max()
    print("max |dtrun - numpy| logits over %d tokens: %.3g" % (T, worst))
    status = 0 if worst <= args.tol else 1
    try:
        import torch
        from transformers import GPT2LMHeadModel
    except ImportError:
        print("transformers/torch not installed: skipped the GPT2LMHeadModel comparison")
        return status
    model = GPT2LMHeadModel.from_pretrained(args.ckpt, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        hf = model(torch.tensor(idx)[None]).logits[0].double().numpy()
    diff = np.abs(hf - ours).max()
    print("max |transformers - dtrun| logits: %.3g" % diff)
    if not diff <= args.tol:
        status = 1
    print("ok" if status == 0 else "FAIL: exceeds %g" % args.tol)
    return status


if __name__ == "__main__":
    sys.exit(main())
