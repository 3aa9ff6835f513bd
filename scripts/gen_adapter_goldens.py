#!/usr/bin/env python3
"""gen_adapter_goldens.py — PEFT LoRA adapters and their merged models, written by
Hugging Face PEFT + transformers themselves, for the adapter tests (engine/store/adapter.c,
`dtrun merge`; tests/engine/test_adapter.c, tests/engine/test_merge.sh).

Dev-time only: CI has no Python and reads the committed files under
tests/engine/golden/adapter/. To regenerate (CPU, seconds):

    /tmp/hfvenv/bin/python scripts/gen_adapter_goldens.py [OUT]   (default tests/engine/golden/adapter)

Made with torch 2.15.0, transformers 5.24.0, peft 0.21.2 (versions in each case's
versions.json). Cases: three tiny random decoders, float32 (kept tiny so the files stay a
few hundred KB: hidden 16, 2 layers, vocab 64):
  llama : LlamaForCausalLM, 4 heads, 2 kv heads, intermediate 32, untied lm_head; LoRA on
          every linear of the blocks (r 8, alpha 16) and modules_to_save ["lm_head"]
          (PEFT's ModulesToSaveWrapper: the adapter carries a trained copy of lm_head);
  qwen3 : Qwen3ForCausalLM, head_dim 8 (heads x head_dim = 32 != hidden), q/k norms; LoRA on
          every linear, r 8, alpha 16, use_rslora (scale alpha / sqrt(r));
  gpt2  : GPT2LMHeadModel, Conv1D linears (fan_in_fan_out true), LoRA on c_attn, c_proj
          (attention and MLP) and c_fc, r 8, alpha 16;
  llama_bf16 : the llama case with the base in bfloat16 (model.to(torch.bfloat16) before
          get_peft_model; PEFT keeps the LoRA weights fp32, autocast_adapter_dtype=True, and the
          lm_head copy bf16): merge_and_unload adds the fp32 delta to the bf16 weight in fp32 and
          rounds once (torch's in-place bf16 += fp32), the merged model is bf16.
Base weights: torch.manual_seed(SEED + case), every parameter ~ N(0, 0.25^2) (norm weights
1 + 0.1 N). PEFT's init leaves lora_B zero (a merge would change nothing), so every adapter
tensor (and the modules_to_save copy) is overwritten with N(0, 0.25^2) after get_peft_model.
Files per case under OUT/<case>/:
  base/      save_pretrained of the base model (config.json, model.safetensors) + a small
             tokenizer_config.json (a file merge must copy);
  adapter/   PeftModel.save_pretrained (adapter_config.json, adapter_model.safetensors; the
             README.md model card it also writes is dropped);
  merged/    merge_and_unload() + save_pretrained, float32, max_shard_size "20KB" so the output
             is sharded (model.safetensors.index.json + model-0000k-of-0000n.safetensors);
  merged_bf16.safetensors   the merged float32 weights .to(torch.bfloat16) (one rounding),
             one file, the state dict save_pretrained would write;
  logits.safetensors        logits of PeftModel (adapter active) on a fixed batch, what
             scripts/check_adapter_peft.py compares an adapter written by dt_adapter_write against.
"""
import json, os, shutil, sys

import peft, torch, transformers
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file

SEED = 1234
OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/engine/golden/adapter"
BATCH = torch.tensor([[1, 5, 9, 33, 2, 60, 7, 11], [3, 3, 40, 12, 0, 63, 21, 8]])


def tiny(case):
    common = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=32, max_position_embeddings=32,
                  tie_word_embeddings=False, attn_implementation="eager")
    if case in ("llama", "llama_bf16"):
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common)), \
            dict(target_modules="all-linear", modules_to_save=["lm_head"])
    if case == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=8, **common)), \
            dict(target_modules="all-linear", use_rslora=True)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=4,
                                  attn_implementation="eager")
    return transformers.GPT2LMHeadModel(cfg), \
        dict(target_modules=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True)


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.1 * r if ("norm" in name or "ln_" in name) and p.ndim == 1 and name.endswith("weight")
                    else 0.25 * r)


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    for k, case in enumerate(["llama", "qwen3", "gpt2", "llama_bf16"]):
        d = os.path.join(OUT, case)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        model, extra = tiny(case)
        randomize(model, SEED + k)
        if case == "llama_bf16":
            model = model.to(torch.bfloat16)
        model.eval()
        model.save_pretrained(os.path.join(d, "base"))
        with open(os.path.join(d, "base", "tokenizer_config.json"), "w") as f:
            json.dump({"model_max_length": 32, "tokenizer_class": "PreTrainedTokenizerFast"}, f)
        lcfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                          base_model_name_or_path=None, **extra)
        pm = get_peft_model(model, lcfg)
        g = torch.Generator().manual_seed(SEED + 100 + k)
        with torch.no_grad():
            for name, p in pm.named_parameters():
                if "lora_" in name or "modules_to_save" in name:
                    p.copy_(0.25 * torch.randn(p.shape, generator=g))
        pm.eval()
        with torch.no_grad():
            logits = pm(input_ids=BATCH).logits.float().contiguous()
        save_file({"input_ids": BATCH.to(torch.int32).contiguous(), "logits": logits},
                  os.path.join(d, "logits.safetensors"))
        pm.save_pretrained(os.path.join(d, "adapter"))
        os.remove(os.path.join(d, "adapter", "README.md"))   # PEFT's model card: not read by anyone
        # PEFT writes "all-linear"'s target_modules from a set (its order varies run to run): sorted,
        # in PEFT's own layout (json.dumps(indent=2, sort_keys=True)), so the goldens are reproducible
        cpath = os.path.join(d, "adapter", "adapter_config.json")
        with open(cpath) as f:
            cfg = json.load(f)
        if isinstance(cfg.get("target_modules"), list):
            cfg["target_modules"] = sorted(cfg["target_modules"])
        with open(cpath, "w") as f:
            f.write(json.dumps(cfg, indent=2, sort_keys=True))
        merged = pm.merge_and_unload()
        merged.save_pretrained(os.path.join(d, "merged"), max_shard_size="20KB")
        sd = {n: t.detach().to(torch.bfloat16).contiguous() for n, t in merged.state_dict().items()
              if not (case == "gpt2" and n == "lm_head.weight")}
        save_file(sd, os.path.join(d, "merged_bf16.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(d, "versions.json"), "w") as f:
            json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                       "peft": peft.__version__, "seed": SEED + k}, f, indent=1)
        print(case, "written to", d)


if __name__ == "__main__":
    main()
