#!/usr/bin/env python3
"""gen_golden.py — writes the golden file the engine's tests compare against.

A tiny GPT-2 (LayerNorm, causal self-attention, tanh-GELU MLP, learned
positions, tied embeddings, mean cross-entropy) is run in float64 NumPy:
forward, hand-written backward, and three AdamW steps on the same batch. The
backward is itself checked against central finite differences (float64)
before anything is written, so the reference does not merely repeat the
engine's own derivation. Needs NumPy at development time only; the tests read
the committed binary file (CI has no Python).

Usage: python3 scripts/gen_golden.py [OUT]   (default tests/kernels/golden/gpt2_golden.bin)

File format (little-endian; f32 = IEEE float32, i32 = int32):
  char[8]  magic "DTGOLD01"
  i32[10]  n_layer L, hidden C, n_head H, vocab V, max_pos maxT, ffn F,
           batch B, seq T, adam_steps S, n_params P
  f32[6]   layer_norm_eps, lr, beta1, beta2, adam_eps, weight_decay
  i32[B*T] inputs                    (row-major [B, T])
  i32[B*T] targets
  f32[P]   params                    (dt_lm flat layout, see below)
  f32[B*T*V] logits                  (of the initial params)
  f32      loss                      (mean cross-entropy, initial params)
  f32[P]   grads                     (d loss / d params, initial params, scale 1)
  f32[S]   step_losses               (loss before each AdamW step)
  f32[P]   params_after              (after S AdamW steps)

Parameter layout (dt_lm.h): wte [V, C], wpe [maxT, C]; then for each block l:
ln_1.weight [C], ln_1.bias [C], attn.c_attn.weight [C, 3C], attn.c_attn.bias [3C],
attn.c_proj.weight [C, C], attn.c_proj.bias [C], ln_2.weight [C], ln_2.bias [C],
mlp.c_fc.weight [C, F], mlp.c_fc.bias [F], mlp.c_proj.weight [F, C],
mlp.c_proj.bias [C]; then ln_f.weight [C], ln_f.bias [C]. Weights are [in, out]
(Hugging Face Conv1D).

AdamW (Loshchilov & Hutter 2019, as torch.optim.AdamW): for each step t = 1..S,
with g the gradient of the mean loss at the current params on the same batch:
  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
  p = p - lr * wd * p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
Weight decay applies to every tensor; no gradient clipping; constant lr.
"""
import struct
import sys

import numpy as np

L, C, H, V, MAXT = 2, 32, 4, 256, 64
F = 4 * C
B, T = 2, 16
STEPS = 3
LN_EPS = 1e-5
LR, BETA1, BETA2, ADAM_EPS, WD = 1e-2, 0.9, 0.95, 1e-8, 0.1
SEED = 20240601
GELU_S = np.sqrt(2.0 / np.pi)
GELU_C = 0.044715

BLOCK = [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)),
         ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)),
         ("attn.c_proj.bias", (C,)), ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
         ("mlp.c_fc.weight", (C, F)), ("mlp.c_fc.bias", (F,)),
         ("mlp.c_proj.weight", (F, C)), ("mlp.c_proj.bias", (C,))]


def layout():
    specs = [("wte.weight", (V, C)), ("wpe.weight", (MAXT, C))]
    for l in range(L):
        specs += [("h.%d.%s" % (l, n), s) for n, s in BLOCK]
    specs += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return specs


def unflatten(flat):
    out, off = {}, 0
    for name, shape in layout():
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].reshape(shape)
        off += n
    return out


def flatten(d):
    return np.concatenate([d[name].reshape(-1) for name, _ in layout()])


def ln_fwd(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + LN_EPS)
    xhat = (x - mean) * rstd
    return xhat * w + b, (xhat, rstd)


def ln_bwd(dout, cache, w):
    xhat, rstd = cache
    dw = (dout * xhat).reshape(-1, xhat.shape[-1]).sum(0)
    db = dout.reshape(-1, xhat.shape[-1]).sum(0)
    dxhat = dout * w
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, dw, db


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(GELU_S * (x + GELU_C * x ** 3)))


def gelu_grad(x):
    t = np.tanh(GELU_S * (x + GELU_C * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_S * (1.0 + 3.0 * GELU_C * x * x)


def forward(p, idx, tgt):
    hs = C // H
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    caches = []
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    for l in range(L):
        q = lambda n: p["h.%d.%s" % (l, n)]
        ln1, c1 = ln_fwd(x, q("ln_1.weight"), q("ln_1.bias"))
        qkv = ln1 @ q("attn.c_attn.weight") + q("attn.c_attn.bias")
        qh, kh, vh = [qkv[..., i * C:(i + 1) * C].reshape(B, T, H, hs).transpose(0, 2, 1, 3)
                      for i in range(3)]
        s = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(hs)
        s = np.where(mask, -np.inf, s)
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        y = (pr @ vh).transpose(0, 2, 1, 3).reshape(B, T, C)
        x1 = x + y @ q("attn.c_proj.weight") + q("attn.c_proj.bias")
        ln2, c2 = ln_fwd(x1, q("ln_2.weight"), q("ln_2.bias"))
        hpre = ln2 @ q("mlp.c_fc.weight") + q("mlp.c_fc.bias")
        hg = gelu(hpre)
        xo = x1 + hg @ q("mlp.c_proj.weight") + q("mlp.c_proj.bias")
        caches.append((x, ln1, c1, qh, kh, vh, pr, y, x1, ln2, c2, hpre, hg))
        x = xo
    lnf, cf = ln_fwd(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = lnf @ p["wte.weight"].T
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    loss = -np.take_along_axis(logp, tgt[..., None], -1).mean()
    return logits, loss, (caches, x, lnf, cf, logp)


def backward(p, idx, tgt, cache):
    caches, xL, lnf, cf, logp = cache
    hs = C // H
    g = {name: np.zeros(shape) for name, shape in layout()}
    dlogits = np.exp(logp)
    np.put_along_axis(dlogits, tgt[..., None], np.take_along_axis(dlogits, tgt[..., None], -1) - 1, -1)
    dlogits /= B * T
    g["wte.weight"] += dlogits.reshape(-1, V).T @ lnf.reshape(-1, C)
    dlnf = dlogits @ p["wte.weight"]
    dx, g["ln_f.weight"], g["ln_f.bias"] = ln_bwd(dlnf, cf, p["ln_f.weight"])
    for l in reversed(range(L)):
        q = lambda n: p["h.%d.%s" % (l, n)]
        key = lambda n: "h.%d.%s" % (l, n)
        x, ln1, c1, qh, kh, vh, pr, y, x1, ln2, c2, hpre, hg = caches[l]
        g[key("mlp.c_proj.weight")] = hg.reshape(-1, F).T @ dx.reshape(-1, C)
        g[key("mlp.c_proj.bias")] = dx.reshape(-1, C).sum(0)
        dhg = dx @ q("mlp.c_proj.weight").T
        dhpre = dhg * gelu_grad(hpre)
        g[key("mlp.c_fc.weight")] = ln2.reshape(-1, C).T @ dhpre.reshape(-1, F)
        g[key("mlp.c_fc.bias")] = dhpre.reshape(-1, F).sum(0)
        dln2 = dhpre @ q("mlp.c_fc.weight").T
        dx1, g[key("ln_2.weight")], g[key("ln_2.bias")] = ln_bwd(dln2, c2, q("ln_2.weight"))
        dx1 = dx1 + dx
        g[key("attn.c_proj.weight")] = y.reshape(-1, C).T @ dx1.reshape(-1, C)
        g[key("attn.c_proj.bias")] = dx1.reshape(-1, C).sum(0)
        dy = (dx1 @ q("attn.c_proj.weight").T).reshape(B, T, H, hs).transpose(0, 2, 1, 3)
        dpr = dy @ vh.transpose(0, 1, 3, 2)
        dvh = pr.transpose(0, 1, 3, 2) @ dy
        ds = pr * (dpr - (dpr * pr).sum(-1, keepdims=True)) / np.sqrt(hs)
        dqh = ds @ kh
        dkh = ds.transpose(0, 1, 3, 2) @ qh
        dqkv = np.concatenate([d.transpose(0, 2, 1, 3).reshape(B, T, C) for d in (dqh, dkh, dvh)], -1)
        g[key("attn.c_attn.weight")] = ln1.reshape(-1, C).T @ dqkv.reshape(-1, 3 * C)
        g[key("attn.c_attn.bias")] = dqkv.reshape(-1, 3 * C).sum(0)
        dln1 = dqkv @ q("attn.c_attn.weight").T
        dxx, g[key("ln_1.weight")], g[key("ln_1.bias")] = ln_bwd(dln1, c1, q("ln_1.weight"))
        dx = dxx + dx1
    np.add.at(g["wte.weight"], idx.reshape(-1), dx.reshape(-1, C))
    g["wpe.weight"][:T] += dx.sum(0)
    return g


def check_with_finite_differences(flat, idx, tgt, rng):
    """Central differences (float64) on 40 random coordinates of every tensor kind."""
    p = unflatten(flat.copy())
    _, _, cache = forward(p, idx, tgt)
    ana = flatten(backward(p, idx, tgt, cache))
    h = 1e-6
    off, worst = 0, 0.0
    for name, shape in layout():
        n = int(np.prod(shape))
        for i in rng.choice(n, size=min(n, 40 if name.startswith("h.0") else 8), replace=False):
            k = off + i
            if name == "wpe.weight" and i >= T * C:
                continue
            fp, fm = flat.copy(), flat.copy()
            fp[k] += h
            fm[k] -= h
            num = (forward(unflatten(fp), idx, tgt)[1] - forward(unflatten(fm), idx, tgt)[1]) / (2 * h)
            err = abs(num - ana[k]) / max(abs(num), 1e-4)
            worst = max(worst, err)
            if err > 1e-4:
                raise SystemExit("gen_golden: reference gradient of %s[%d] = %.9g, finite "
                                 "difference %.9g" % (name, i, ana[k], num))
        off += n
    print("reference backward vs finite differences: worst relative error %.2e" % worst)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/kernels/golden/gpt2_golden.bin"
    rng = np.random.default_rng(SEED)
    init = {}
    for name, shape in layout():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            init[name] = 1.0 + 0.1 * rng.standard_normal(shape)   # not 1, so d/dw is visible
        elif name.endswith(".bias"):
            init[name] = 0.02 * rng.standard_normal(shape)         # not 0, likewise
        else:
            init[name] = 0.02 * rng.standard_normal(shape)
    # everything the engine sees is float32: round first, compute in float64 after
    flat = flatten(init).astype(np.float32).astype(np.float64)
    idx = rng.integers(0, V, size=(B, T)).astype(np.int64)
    tgt = rng.integers(0, V, size=(B, T)).astype(np.int64)

    check_with_finite_differences(flat, idx, tgt, rng)

    p = unflatten(flat.copy())
    logits, loss, cache = forward(p, idx, tgt)
    grads = flatten(backward(p, idx, tgt, cache))

    cur, m, v, step_losses = flat.copy(), np.zeros_like(flat), np.zeros_like(flat), []
    for t in range(1, STEPS + 1):
        pc = unflatten(cur.copy())
        _, lt, ct = forward(pc, idx, tgt)
        gt = flatten(backward(pc, idx, tgt, ct))
        step_losses.append(lt)
        m = BETA1 * m + (1 - BETA1) * gt
        v = BETA2 * v + (1 - BETA2) * gt * gt
        mhat, vhat = m / (1 - BETA1 ** t), v / (1 - BETA2 ** t)
        cur = cur - LR * WD * cur - LR * mhat / (np.sqrt(vhat) + ADAM_EPS)

    f32 = lambda a: np.asarray(a, dtype="<f4").tobytes()
    i32 = lambda a: np.asarray(a, dtype="<i4").tobytes()
    with open(out, "wb") as f:
        f.write(b"DTGOLD01")
        f.write(struct.pack("<10i", L, C, H, V, MAXT, F, B, T, STEPS, flat.size))
        f.write(struct.pack("<6f", LN_EPS, LR, BETA1, BETA2, ADAM_EPS, WD))
        f.write(i32(idx.reshape(-1)))
        f.write(i32(tgt.reshape(-1)))
        f.write(f32(flat))
        f.write(f32(logits.reshape(-1)))
        f.write(f32([loss]))
        f.write(f32(grads))
        f.write(f32(step_losses))
        f.write(f32(cur))
    print("wrote %s: %d params, loss %.6f, step losses %s" %
          (out, flat.size, loss, " ".join("%.6f" % x for x in step_losses)))


if __name__ == "__main__":
    main()
