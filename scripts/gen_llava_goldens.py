#!/usr/bin/env python3
"""Dev-time generator of the LLaVA goldens (tests/models/golden/llava_counts.txt and
llava_saved.txt), read by tests/models/test_vlm.c without Python.

1. Parameter counts per module: transformers builds LlavaForConditionalGeneration from the
   catalog's config.json (models/catalog/llava-*.json, the published llava-hf configs) on the
   meta device (no weights allocated) and counts the vision tower, the projector, the language
   model (embeddings + blocks + norm) and the lm_head.
2. Saved activations (llava-tiny, fp32, CPU, eager attention): the forward of the vision tower
   and of the projector runs under torch.autograd.graph.saved_tensors_hooks, with each stage's
   requires_grad (LLaVA-1.5: pretrain trains the projector, sft the projector + LLM, full
   everything). Every tensor autograd saves is attributed to the module running when it was
   packed (forward pre-hooks); parameters are not activations and are skipped; a storage saved
   twice counts once. Reported per stage: the tower's bytes in the layers the selected feature
   depends on (embeddings, pre_layrnorm, blocks up to vision_feature_layer: the graph of the
   blocks above it and of post_layernorm is unreachable from the loss and freed with the
   tower's output), the whole tower's, and the projector's.

Run: /tmp/hfvenv/bin/python scripts/gen_llava_goldens.py
"""
import json
import os
import sys

import torch
import transformers

from golden_text import write_lines

ROOT = os.path.join(os.path.dirname(__file__), "..")
GOLD = os.path.join(ROOT, "tests", "models", "golden")
MODELS = ["llava-tiny", "llava-1.5-7b", "llava-1.5-13b"]
IMAGES = 3   # images in the measured batch


def config_of(name):
    with open(os.path.join(ROOT, "models", "catalog", name + ".json")) as f:
        cfg = json.load(f)
    return transformers.LlavaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "_name_or_path")})


def count(mod):
    return sum(p.numel() for p in mod.parameters())


def counts():
    lines = ["# LLaVA parameter counts per module: transformers %s; scripts/gen_llava_goldens.py" % transformers.__version__,
             "# model vision_tower projector language_model lm_head total"]
    for name in MODELS:
        with torch.device("meta"):
            model = transformers.LlavaForConditionalGeneration(config_of(name))
        inner = model.model
        row = [count(inner.vision_tower), count(inner.multi_modal_projector), count(inner.language_model),
               count(model.lm_head), count(model)]
        assert row[0] + row[1] + row[2] + row[3] == row[4]
        lines.append("%s %s" % (name, " ".join(str(x) for x in row)))
        print(lines[-1], file=sys.stderr)
    write_lines(os.path.join(GOLD, "llava_counts.txt"), lines)


class Saved:
    """Bytes of the tensors autograd saves, by the module that was running."""

    def __init__(self, params):
        self.params = {p.data_ptr() for p in params}
        self.where = "none"
        self.seen = set()
        self.bytes = {}

    def pack(self, t):
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if t.data_ptr() not in self.params and key not in self.seen:
            self.seen.add(key)
            self.bytes[self.where] = self.bytes.get(self.where, 0) + key[1]
        return t


def measure(model, stage, pixels):
    tower, proj, llm = model.model.vision_tower, model.model.multi_modal_projector, model.model.language_model
    tower.requires_grad_(stage == "full")
    proj.requires_grad_(True)
    llm.requires_grad_(stage != "pretrain")
    s = Saved(list(model.parameters()))
    hooks = []

    def label(name):
        def pre(mod, args, kwargs=None):
            s.where = name
        return pre
    enc = tower
    hooks.append(enc.embeddings.register_forward_pre_hook(label("embeddings")))
    hooks.append(enc.pre_layrnorm.register_forward_pre_hook(label("embeddings")))
    for i, layer in enumerate(enc.encoder.layers):
        hooks.append(layer.register_forward_pre_hook(label("layer%d" % i)))
    hooks.append(enc.post_layernorm.register_forward_pre_hook(label("post")))
    hooks.append(proj.register_forward_pre_hook(label("projector")))
    with torch.autograd.graph.saved_tensors_hooks(s.pack, lambda t: t):
        feats = model.model.get_image_features(pixel_values=pixels,
                                               vision_feature_layer=model.config.vision_feature_layer,
                                               vision_feature_select_strategy=model.config.vision_feature_select_strategy)
    for h in hooks:
        h.remove()
    L = len(enc.encoder.layers)
    sel = model.config.vision_feature_layer
    used = sel if sel >= 0 else L + 1 + sel
    kept = s.bytes.get("embeddings", 0) + sum(s.bytes.get("layer%d" % i, 0) for i in range(used))
    whole = sum(v for k, v in s.bytes.items() if k != "projector")
    return kept, whole, s.bytes.get("projector", 0), s.bytes.get("layer0", 0)


def saved():
    torch.manual_seed(0)
    cfg = config_of("llava-tiny")
    cfg.vision_config._attn_implementation = "eager"
    cfg.text_config._attn_implementation = "eager"
    model = transformers.LlavaForConditionalGeneration(cfg).float().train()
    vc = cfg.vision_config
    pixels = torch.randn(IMAGES, vc.num_channels, vc.image_size, vc.image_size)
    lines = ["# LLaVA saved activations (bytes, fp32, eager attention), llava-tiny, %d images: transformers %s, "
             "torch %s; scripts/gen_llava_goldens.py" % (IMAGES, transformers.__version__, torch.__version__),
             "# stage images tower_kept tower_all_layers projector one_block"]
    for stage in ("pretrain", "sft", "full"):
        kept, whole, proj, blk = measure(model, stage, pixels)
        lines.append("%s %d %d %d %d %d" % (stage, IMAGES, kept, whole, proj, blk))
        print(lines[-1], file=sys.stderr)
    write_lines(os.path.join(GOLD, "llava_saved.txt"), lines)


if __name__ == "__main__":
    counts()
    saved()
