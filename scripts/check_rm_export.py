#!/usr/bin/env python3
"""check_rm_export.py — a reward model dtrun trained, read back by transformers (dev time; CI has
no Python): loads a checkpoint directory of an rm run with AutoModelForSequenceClassification
(the config.json dtrun wrote: *ForSequenceClassification, one label, pad_token_id), scores the
held-out pairs of a pair shard in micro-batches as dtrun's evaluation does (right-padded with the
shard's pad id, attention_mask on the real tokens), and prints RewardTrainer's eval_loss and
eval_accuracy, which must equal the last "eval_loss" / "eval_accuracy" of the run's metrics.jsonl
(checked in docs/objectives.md: 0.0280967981 vs 0.0280967979 on a tiny Qwen3).

A LoRA rm run (its adapter: task_type SEQ_CLS, the score head in modules_to_save): with --peft
BASE_DIR, DIR is the adapter directory (CKPT/adapter) and the model is
PeftModel.from_pretrained(AutoModelForSequenceClassification(BASE_DIR, num_labels=1,
pad_token_id=the shard's pad), DIR), as TRL + PEFT load a reward adapter; any missing or unexpected
key fails. `dtrun merge --base BASE_DIR --adapter CKPT/adapter -o M` gives a directory this script
reads without --peft (its config keeps the base's pad_token_id: dtrun's rm data pads with the
shard's pad id, given here to the model). Both must print the run's last eval_loss.

usage: /tmp/hfvenv/bin/python scripts/check_rm_export.py DIR VAL_SHARD SEQ_LEN MICRO_BATCH [--peft BASE_DIR]"""
import warnings
import struct
import sys

import torch
from transformers import AutoModelForSequenceClassification

HEADER = 1024   # engine/data/dt_pairshard.h
INDEX = 24      # bytes per pair
ck, shard, T, B = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
peft_base = sys.argv[6] if len(sys.argv) > 6 and sys.argv[5] == "--peft" else None
b = open(shard, "rb").read()
npairs = struct.unpack_from("<Q", b, 32)[0]; pad = struct.unpack_from("<I", b, 56)[0]
kw = dict(torch_dtype=torch.float32, attn_implementation="eager", pad_token_id=pad)
if peft_base:
    from peft import PeftModel
    base = AutoModelForSequenceClassification.from_pretrained(peft_base, num_labels=1, **kw)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m = PeftModel.from_pretrained(base, ck).eval()
    bad = [str(x.message) for x in w if "key" in str(x.message).lower()]
    if bad: sys.exit(f"PeftModel.from_pretrained warned: {bad}")
else:
    m = AutoModelForSequenceClassification.from_pretrained(ck, **kw).eval()
idx = HEADER; tok = HEADER + INDEX * npairs
pairs = []
for i in range(npairs):
    line, inp, pn, nc, nr = struct.unpack_from("<QIIII", b, idx + INDEX * i)
    c = list(struct.unpack_from(f"<{nc}I", b, tok)); tok += 4 * nc
    r = list(struct.unpack_from(f"<{nr}I", b, tok)); tok += 4 * nr
    pairs.append((c, r))

def score(seqs):
    ids = torch.full((len(seqs), T), pad); att = torch.zeros(len(seqs), T, dtype=torch.long)
    for k, s in enumerate(seqs): ids[k, :len(s)] = torch.tensor(s); att[k, :len(s)] = 1
    with torch.no_grad(): return m(input_ids=ids, attention_mask=att).logits.squeeze(-1)
losses = []; acc = []
for s in range(0, npairs - npairs % B, B):
    bt = pairs[s:s + B]
    rc, rr = score([p[0] for p in bt]), score([p[1] for p in bt])
    losses.append(-torch.nn.functional.logsigmoid(rc - rr).mean().item()); acc.append((rc > rr).float().mean().item())
print("PEFT on the adapter:" if peft_base else "transformers on the exported dir:", "eval_loss", sum(losses) / len(losses), "eval_accuracy", sum(acc) / len(acc))
