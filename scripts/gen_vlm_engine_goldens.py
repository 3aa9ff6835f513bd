#!/usr/bin/env python3
"""gen_vlm_engine_goldens.py — the golden files of dtrun's LLaVA engine
(tests/engine/test_vlm_golden.c), computed by Hugging Face transformers' own
LlavaForConditionalGeneration.

Dev-time only: CI has no Python and reads the committed files under
tests/engine/golden/vlm/. To regenerate (CPU, seconds):

    /tmp/hfvenv/bin/python scripts/gen_vlm_engine_goldens.py [OUT]   (default tests/engine/golden/vlm)

(torch, transformers 5.x, safetensors; the versions are in each file's metadata.)

Models: a tiny random LlavaConfig per case, float32, attn_implementation="eager":
CLIP vision tower (image 32 px, patch 8: 16 patches + the class token; hidden 32, 4 heads,
ffn 64, 3 blocks, quick_gelu, LayerNorm eps 1e-5), vision_feature_layer -2 (the output of
block 2 of 3: block 3 never reaches the loss), vision_feature_select_strategy "default" (the
class token dropped: 16 image tokens per image), the projector linear_1 -> GELU (erf) ->
linear_2 with biases, and a text model: "llama" (Llama, GQA 4 / 2 heads, untied lm_head) or
"qwen2" (Qwen2: q/k/v biases). image_token_id = V - 1. Weights: transformers' own init under
torch.manual_seed(SEED + case index), then every projector and LayerNorm bias and LayerNorm
weight perturbed by N(0, 0.1^2) (the init's zeros / ones would hide a transposed or missing
term).

Each case directory holds config.json (the LlavaConfig), hf/ (the whole model as
LlavaForConditionalGeneration.save_pretrained writes it, sharded at SHARD: the directory
`--init` takes), text/ (the language model and lm_head as LlamaForCausalLM / Qwen2ForCausalLM
save_pretrained: what dtrun's text reader loads, a cross-check of hf/'s names) and
golden.safetensors with:
  vision.<name>   the tower's tensors, Hugging Face's names without "model.vision_tower."
  proj.<name>     the projector's, without "model.multi_modal_projector." (linear_1.weight, ...)
  pixels F32 [STEPS, ACCUM, B, 3, 32, 32]   N(0, 1) pixel values (the processor's output range)
  inputs I32 [STEPS, ACCUM, B, T]  PREFIX text tokens, the 16 image tokens, text to T
  targets I32 [STEPS, ACCUM, B, T] inputs shifted left by one; -100 where the next token is an
                                   image token and at the last position (LLaVA's labels)
  features F32 [B, 16, 32]         the tower's selected features of micro-batch (0, 0)
  <stage>.logits F32 [B, T, V], <stage>.loss F32 [1]: micro-batch (0, 0)
  <stage>.grad.proj.<name>, <stage>.grad.text.<name>: gradients of what the stage trains
                                   (text.<name>: the language model's names as in text/)
  mixed.inputs, mixed.targets I32 [B, T]: micro-batch (0, 0) with sequence 1 text-only (its
                                   image tokens replaced by text), pixel_values sequence 0's only
  <stage>.mixed.logits, .mixed.loss, .mixed.grad.*: that batch's forward and gradients
  <stage>.step_losses F32 [STEPS], <stage>.step_norms F32 [STEPS]: STEPS AdamW steps of ACCUM
                                   micro-batches (loss / ACCUM per backward), global-norm
                                   clipping to MAX_NORM (torch clip_grad_norm_), constant LR
  <stage>.after.proj.<name>: the projector after the steps
Stages: pretrain (projector trained; tower, language model and lm_head frozen, as LLaVA-1.5's
pretrain.sh with tune_mm_mlp_adapter) and sft (projector + language model + lm_head trained,
tower frozen: finetune.sh). AdamW(betas (0.9, 0.95), eps 1e-8, weight_decay 0.1) with decay on
matrices (ndim >= 2: Trainer's groups skip biases and norms). Loss: mean cross-entropy over the
targets that are not -100 (transformers' ForCausalLMLoss on the same labels).
"""
import json
import os
import sys

import torch
import transformers
from transformers import (CLIPVisionConfig, LlamaConfig, LlamaForCausalLM, LlavaConfig,
                          LlavaForConditionalGeneration, Qwen2Config, Qwen2ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_llama_goldens import save_file  # noqa: E402  the reproducible safetensors writer

SEED = 3500
B, T, PREFIX = 2, 40, 4
STEPS, ACCUM = 20, 2
LR, BETAS, EPS, WD, MAX_NORM = 2e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
PERTURB = 0.1
SHARD = "200KB"   # hf/: several shards and an index, as a large checkpoint has
IGNORE = -100

VISION = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
              intermediate_size=64, layer_norm_eps=1e-5, hidden_act="quick_gelu")
TEXT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=160, max_position_embeddings=64, tie_word_embeddings=False)
CASES = [("llama", LlamaConfig, LlamaForCausalLM, {}), ("qwen2", Qwen2Config, Qwen2ForCausalLM, {})]


def build(index, tcls):
    torch.manual_seed(SEED + index)
    tc = tcls(**TEXT)
    cfg = LlavaConfig(vision_config=CLIPVisionConfig(**VISION), text_config=tc, image_token_id=TEXT["vocab_size"] - 1,
                      vision_feature_layer=-2, vision_feature_select_strategy="default", projector_hidden_act="gelu",
                      image_seq_length=(VISION["image_size"] // VISION["patch_size"]) ** 2)
    cfg._attn_implementation = "eager"
    model = LlavaForConditionalGeneration(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "multi_modal_projector" in n and n.endswith("bias") or "norm" in n and "vision_tower" in n:
                p.add_(torch.randn_like(p) * PERTURB)
    return cfg, model


def batches(cfg):
    n_img = cfg.image_seq_length
    V, img = cfg.text_config.vocab_size, cfg.image_token_id
    text = torch.randint(0, V - 1, (STEPS, ACCUM, B, T), dtype=torch.int64)
    inputs = text.clone()
    inputs[..., PREFIX:PREFIX + n_img] = img
    targets = torch.full_like(inputs, IGNORE)
    targets[..., :-1] = inputs[..., 1:]
    targets[targets == img] = IGNORE
    pixels = torch.randn(STEPS, ACCUM, B, 3, VISION["image_size"], VISION["image_size"])
    return inputs, targets, pixels


def mixed(inp, tgt, img):
    """micro-batch (0, 0) with sequence 1's image tokens replaced by text (a fixed draw) and its
    targets re-derived: the text-only sequence of a mixed batch"""
    g = torch.Generator().manual_seed(SEED)
    inp = inp.clone()
    n = int((inp[1] == img).sum())
    inp[1][inp[1] == img] = torch.randint(0, img, (n,), generator=g)
    tgt = torch.full_like(inp, IGNORE)
    tgt[:, :-1] = inp[:, 1:]
    tgt[tgt == img] = IGNORE
    return inp, tgt


def loss_of(model, inp, tgt, px):
    out = model(input_ids=inp, pixel_values=px)
    logits = out.logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                             ignore_index=IGNORE)
    return logits, loss


def trained(model, stage):
    out = []
    for n, p in model.named_parameters():
        on = "multi_modal_projector" in n or (stage == "sft" and "vision_tower" not in n)
        p.requires_grad_(on)
        if on:
            out.append((n, p))
    return out


def short(n):
    for pre, repl in (("model.multi_modal_projector.", "proj."), ("model.language_model.", "text.model."),
                      ("lm_head.", "text.lm_head.")):
        if n.startswith(pre):
            return repl + n[len(pre):]
    raise ValueError(n)


def store_pass(model, params, prefix, inp, tgt, px, tensors):
    """one forward and backward: prefix.logits, .loss and .grad.<name> of every trained tensor"""
    logits, loss = loss_of(model, inp, tgt, px)
    loss.backward()
    tensors[prefix + ".logits"] = logits.detach().clone()
    tensors[prefix + ".loss"] = loss.detach().reshape(1).clone()
    for n, p in params:
        tensors[prefix + ".grad." + short(n)] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)
    return loss.item()


def run_stage(model, stage, data, tensors):
    inputs, targets, pixels = data
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    params = trained(model, stage)
    loss = store_pass(model, params, stage, inputs[0, 0], targets[0, 0], pixels[0, 0], tensors)
    labels = torch.where(inputs[0, 0] == model.config.image_token_id, IGNORE, inputs[0, 0])
    with torch.no_grad():   # transformers' own loss on the same labels
        hf = model(input_ids=inputs[0, 0], pixel_values=pixels[0, 0], labels=labels).loss
    assert abs(hf.item() - loss) <= 1e-6 * abs(loss), (hf.item(), loss)
    # a batch with a text-only conversation (LLaVA's mix665k has them): sequence 1 holds no image
    # and only sequence 0's image is passed (pixel_values [1, ...]), as a collator gives them
    inp, tgt = mixed(inputs[0, 0], targets[0, 0], model.config.image_token_id)
    store_pass(model, params, stage + ".mixed", inp, tgt, pixels[0, 0][:1], tensors)
    decay = [p for n, p in params if p.ndim >= 2]
    no_decay = [p for n, p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    step_losses, norms = [], []
    for s in range(STEPS):
        total = 0.0
        for a in range(ACCUM):
            _, l = loss_of(model, inputs[s, a], targets[s, a], pixels[s, a])
            (l / ACCUM).backward()
            total += l.item()
        step_losses.append(total / ACCUM)
        norms.append(float(torch.nn.utils.clip_grad_norm_([p for _, p in params], MAX_NORM)))
        opt.step()
        opt.zero_grad(set_to_none=True)
    tensors[stage + ".step_losses"] = torch.tensor(step_losses, dtype=torch.float32)
    tensors[stage + ".step_norms"] = torch.tensor(norms, dtype=torch.float32)
    for n, p in params:
        if "multi_modal_projector" in n:
            tensors[stage + ".after." + short(n)] = p.detach().clone()
    model.load_state_dict(init)   # the next stage starts from the same weights
    print("  %s: loss %.6f, steps %.4f -> %.4f, norms %.3f .. %.3f, %d trained tensors" %
          (stage, loss, step_losses[0], step_losses[-1], min(norms), max(norms), len(params)))


def save_text(model, cfg, tcls_model, out):
    lm = tcls_model(cfg.text_config).float()
    sd = {"model." + k[len("model.language_model."):]: v for k, v in model.state_dict().items()
          if k.startswith("model.language_model.")}
    sd["lm_head.weight"] = model.state_dict()["lm_head.weight"]
    missing, unexpected = lm.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    lm.save_pretrained(os.path.join(out, "text"), safe_serialization=True)


def run_case(index, case, tcls, tmodel, out_root):
    out = os.path.join(out_root, case)
    os.makedirs(out, exist_ok=True)
    cfg, model = build(index, tcls)
    with open(os.path.join(out, "config.json.tmp"), "w") as f:
        f.write(cfg.to_json_string())
    os.replace(os.path.join(out, "config.json.tmp"), os.path.join(out, "config.json"))
    save_text(model, cfg, tmodel, out)
    model.save_pretrained(os.path.join(out, "hf"), max_shard_size=SHARD)
    data = batches(cfg)
    tensors = {}
    for n, p in model.state_dict().items():
        if n.startswith("model.vision_tower."):
            tensors["vision." + n[len("model.vision_tower."):]] = p.detach().clone()
        elif n.startswith("model.multi_modal_projector."):
            tensors["proj." + n[len("model.multi_modal_projector."):]] = p.detach().clone()
    tensors["pixels"] = data[2].contiguous()
    tensors["inputs"] = data[0].to(torch.int32)
    tensors["targets"] = data[1].to(torch.int32)
    mi, mt = mixed(data[0][0, 0], data[1][0, 0], cfg.image_token_id)
    tensors["mixed.inputs"] = mi.to(torch.int32)
    tensors["mixed.targets"] = mt.to(torch.int32)
    with torch.no_grad():
        hs = model.model.vision_tower(data[2][0, 0], output_hidden_states=True).hidden_states
        tensors["features"] = hs[cfg.vision_feature_layer][:, 1:].detach().clone()
    print(case)
    for stage in ("pretrain", "sft"):
        run_stage(model, stage, data, tensors)
    meta = {"case": case, "versions": "torch %s, transformers %s" % (torch.__version__, transformers.__version__),
            "B": str(B), "T": str(T), "steps": str(STEPS), "accum": str(ACCUM), "lr": repr(LR),
            "beta1": repr(BETAS[0]), "beta2": repr(BETAS[1]), "eps": repr(EPS), "weight_decay": repr(WD),
            "max_norm": repr(MAX_NORM)}
    save_file(tensors, os.path.join(out, "golden.safetensors"), meta)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "engine", "golden", "vlm")
    torch.set_num_threads(1)
    for i, (case, tcls, tmodel, _) in enumerate(CASES):
        run_case(i, case, tcls, tmodel, out)


if __name__ == "__main__":
    main()
