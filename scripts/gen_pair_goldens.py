#!/usr/bin/env python3
"""Goldens for preference pairs (engine/data/prepare_pair.c, tests/data/test_pairs.c).

tests/data/pairs.jsonl's records are tokenized by TRL 1.16's own DPOTrainer._prepare_dataset
(called unbound on a stand-in `self`: extract_prompt, add_eos, tokenize_fn with its common-prefix
rule) and batched by its DataCollatorForPreference (chosen rows, then rejected rows; max_length
with truncation_mode "keep_start"), with transformers' fast tokenizer on
tests/tokenizer/data/qwen2-mini.json and the ChatML template prepare_doc.c writes out (Qwen2's
without its default system message). LLaMA-Factory's ranking records are first converted as its
AlpacaDatasetConverter / SharegptDatasetConverter do (llamafactory/data/converter.py):
alpaca: [system], history turns, user "instruction\\ninput", chosen / rejected as one assistant
message each; sharegpt: human -> user, gpt -> assistant, system first.
Output: tests/data/pairs-chatml.golden, per batch "CASE max_len T npairs", then the input_ids and
the completion_mask of each of its 2 x npairs rows, one row per line.
usage: /tmp/hfvenv/bin/python scripts/gen_pair_goldens.py REPO_ROOT"""
import json
import os
import sys
from types import SimpleNamespace as NS

import datasets
from transformers import PreTrainedTokenizerFast
from trl.trainer.dpo_trainer import DataCollatorForPreference, DPOTrainer

root = sys.argv[1]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(root, "tests/tokenizer/data/qwen2-mini.json"),
                              eos_token="<|endoftext|>", pad_token="<|endoftext|>")
tok.chat_template = CHATML


def to_trl(rec):
    if "instruction" in rec:  # LLaMA-Factory alpaca, ranking
        p = [{"role": "system", "content": rec["system"]}] if rec.get("system") else []
        for q, a in rec.get("history", []):
            p += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        q = "\n".join(x for x in [rec["instruction"], rec.get("input", "")] if x)
        p.append({"role": "user", "content": q})
        return {"prompt": p, "chosen": [{"role": "assistant", "content": rec["chosen"]}],
                "rejected": [{"role": "assistant", "content": rec["rejected"]}]}
    if "conversations" in rec:  # LLaMA-Factory sharegpt, ranking
        roles = {"human": "user", "gpt": "assistant", "system": "system"}
        p = [{"role": "system", "content": rec["system"]}] if rec.get("system") else []
        p += [{"role": roles[m["from"]], "content": m["value"]} for m in rec["conversations"]]
        return {"prompt": p, "chosen": [{"role": "assistant", "content": rec["chosen"]["value"]}],
                "rejected": [{"role": "assistant", "content": rec["rejected"]["value"]}]}
    return rec


def trl_tokenize(rec):
    fake = NS(_tokenizer=tok)
    args = NS(dataset_num_proc=None, max_length=None, truncation_mode="keep_start")
    ds = DPOTrainer._prepare_dataset(fake, datasets.Dataset.from_list([to_trl(rec)]), tok, args, "golden")
    return ds[0]


records = [json.loads(l) for l in open(os.path.join(root, "tests/data/pairs.jsonl"))]
examples = [trl_tokenize(r) for r in records]
out = ["# preference pairs: TRL DPOTrainer._prepare_dataset + DataCollatorForPreference, qwen2-mini, ChatML; "
       "scripts/gen_pair_goldens.py"]


def batch(case, idx, max_len):
    coll = DataCollatorForPreference(pad_token_id=tok.pad_token_id, max_length=max_len, truncation_mode="keep_start")
    b = coll.torch_call([{k: examples[i][k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")} for i in idx])
    ids, cm = b["input_ids"], b["completion_mask"]
    out.append("%s %d %d %d %s" % (case, max_len or 0, ids.shape[1], len(idx), " ".join(map(str, idx))))
    for r in range(ids.shape[0]):
        out.append(" ".join(map(str, ids[r].tolist())))
        out.append(" ".join(map(str, cm[r].tolist())))


batch("all", list(range(len(records))), None)
# keep_start truncation at 30 tokens, for the records whose prompt is shorter (TRL drops the others)
short = [i for i, e in enumerate(examples) if len(e["prompt_ids"]) < 30]
batch("trunc30", short, 30)
with open(os.path.join(root, "tests/data/pairs-chatml.golden"), "w") as f:
    f.write("\n".join(out) + "\n")
print("prompt lengths", [len(e["prompt_ids"]) for e in examples], "short", short)
