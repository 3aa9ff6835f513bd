#!/usr/bin/env python3
"""check_golden_torch.py — dev-time cross-check of the committed golden file
(tests/kernels/golden/gpt2_golden.bin, written by gen_golden.py in float64 NumPy
with a hand-written backward) against PyTorch: transformers' GPT2LMHeadModel
forward, torch autograd gradients and torch.optim.AdamW, all in float64.

So the engine's golden reference is checked by an implementation that shares
nothing with it. Needs torch + transformers (pip) at development time only; CI
never runs it.

Usage: python3 scripts/check_golden_torch.py [GOLDEN]
"""
import struct
import sys

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

BLOCK = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
         "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
         "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]


def read_golden(path):
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:8] == b"DTGOLD01", "not a golden file"
    off = 8
    L, C, H, V, maxT, F, B, T, S, P = struct.unpack_from("<10i", buf, off)
    off += 40
    eps, lr, b1, b2, aeps, wd = struct.unpack_from("<6f", buf, off)
    off += 24

    def take(n, dt):
        nonlocal off
        a = np.frombuffer(buf, dtype=dt, count=n, offset=off)
        off += a.nbytes
        return a

    g = dict(L=L, C=C, H=H, V=V, maxT=maxT, F=F, B=B, T=T, S=S, P=P, eps=eps, lr=lr, b1=b1, b2=b2,
             aeps=aeps, wd=wd)
    g["inputs"] = take(B * T, "<i4").reshape(B, T)
    g["targets"] = take(B * T, "<i4").reshape(B, T)
    g["params"] = take(P, "<f4")
    g["logits"] = take(B * T * V, "<f4").reshape(B, T, V)
    g["loss"] = take(1, "<f4")[0]
    g["grads"] = take(P, "<f4")
    g["step_losses"] = take(S, "<f4")
    g["params_after"] = take(P, "<f4")
    assert off == len(buf), "trailing bytes in golden file"
    return g


def layout(g):
    """(hf name, shape) in the flat order of dt_lm.h."""
    C, F = g["C"], g["F"]
    shapes = {"ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C),
              "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,),
              "ln_2.weight": (C,), "ln_2.bias": (C,), "mlp.c_fc.weight": (C, F), "mlp.c_fc.bias": (F,),
              "mlp.c_proj.weight": (F, C), "mlp.c_proj.bias": (C,)}
    out = [("transformer.wte.weight", (g["V"], C)), ("transformer.wpe.weight", (g["maxT"], C))]
    for l in range(g["L"]):
        out += [(f"transformer.h.{l}.{n}", shapes[n]) for n in BLOCK]
    out += [("transformer.ln_f.weight", (C,)), ("transformer.ln_f.bias", (C,))]
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/kernels/golden/gpt2_golden.bin"
    g = read_golden(path)
    cfg = GPT2Config(vocab_size=g["V"], n_positions=g["maxT"], n_embd=g["C"], n_layer=g["L"], n_head=g["H"],
                     n_inner=g["F"], layer_norm_epsilon=float(g["eps"]), activation_function="gelu_new",
                     attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0, tie_word_embeddings=True,
                     bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(cfg).double().eval()
    named = dict(model.named_parameters())
    lay = layout(g)
    assert sum(int(np.prod(s)) for _, s in lay) == g["P"], "layout does not cover the flat buffer"

    def load(flat):
        off = 0
        with torch.no_grad():
            for name, shape in lay:
                n = int(np.prod(shape))
                named[name].copy_(torch.from_numpy(flat[off:off + n].astype(np.float64).reshape(shape)))
                off += n

    def flat_grads():
        return np.concatenate([named[n].grad.detach().numpy().ravel() for n, _ in lay])

    def loss_of(out):
        logits = out.logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, g["V"]),
                                                 torch.from_numpy(g["targets"].astype(np.int64)).reshape(-1))

    load(g["params"])
    ids = torch.from_numpy(g["inputs"].astype(np.int64))
    out = model(ids)
    loss = loss_of(out)
    loss.backward()
    worst = {}
    worst["logits"] = np.max(np.abs(out.logits.detach().numpy() - g["logits"]))
    worst["loss"] = abs(loss.item() - g["loss"])
    gr = flat_grads()
    worst["grads (rel to max |g|)"] = np.max(np.abs(gr - g["grads"])) / np.max(np.abs(g["grads"]))

    opt = torch.optim.AdamW([named[n] for n, _ in lay], lr=float(g["lr"]), betas=(float(g["b1"]), float(g["b2"])),
                            eps=float(g["aeps"]), weight_decay=float(g["wd"]))
    load(g["params"])
    step_losses = []
    for _ in range(g["S"]):
        opt.zero_grad()
        l = loss_of(model(ids))
        step_losses.append(l.item())
        l.backward()
        opt.step()
    after = np.concatenate([named[n].detach().numpy().ravel() for n, _ in lay])
    worst["step losses"] = np.max(np.abs(np.array(step_losses) - g["step_losses"]))
    worst["params after AdamW (rel to lr)"] = np.max(np.abs(after - g["params_after"])) / g["lr"]

    # float32 storage of the golden values bounds the agreement (~1e-7 relative)
    limits = {"logits": 1e-5, "loss": 1e-6, "grads (rel to max |g|)": 1e-5, "step losses": 1e-5,
              "params after AdamW (rel to lr)": 1e-3}
    ok = True
    for k, v in worst.items():
        flag = "ok" if v <= limits[k] else "FAIL"
        ok &= v <= limits[k]
        print(f"{k:34s} max diff {v:.3e}  (limit {limits[k]:.0e})  {flag}")
    print("golden file agrees with PyTorch/transformers" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
