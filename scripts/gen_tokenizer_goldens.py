#!/usr/bin/env python3
"""Regenerates tests/tokenizer/data/: three small byte-level BPE tokenizers trained with
Hugging Face `tokenizers` on text Debian ships, a test corpus, and the ids `tokenizers`
gives for each corpus case. Dev-time only (CI reads the committed files, no Python):

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python scripts/gen_tokenizer_goldens.py

  gpt2-mini: GPT-2's configuration (ByteLevel pre-tokenizer with its own regex,
             add_prefix_space false; ByteLevel decoder; merges written as "a b" strings,
             as GPT-2's own file has them), special <|endoftext|>.
  llama3-mini: Llama-3's configuration (Split with Llama-3's regex, \\p{N}{1,3}, Isolated;
             ByteLevel(use_regex=False); the model's ignore_merges set), <|endoftext|>.
  qwen2-mini: Qwen2's configuration (NFC normalizer; Split with Qwen2's regex, single
             \\p{N} digits, Isolated; then ByteLevel(use_regex=False)); specials
             <|endoftext|>, <|im_start|>, <|im_end|>.
corpus.txt holds one case per line; a case's line may use the escapes \\n \\t \\r \\\\
(for multi-line cases), which the C test and this script decode the same way.
<name>.ids holds the expected ids of each case, space-separated, one line per case.
"""
import glob
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "tokenizer", "data")

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CASES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces and trailing spaces   ",
    "tabs\there\t\tand\t \tmixed",
    "It's, they're, we've, I'm, you'll, he'd; IT'S LOUD",
    "Numbers: 0 7 42 1234567 3.14159 -12e+10 2026-11-24",
    "你好，世界！这是一个测试。",
    "中文和English混合的句子, with 标点符号。",
    "日本語のテキストも少し: こんにちは",
    "Emoji: 😀 🎉 👍🏽 ❤️ 🇩🇪 and a family 👨‍👩‍👧",
    "def f(x):\\n    return x ** 2  # square\\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "if x != y && z >= 10 || !flag: print('ok')",
    "<|endoftext|>",
    "text before<|endoftext|>text after",
    "<|im_start|>user\\nWhat is 2+2?<|im_end|>\\n<|im_start|>assistant\\n4<|im_end|>",
    "a <|endoftext|> b <|im_end|>c",
    "line one\\nline two\\n\\nline four after a blank\\n",
    "windows\\r\\nline endings\\r\\n",
    "    \\t\\t    \\n\\n\\n     ",
    "Ünïcödé àccénts: café, naïve, résumé, Æsir, straße",
    "Greek λόγος and Cyrillic слово and Arabic كلمة",
    "URL: https://example.com/path?query=1&b=2#frag",
    "email@example.org, @handle, #hashtag, $100, 50%",
    "Mixed123numbers456and789letters",
    "!!!???...,,,;;;:::",
    "x",
    " ",
    "a  b   c    d",
    "The fortune says: You will be successful in your work.",
    "Permission is hereby granted, free of charge, to any person obtaining a copy",
    "THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS \"AS IS\"",
    "«quotes» “curly” ‘single’ — dash – en … ellipsis",
    "math: ∑ᵢ xᵢ² ≤ ∞, α+β=γ, √2 ≈ 1.414",
    "<|im_start|><|im_end|><|endoftext|>",
    "<|im_start|incomplete <|endoftext",
]

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def unescape(s):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}.get(n, "\\" + n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def training_text():
    files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                   if not f.endswith((".dat", ".u8")) and os.path.isfile(f))
    files += ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
              "/usr/share/common-licenses/BSD"]
    if not files:
        sys.exit("no training text: install fortunes-min fortunes")
    return files


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build(name, vocab_size):
    tok = Tokenizer(models.BPE())
    if name == "gpt2-mini":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials = SPECIALS[:1]
    elif name == "llama3-mini":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ])
        specials = SPECIALS[:1]
    else:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        specials = SPECIALS
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train(training_text(), trainer)
    return tok


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = [unescape(c) for c in CASES]
    with open(os.path.join(OUT, "corpus.txt"), "w", encoding="utf-8") as f:
        for c in CASES:
            f.write(c + "\n")
    for name, vs in (("gpt2-mini", 1200), ("qwen2-mini", 1500), ("llama3-mini", 1500)):
        tok = build(name, vs)
        path = os.path.join(OUT, name + ".json")
        tok.save(path, pretty=False)
        if name == "llama3-mini":
            # Llama-3's model sets ignore_merges (a pre-token in the vocabulary is taken whole)
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
            d["model"]["ignore_merges"] = True
            with open(path, "w", encoding="utf-8") as f:
                json.dump(d, f, ensure_ascii=False, separators=(",", ":"))
            tok = Tokenizer.from_file(path)
        if name == "gpt2-mini":
            # GPT-2's own tokenizer.json writes merges as "a b" strings; newer files (and
            # this tokenizers version) write [a, b] lists: keep one file of each form.
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
            d["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                    for m in d["model"]["merges"]]
            with open(path, "w", encoding="utf-8") as f:
                json.dump(d, f, ensure_ascii=False, separators=(",", ":"))
            tok = Tokenizer.from_file(path)
        with open(os.path.join(OUT, name + ".ids"), "w") as f:
            for c in cases:
                ids = tok.encode(c, add_special_tokens=False).ids
                assert tok.decode(ids, skip_special_tokens=False) == c, (name, c)
                f.write(" ".join(map(str, ids)) + "\n")
        print(name, tok.get_vocab_size(), "tokens")


if __name__ == "__main__":
    main()
