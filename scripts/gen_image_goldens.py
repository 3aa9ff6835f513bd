#!/usr/bin/env python3
"""Dev-time golden generator for the image path of `dtrun prepare` (docs/vlm-images.md).

Writes, under tests/data/images/:
  - small test images, one per decoder path: baseline / progressive / grayscale / CMYK / YCCK /
    EXIF-rotated JPEG; RGB, RGBA, palette (with and without tRNS), grayscale + alpha,
    1-bit, 16-bit grayscale and 16-bit RGB PNG; sizes non-square, smaller than the crop
    and larger than it;
  - for each (image, processor setting) the pixel_values of Hugging Face's
    CLIPImageProcessor as transformers' AutoImageProcessor builds it by default (the
    torchvision backend in transformers 5.x), as raw little-endian float32
    [3][crop_h][crop_w], and goldens.json describing them.
The images are opened with PIL.Image.open and passed as they are: the processor's own
do_convert_rgb (transformers' convert_to_rgb: alpha composited on white) does the rest,
as in llava-hf's LlavaProcessor. The "pad" rows follow LLaVA-1.5's training code
(LLaVA llava/train/train.py): Image.open(...).convert("RGB") (alpha dropped), then
expand2square (image_aspect_ratio == "pad": paste on a square of the mean colour
int(m * 255)), then the processor. The "load" rows open the file with transformers'
image_utils.load_image instead (what a processor given a path or URL uses): Pillow's
ImageOps.exif_transpose, then convert("RGB").

Run with a venv that has transformers, torch, torchvision, Pillow and numpy:
  PYTHONPATH=... python3 scripts/gen_image_goldens.py
Python is never needed to build or test: the outputs are committed.
"""
import io
import json
import os
import struct
import sys
import zlib

import numpy as np
import PIL
from PIL import Image
import torch
import torchvision
import transformers
from transformers import CLIPImageProcessor
from transformers.image_utils import OPENAI_CLIP_MEAN, load_image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "images")
SEED = 35


def pattern(w, h, rng):
    """Smooth colour gradients, a disc with a sharp edge and mild noise (uint8 HxWx3)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 127 + 120 * np.sin(x / max(w, 1) * 6.0 + 0.3)
    g = 127 + 120 * np.cos(y / max(h, 1) * 5.0 + x / max(w, 1))
    b = 255 * ((x + y) / (w + h))
    disc = ((x - w * 0.6) ** 2 + (y - h * 0.4) ** 2) < (min(w, h) * 0.3) ** 2
    img = np.stack([r, g, b], -1)
    img[disc] = [250, 30, 60]
    img += rng.normal(0, 6, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def png_chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def write_png16(path, arr, color_type):
    """A 16-bit PNG written by hand (PIL writes neither 16-bit RGB nor, from numpy, 16-bit grey): arr uint16 HxWxC."""
    h, w = arr.shape[:2]
    raw = b"".join(b"\x00" + arr[i].astype(">u2").tobytes() for i in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw, 9)) +
                png_chunk(b"IEND", b""))


# PIL writes CMYK JPEGs as plain CMYK (Adobe transform 0); a YCCK one (transform 2, what
# Photoshop writes) is made by libjpeg itself, through this program (dev time: gcc, libjpeg)
YCCK_C = r"""
/* writes a YCCK JPEG (Adobe transform 2) of W x H from a CMYK pattern: argv[1] path */
#include <stdio.h>
#include <stdlib.h>
#include <jpeglib.h>
int main(int argc, char **argv) {
    const int W = 52, H = 36;
    FILE *f = fopen(argv[1], "wb");
    if (!f) return 1;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = W;
    c.image_height = H;
    c.input_components = 4;
    c.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, JCS_YCCK);
    jpeg_set_quality(&c, 90, TRUE);
    jpeg_start_compress(&c, TRUE);
    unsigned char row[4 * 52];
    while (c.next_scanline < (unsigned)H) {
        int y = (int)c.next_scanline;
        for (int x = 0; x < W; x++) {
            row[4 * x] = (unsigned char)(255 - x * 4);
            row[4 * x + 1] = (unsigned char)(255 - y * 6);
            row[4 * x + 2] = (unsigned char)(128 + ((x * y) % 97));
            row[4 * x + 3] = (unsigned char)(200 - (x + y));
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return fclose(f) != 0;
}
"""


def write_ycck(path):
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "ycck.c"), "w") as f:
            f.write(YCCK_C)
        subprocess.run(["gcc", "-O2", "-o", os.path.join(d, "ycck"), os.path.join(d, "ycck.c"), "-ljpeg"], check=True)
        subprocess.run([os.path.join(d, "ycck"), path], check=True)
    im = Image.open(path)
    assert im.mode == "CMYK" and im.info.get("adobe_transform") == 2, (im.mode, im.info)


def make_images(rng):
    made = []

    def save(name, im, **kw):
        im.save(os.path.join(OUT, name), **kw)
        made.append(name)

    save("rgb-97x61.jpg", Image.fromarray(pattern(97, 61, rng)), quality=90)
    save("rgb-progressive-120x90.jpg", Image.fromarray(pattern(120, 90, rng)), quality=85, progressive=True)
    save("gray-64x64.jpg", Image.fromarray(pattern(64, 64, rng)).convert("L"), quality=90)
    save("cmyk-60x40.jpg", Image.fromarray(pattern(60, 40, rng)).convert("CMYK"), quality=90)
    write_ycck(os.path.join(OUT, "ycck-52x36.jpg"))
    made.append("ycck-52x36.jpg")
    exif = Image.Exif()
    exif[0x0112] = 6   # Orientation: rotate 90 CW to display; the processor does not apply it
    save("exif-rotate6-70x50.jpg", Image.fromarray(pattern(70, 50, rng)), quality=90, exif=exif)
    save("rgb-large-500x400.jpg", Image.fromarray(pattern(500, 400, rng)), quality=75)
    save("rgb-small-20x13.png", Image.fromarray(pattern(20, 13, rng)))
    rgba = np.concatenate([pattern(50, 80, rng), np.tile(np.linspace(0, 255, 50).astype(np.uint8), (80, 1))[..., None]], -1)
    save("rgba-50x80.png", Image.fromarray(rgba, "RGBA"))
    pal = Image.fromarray(pattern(45, 33, rng)).quantize(colors=16)
    save("palette-trns-45x33.png", pal, transparency=3)
    save("palette-31x29.png", Image.fromarray(pattern(31, 29, rng)).quantize(colors=64))
    la = Image.merge("LA", [Image.fromarray(pattern(40, 40, rng)).convert("L"),
                            Image.fromarray(np.tile(np.linspace(255, 0, 40).astype(np.uint8)[:, None], (1, 40)))])
    save("gray-alpha-40x40.png", la)
    save("bilevel-35x21.png", Image.fromarray(pattern(35, 21, rng)).convert("1"))
    g16 = (rng.integers(0, 400, (20, 30)) + np.arange(30)[None, :] * 9).astype(np.uint16)   # values around 255
    write_png16(os.path.join(OUT, "gray16-30x20.png"), g16[..., None], 0)
    made.append("gray16-30x20.png")
    rgb16 = (pattern(33, 47, rng).astype(np.uint16) * 257 + rng.integers(0, 257, (47, 33, 3))).astype(np.uint16)
    write_png16(os.path.join(OUT, "rgb16-33x47.png"), rgb16, 2)
    made.append("rgb16-33x47.png")
    for o in range(2, 9):   # every other EXIF orientation, for the load_image rows
        ex = Image.Exif()
        ex[0x0112] = o
        save("exif-orient%d-24x16.jpg" % o, Image.fromarray(pattern(24, 16, rng)), quality=90, exif=ex)
    return made


def expand2square(img, bg):
    """LLaVA llava/train/train.py expand2square."""
    w, h = img.size
    if w == h:
        return img
    if w > h:
        res = Image.new(img.mode, (w, w), bg)
        res.paste(img, (0, (w - h) // 2))
        return res
    res = Image.new(img.mode, (h, h), bg)
    res.paste(img, ((h - w) // 2, 0))
    return res


# the llava records' token ids as Hugging Face tokenizes the rendered chat: "<image>" an
# added special token (id = the mini tokenizer's vocabulary size, passed to dtrun as
# --image-token-id), each expanded to LLAVA_IMAGE_TOKENS copies before tokenizing, as
# llava-hf's LlavaProcessor expands it to num_image_tokens
LLAVA_IMAGE_TOKENS = 16
ROLE = {"human": "user", "gpt": "assistant", "system": "system"}


def render(conv, template):
    img = "<image>" * LLAVA_IMAGE_TOKENS
    if template == "chatml":
        return "".join("<|im_start|>%s\n%s<|im_end|>\n" % (ROLE[m["from"]], m["value"].replace("<image>", img))
                       for m in conv)
    return "<|begin_of_text|>" + "".join("<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>" % (
        ROLE[m["from"]], m["value"].strip().replace("<image>", img)) for m in conv)


def llava_goldens():
    from tokenizers import AddedToken, Tokenizer
    with open(os.path.join(ROOT, "tests", "data", "llava.json")) as f:
        records = json.load(f)
    for template, tok_name in (("chatml", "qwen2-mini.json"), ("llama3", "llama3-mini.json")):
        tok = Tokenizer.from_file(os.path.join(ROOT, "tests", "tokenizer", "data", tok_name))
        image_id = tok.get_vocab_size(with_added_tokens=True)
        tok.add_special_tokens([AddedToken("<image>", special=True, normalized=False)])
        assert tok.token_to_id("<image>") == image_id
        lines = ["# scripts/gen_image_goldens.py: %s, <image> = %d x %d" % (tok_name, image_id, LLAVA_IMAGE_TOKENS)]
        for r in records:
            if not any(m["from"] == "gpt" for m in r["conversations"]):
                lines.append("skip")
                continue
            lines.append(" ".join(str(i) for i in tok.encode(render(r["conversations"], template)).ids))
        with open(os.path.join(ROOT, "tests", "data", "llava-%s.golden" % template), "w") as f:
            f.write("\n".join(lines) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(SEED)
    images = make_images(rng)
    rows = []
    loaded = ["exif-orient%d-24x16.jpg@load" % o for o in range(2, 9)] + ["exif-rotate6-70x50.jpg@load",
                                                                         "rgba-50x80.png@load"]
    for img_name in [i for i in images if not i.startswith("exif-orient")] + [
            "rgb-large-500x400.jpg@336", "rgb-97x61.jpg@crop40x32", "rgba-50x80.png@pad", "rgb-97x61.jpg@pad"] + loaded:
        base, _, tag = img_name.partition("@")
        se, ch, cw, pad = {"": (64, 56, 56, False), "336": (336, 336, 336, False),
                           "crop40x32": (48, 40, 32, False), "pad": (64, 56, 56, True),
                           "load": (64, 56, 56, False)}[tag]
        proc = CLIPImageProcessor(size={"shortest_edge": se}, crop_size={"height": ch, "width": cw})
        # "load": transformers.image_utils.load_image(path): exif_transpose, then convert("RGB")
        im = load_image(os.path.join(OUT, base)) if tag == "load" else Image.open(os.path.join(OUT, base))
        if pad:
            im = expand2square(im.convert("RGB"), tuple(int(x * 255) for x in OPENAI_CLIP_MEAN))
        pv = proc(images=im, return_tensors="pt")["pixel_values"][0].numpy().astype("<f4")
        assert pv.shape == (3, ch, cw), pv.shape
        gold = "%s.%s.f32" % (base, tag or "s64c56")
        with open(os.path.join(OUT, gold), "wb") as f:
            f.write(pv.tobytes())
        rows.append({"image": base, "shortest_edge": se, "crop_height": ch, "crop_width": cw,
                     "pad_square": pad, "load_image": tag == "load", "golden": gold})
    meta = {"generator": "scripts/gen_image_goldens.py",
            "processor": "transformers.CLIPImageProcessor (backend %s)" % CLIPImageProcessor().backend,
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                         "torchvision": torchvision.__version__, "Pillow": PIL.__version__,
                         "numpy": np.__version__, "python": sys.version.split()[0]},
            "mean": list(OPENAI_CLIP_MEAN), "rows": rows}
    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    llava_goldens()
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print("wrote %d images, %d goldens, %d bytes under %s" % (len(images), len(rows), total, OUT))


if __name__ == "__main__":
    main()
