#!/usr/bin/env python3
"""Dev-time generator of the 4-bit quantisation goldens (tests/kernels/golden/quant4.txt).

bitsandbytes (CPU back-end) quantises a few weights to NF4 / FP4 the way QLoRA loads
them (bitsandbytes.functional.quantize_4bit, blocksize 64, compress_statistics = double
quantisation of the absmax in blocks of 256) and dequantises them back; the C
implementation (engine/device/quant4.c) must produce the same bytes and values
(tests/kernels/test_quant4.c). CI reads the committed file; Python is never needed there.

The inputs are generated from an integer LCG the C test repeats exactly: each value is a
24-bit integer times a power of two, so both sides hold the same float32 bits before
bitsandbytes casts them to the case's dtype (round to nearest even, as dt_f32_to_bf16 /
dt_f32_to_fp16).

Run: /tmp/hfvenv/bin/python scripts/gen_quant_goldens.py  (writes the golden file)
"""
import os
import sys

import torch
import bitsandbytes
import bitsandbytes.functional as F

from golden_text import write_lines

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "kernels", "golden", "quant4.txt")

# (name, quant_type, dtype, rows, cols, blocksize, double_quant, seed, scale_log2, zero_first_block)
CASES = [
    ("nf4_fp32_dq", "nf4", "fp32", 64, 100, 64, True, 1, -5, False),
    ("nf4_bf16_dq_partial", "nf4", "bf16", 130, 131, 64, True, 2, -6, False),
    ("fp4_fp32_odd", "fp4", "fp32", 33, 65, 64, False, 3, -4, False),
    ("nf4_fp16_dq_nested2", "nf4", "fp16", 64, 257, 64, True, 4, -5, False),
    ("nf4_fp32_block128", "nf4", "fp32", 50, 70, 128, False, 5, -3, False),
    ("fp4_bf16_dq", "fp4", "bf16", 48, 100, 64, True, 6, -5, False),
    ("nf4_fp32_dq_zero_block", "nf4", "fp32", 64, 64, 64, True, 7, -5, True),
]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LCG_A = 6364136223846793005  # Knuth's MMIX multiplier
LCG_C = 1442695040888963407
MASK64 = (1 << 64) - 1
OUTLIER_EVERY = 97   # every 97th value is 8x larger: the heavy tail real weights have
OUTLIER_SCALE = 8
DEQUANT_SHOWN = 256  # dequantised values written out; all of them enter the FNV-1a hash
FNV_OFFSET = 0xCBF29CE484222325  # FNV-1a 64-bit (Fowler, Noll, Vo)
FNV_PRIME = 0x100000001B3


def inputs(n, seed, scale_log2, zero_first_block, blocksize):
    """n float32 values: (top 24 bits of the LCG state - 2^23) * 2^(scale_log2 - 23)."""
    s = seed & MASK64
    vals = []
    for i in range(n):
        s = (s * LCG_A + LCG_C) & MASK64
        v = (s >> 40) - (1 << 23)
        if i % OUTLIER_EVERY == OUTLIER_EVERY - 1:
            v *= OUTLIER_SCALE
        vals.append(v)
    t = torch.tensor(vals, dtype=torch.float64) * (2.0 ** (scale_log2 - 23))
    t = t.to(torch.float32)
    if zero_first_block:
        t[:blocksize] = 0
    return t


def bits(t):
    """Hex words of a tensor's raw bits (fp32: 8 digits, 16-bit: 4 digits, uint8: 2)."""
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.float32:
        return " ".join("%08x" % (x & 0xFFFFFFFF) for x in t.view(torch.int32).tolist())
    if t.dtype in (torch.bfloat16, torch.float16):
        return " ".join("%04x" % (x & 0xFFFF) for x in t.view(torch.int16).tolist())
    return " ".join("%02x" % x for x in t.view(torch.uint8).tolist())


def fnv1a(t):
    """FNV-1a 64 over the tensor's raw bytes (little-endian, as the C test reads them)."""
    h = FNV_OFFSET
    for b in t.contiguous().reshape(-1).view(torch.uint8).tolist():
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return "%016x" % h


def main():
    # torch.mean (the double quantisation's offset) splits a reduction over threads beyond
    # 32768 elements; one thread makes the goldens independent of the machine's cores
    torch.set_num_threads(1)
    lines = ["# 4-bit quantisation goldens: bitsandbytes %s, torch %s (CPU); scripts/gen_quant_goldens.py"
             % (bitsandbytes.__version__, torch.__version__)]
    for (name, qt, dt, rows, cols, bs, dq, seed, sl, zero) in CASES:
        x = inputs(rows * cols, seed, sl, zero, bs).reshape(rows, cols).to(DTYPES[dt])
        packed, st = F.quantize_4bit(x, blocksize=bs, compress_statistics=dq, quant_type=qt)
        back = F.dequantize_4bit(packed, st)
        assert back.dtype == x.dtype and back.shape == x.shape
        lines.append("case %s %s %s %d %d %d %d %d %d %d" % (name, qt, dt, rows, cols, bs, int(dq), seed, sl, int(zero)))
        lines.append("code " + bits(st.code))
        lines.append("packed " + bits(packed))
        lines.append("absmax " + bits(st.absmax))
        if dq:
            lines.append("offset " + bits(st.offset.reshape(1).to(torch.float32)))
            lines.append("nested_absmax " + bits(st.state2.absmax))
            lines.append("nested_code " + bits(st.state2.code))
        lines.append("dequant_head " + bits(back.reshape(-1)[:DEQUANT_SHOWN]))
        lines.append("dequant_fnv1a " + fnv1a(back))
    write_lines(OUT, lines)
    print("wrote %s (%d cases)" % (OUT, len(CASES)), file=sys.stderr)


if __name__ == "__main__":
    main()
