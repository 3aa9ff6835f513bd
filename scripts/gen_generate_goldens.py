#!/usr/bin/env python3
"""gen_generate_goldens.py — writes the golden files of the engine's generator
(engine/model/dt_generate.h, tests/engine/test_generate.c): what Hugging Face transformers'
own `generate` produces for tiny random models.

Dev-time only: CI has no Python and reads the committed files under
tests/engine/golden/generate/. To regenerate (CPU, seconds):

    /tmp/hfvenv/bin/python scripts/gen_generate_goldens.py [OUT]

Cases (float32, attn_implementation="eager", dropout 0, 2 layers, hidden 64, vocab 128,
64 positions; the llama-family ones are gen_llama_goldens.py's CASES), parameters overwritten as scripts/gen_llama_goldens.py does (init_params:
matrices N(0, 0.125^2), norm weights 1 + 0.1 N(0,1), biases 0.1 N(0,1); torch.manual_seed(SEED
+ case index)) so that the logits are far from ties:
  llama : LlamaForCausalLM, 4 heads, 2 kv heads (GQA), head_dim 16, llama3 RoPE scaling, untied
  qwen2 : Qwen2ForCausalLM, q/k/v biases, tied embeddings
  qwen3 : Qwen3ForCausalLM, 4 heads, 2 kv heads, head_dim 32, q/k norm, untied
  gpt2  : GPT2LMHeadModel, 4 heads, gelu_new, tied
Prompts: N_PROMPTS random token sequences of lengths PROMPT_LENS (same RNG, after the
parameters). Each prompt is generated ALONE (batch 1, so no padding enters transformers'
side) with model.generate(do_sample=False, num_beams=1, max_new_tokens=NEW,
output_logits=True, return_dict_in_generate=True):
  run "free": eos_token_id unset (generation_config.eos_token_id = None): NEW tokens each;
  run "eos" : eos_token_id = the token run "free" produced at step EOS_STEP of prompt 0, so
              at least that prompt stops early (generate keeps the EOS in its output).
Files, per case under OUT/<case>/: config.json, generation_config.json, model.safetensors
(save_pretrained), golden.safetensors:
  "prompts"      I32 [N_PROMPTS, max(PROMPT_LENS)]  prompt i's tokens, -1 after plen[i]
  "plen"         I32 [N_PROMPTS]
  "free.tokens"  I32 [N_PROMPTS, NEW]     run "free"'s new tokens
  "free.logits"  F32 [N_PROMPTS, NEW, V]  its raw logits of each step (output_logits)
  "eos.id"       I32 [1]
  "eos.tokens"   I32 [N_PROMPTS, NEW]     run "eos"'s new tokens, -1 after the EOS
and __metadata__ (case, versions, new).
"""
import json
import os
import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_llama_goldens import CASES as LLAMA_CASES, init_params, save_file, versions  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "..", "tests", "engine", "golden", "generate")
SEED = 20261128
PROMPT_LENS = [5, 9, 3]
N_PROMPTS = len(PROMPT_LENS)
NEW = 12
EOS_STEP = 4

# the llama-family cases of scripts/gen_llama_goldens.py (the same configurations)
CASES = [c for c in LLAMA_CASES if c[0] in ("llama", "qwen3", "qwen2")] + [
    ("gpt2", GPT2Config, GPT2LMHeadModel,
     dict(n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=128, activation_function="gelu_new",
          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5)),
]


def generate(model, prompt, eos):
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = 0
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         do_sample=False, num_beams=1, max_new_tokens=NEW, min_new_tokens=0,
                         output_logits=True, return_dict_in_generate=True)
    new = out.sequences[0, len(prompt):].tolist()
    if eos is not None and eos in new:
        new = new[:new.index(eos) + 1]
    logits = torch.stack([l[0] for l in out.logits])
    return new, logits


def pad(rows, width):
    return torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.int32)


def run_case(index, name, Cfg, Model, kwargs, out):
    torch.manual_seed(SEED + index)
    model = Model(Cfg(**kwargs, attn_implementation="eager")).float().eval()
    init_params(model)
    prompts = [torch.randint(0, 128, (n,)).tolist() for n in PROMPT_LENS]
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    with torch.no_grad():
        free = [generate(model, p, None) for p in prompts]
        eos = free[0][0][EOS_STEP]
        stopped = [generate(model, p, eos)[0] for p in prompts]
    assert all(len(f[0]) == NEW for f in free)
    assert len(stopped[0]) == EOS_STEP + 1 or eos in stopped[0][:EOS_STEP]
    tensors = {
        "prompts": pad(prompts, max(PROMPT_LENS)),
        "plen": torch.tensor(PROMPT_LENS, dtype=torch.int32),
        "free.tokens": pad([f[0] for f in free], NEW),
        "free.logits": torch.stack([f[1] for f in free]).float().contiguous(),
        "eos.id": torch.tensor([eos], dtype=torch.int32),
        "eos.tokens": pad(stopped, NEW),
    }
    save_file(tensors, os.path.join(d, "golden.safetensors"),
              {"case": name, "versions": versions(), "new": str(NEW)})
    print(name, "eos", eos, "lengths", [len(s) for s in stopped])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for i, case in enumerate(CASES):
        run_case(i, *case, out)
    print("wrote", os.path.abspath(out), versions())


if __name__ == "__main__":
    main()
