#!/usr/bin/env python3
"""bench/image_prep_ref.py — the Hugging Face side of bench/bench_image_prep.sh.

  image_prep_ref.py make DIR N        N JPEG photos-like images (640x480, 500x375 and
                                      333x500, quality 90) and DIR/llava.json, one record each
  image_prep_ref.py time DIR BACKEND  Image.open + CLIPImageProcessor(backend) per image
                                      (336 px, return_tensors="np"), one thread; prints
                                      "SECONDS" for the loop alone (imports and the processor's
                                      construction excluded)
  image_prep_ref.py check DIR OUT     every pixel value of dtrun's pixel shards under OUT
                                      (normalised as the loader does) against the default
                                      processor's: prints the count that differ
"""
import glob
import json
import os
import struct
import sys
import time

import numpy as np

SIZES = [(640, 480), (500, 375), (333, 500)]   # COCO's common sizes


def make(d, n):
    from PIL import Image
    rng = np.random.default_rng(35)
    os.makedirs(os.path.join(d, "imgs"), exist_ok=True)
    recs = []
    for i in range(n):
        w, h = SIZES[i % len(SIZES)]
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        base = np.stack([127 + 120 * np.sin(x / (17 + i % 13)), 127 + 120 * np.cos(y / (23 + i % 7)),
                         255 * (x + y) / (w + h)], -1)
        img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        name = "%06d.jpg" % i
        Image.fromarray(img).save(os.path.join(d, "imgs", name), quality=90)
        recs.append({"id": str(i), "image": name, "conversations": [
            {"from": "human", "value": "<image>\nWhat is in the picture?"},
            {"from": "gpt", "value": "Stripes and a gradient."}]})
    with open(os.path.join(d, "llava.json"), "w") as f:
        json.dump(recs, f)


def processor(backend):
    import torch
    torch.set_num_threads(1)
    from transformers import CLIPImageProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    cls = CLIPImageProcessor if backend == "torchvision" else CLIPImageProcessorPil
    return cls(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336})


def timed(d, backend):
    from PIL import Image
    p = processor(backend)
    files = sorted(glob.glob(os.path.join(d, "imgs", "*.jpg")))
    t0 = time.perf_counter()
    for f in files:
        p(images=Image.open(f), return_tensors="np")
    print("%.4f" % (time.perf_counter() - t0))


def check(d, out):
    """Every record's pixel_values must be one of the shards' crops, normalised as the loader
    does ((x - mean * 255) / (std * 255) in float32): prints how many are not."""
    from PIL import Image
    p = processor("torchvision")
    with open(os.path.join(d, "llava.json")) as f:
        recs = json.load(f)
    ours = set()
    for px in sorted(glob.glob(os.path.join(out, "train", "*.px"))):
        b = open(px, "rb").read()
        h, w = struct.unpack_from("<II", b, 16)
        images = struct.unpack_from("<Q", b, 40)[0]
        m255 = (np.frombuffer(b, "<f4", 3, 64) * np.float32(255)).astype(np.float32)[:, None, None]
        s255 = (np.frombuffer(b, "<f4", 3, 76) * np.float32(255)).astype(np.float32)[:, None, None]
        crops = np.frombuffer(b, np.uint8, images * 3 * h * w, 1024).reshape(images, 3, h, w)
        ours |= {((c.astype(np.float32) - m255) / s255).tobytes() for c in crops}
    bad = 0
    for r in recs:
        ref = p(images=Image.open(os.path.join(d, "imgs", r["image"])), return_tensors="np")["pixel_values"][0]
        bad += ref.astype(np.float32).tobytes() not in ours
    print(bad)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2], int(sys.argv[3]))
    elif cmd == "time":
        timed(sys.argv[2], sys.argv[3])
    else:
        check(sys.argv[2], sys.argv[3])
