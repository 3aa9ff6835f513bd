#!/usr/bin/env python3
"""Regenerates tests/tokenizer/data/released/: tokenizers that were released (not trained by
us), the multilingual corpus released-corpus.txt, and the ids the reference libraries give
for each of its cases. Dev-time only: CI reads the committed files without Python
(tests/tokenizer, `ctest -R tokenizer_released`).

    python3 -m venv /tmp/tokvenv
    /tmp/tokvenv/bin/pip install tokenizers tiktoken sentencepiece
    /tmp/tokvenv/bin/pip download --no-deps --no-binary :all: --no-build-isolation \\
        openai-whisper==20250625 sentencepiece==0.2.3 -d /tmp/released
    /tmp/tokvenv/bin/python scripts/gen_released_tokenizer_goldens.py /tmp/released

The vocabularies come out of those two PyPI source archives (nothing is fetched from a
model hub; see tests/tokenizer/data/released/README.md for their licences):

  gpt2.json           GPT-2's byte-level BPE (openai-whisper's whisper/assets/gpt2.tiktoken,
                      50257 ids) written as GPT-2's own tokenizer.json is: ByteLevel
                      pre-tokenizer with GPT-2's regex, one merge per token (recovered from the
                      ranks: the two parts tiktoken's BPE leaves when merging the token's bytes
                      with lower ranks only), <|endoftext|> = 50256. Reference ids: tiktoken
                      (GPT-2's regex and ranks), and `tokenizers` on the written file; the
                      script stops if the two disagree.
  whisper-llama3.json Whisper's multilingual byte-level vocabulary (multilingual.tiktoken,
                      50257 ids) in the form Hugging Face converts Llama-3's tiktoken file to
                      (transformers' TikTokenConverter): Split with Llama-3's regex
                      (\\p{N}{1,3}), Isolated; ByteLevel(use_regex=False); every split of a
                      token whose halves are tokens as a merge; ignore_merges. Reference:
                      tiktoken with Llama-3's regex over those ranks, and `tokenizers` on
                      the written file; the script stops if they disagree.
  botchan-bpe.model   sentencepiece's own test models (its source archive's test/):
  kyoto-unigram.model a BPE model on English (botchan_en_bpe_1000) and a Unigram model on
                      Japanese (kyoto_ja_unigram_8000). Reference: SentencePieceProcessor
                      .encode(case) (no BOS/EOS).

<name>.ids holds the ids of each case, space-separated, one line per case; the corpus
uses the escapes \\n \\t \\r \\\\ as tests/tokenizer/data/corpus.txt does. For the
SentencePiece models, whose normalizer (nmt_nfkc) changes text, <name>.decoded holds what
SentencePieceProcessor.decode gives for those ids, one escaped line per case; for the
byte-level ones decode(encode(x)) is x.
"""
import base64
import glob
import json
import os
import sys
import tarfile

import sentencepiece as spm
import tiktoken
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "tokenizer", "data", "released")

# tiktoken's r50k_base (GPT-2) and Llama-3's tokenizer.json patterns
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
EOT = "<|endoftext|>"

CASES = [
    # English, punctuation, contractions
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "It's, they're, we've, I'm, you'll, he'd; IT'S LOUD and ShE'S quiet",
    "!!!???...,,,;;;::: «quotes» “curly” ‘single’ — dash – en … ellipsis",
    # Chinese, Japanese, Korean, mixed scripts
    "你好，世界！这是一个测试。",
    "深度学习模型的训练需要大量的数据和计算资源，分布式训练可以把工作分到多个GPU上。",
    "中文和English混合的句子, with 标点符号。数字123和字母abc交替出现。",
    "日本語のテキストも少し: こんにちは、世界。東京は晴れです。",
    "한국어 문장도 있습니다: 안녕하세요 세계",
    "Greek λόγος and Cyrillic слово and Arabic كلمة and Hebrew מילה",
    "हिन्दी में एक वाक्य और ภาษาไทย ด้วย",
    "Việt Nam, Đà Nẵng, Ünïcödé àccénts: café, naïve, résumé, Æsir, straße",
    # code
    "def f(x):\\n    return x ** 2  # square\\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "#include <stdio.h>\\nint main(void) {\\n\\tprintf(\"%d\\\\n\", 42);\\n\\treturn 0;\\n}\\n",
    "if x != y && z >= 10 || !flag: print('ok')  // comment /* block */",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name;",
    "const fn = async (a, b) => { await fetch(`https://example.com/${a}?b=${b}`); };",
    # emoji
    "Emoji: 😀 🎉 👍🏽 ❤️ 🇩🇪 and a family 👨‍👩‍👧 and 🧑🏿‍💻",
    "😀😀😀🎉🎉🎉 no spaces between",
    # whitespace runs
    "  leading spaces and trailing spaces   ",
    "tabs\\there\\t\\tand\\t \\tmixed",
    "    \\t\\t    \\n\\n\\n     ",
    "a  b   c    d     e      f",
    "line one\\nline two\\n\\nline four after a blank\\n",
    "windows\\r\\nline endings\\r\\n",
    " ",
    "x",
    # digits
    "Numbers: 0 7 42 1234567 3.14159 -12e+10 2026-11-24",
    "1234567890123456789012345678901234567890",
    "Mixed123numbers456and789letters 1,000,000 and 1.000.000,00 €",
    "IPv4 192.168.0.1 and phone +86 10 1234 5678",
    # special token handling
    EOT,
    "text before" + EOT + "text after",
    "<|endoftext <|endoftext|",
    # URL, e-mail, math
    "URL: https://example.com/path?query=1&b=2#frag email@example.org @handle #hashtag $100 50%",
    "math: ∑ᵢ xᵢ² ≤ ∞, α+β=γ, √2 ≈ 1.414, ∀x∈ℝ: x²≥0",
]


def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s) and s[i + 1] in "ntr\\":
            out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[s[i + 1]])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def extract(archives, suffix):
    """The bytes of the member whose name ends in suffix, from the first archive holding it."""
    for a in archives:
        with tarfile.open(a) as t:
            for m in t.getmembers():
                if m.name.endswith(suffix):
                    return t.extractfile(m).read()
    sys.exit("no %s in %s (see this script's docstring)" % (suffix, archives))


def read_ranks(text):
    """A .tiktoken file: one 'base64(token) rank' per line."""
    ranks = {}
    for line in text.decode("ascii").splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def bytes_to_unicode():
    """GPT-2's printable code point for each byte (its encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE = bytes_to_unicode()


def show(b):
    return "".join(BYTE[x] for x in b)


def recovered_merge(ranks, token):
    """The two parts tiktoken's BPE leaves when merging token's bytes with lower ranks only."""
    limit = ranks[token]
    parts = [bytes([x]) for x in token]
    while len(parts) > 2:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return None
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def gpt2_tokenizer(ranks):
    vocab = {show(t): r for t, r in ranks.items()}
    merges = []
    for t, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(t) > 1:
            m = recovered_merge(ranks, t)
            if m is None:
                sys.exit("gpt2: token %r has no merge" % t)
            merges.append((show(m[0]), show(m[1])))
    vocab[EOT] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(EOT, special=True, normalized=False)])
    return tok


def llama3_style_tokenizer(ranks):
    """As transformers' TikTokenConverter builds Llama-3's tokenizer.json."""
    vocab = {show(t): r for t, r in ranks.items()}
    merges = []
    for t, r in ranks.items():
        local = [(t[:i], t[i:]) for i in range(1, len(t)) if t[:i] in ranks and t[i:] in ranks]
        local.sort(key=lambda lr: (ranks[lr[0]], ranks[lr[1]]))
        merges.extend((l, rr, r) for l, rr in local)
    merges.sort(key=lambda m: m[2])
    merges = [(show(l), show(rr)) for l, rr, _ in merges]
    vocab[EOT] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(EOT, special=True, normalized=False)])
    return tok


def escape(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def write_ids(name, rows):
    with open(os.path.join(OUT, name + ".ids"), "w", encoding="utf-8", newline="\n") as f:
        for ids in rows:
            f.write(" ".join(str(i) for i in ids) + "\n")


def tiktoken_goldens(name, ranks, pattern, tok):
    enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens={EOT: len(ranks)})
    rows = []
    for c in CASES:
        text = unescape(c)
        want = enc.encode(text, allowed_special="all")
        got = tok.encode(text, add_special_tokens=False).ids
        if want != got:
            sys.exit("%s: tokenizers and tiktoken disagree on %r:\n  %s\n  %s" % (name, c, got, want))
        rows.append(want)
    tok.save(os.path.join(OUT, name + ".json"), pretty=False)
    write_ids(name, rows)


def spm_goldens(name, blob):
    with open(os.path.join(OUT, name + ".model"), "wb") as f:
        f.write(blob)
    sp = spm.SentencePieceProcessor(model_proto=blob)
    rows = [sp.encode(unescape(c)) for c in CASES]
    write_ids(name, rows)
    # the model's normalizer (nmt_nfkc) changes text: what decode gives back, escaped
    with open(os.path.join(OUT, name + ".decoded"), "w", encoding="utf-8", newline="\n") as f:
        for ids in rows:
            f.write(escape(sp.decode(ids)) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    archives = sorted(glob.glob(os.path.join(sys.argv[1], "*.tar.gz")))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "released-corpus.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(CASES) + "\n")
    gpt2 = read_ranks(extract(archives, "whisper/assets/gpt2.tiktoken"))
    tiktoken_goldens("gpt2", gpt2, GPT2_PATTERN, gpt2_tokenizer(gpt2))
    multi = read_ranks(extract(archives, "whisper/assets/multilingual.tiktoken"))
    tiktoken_goldens("whisper-llama3", multi, LLAMA3_PATTERN, llama3_style_tokenizer(multi))
    spm_goldens("botchan-bpe", extract(archives, "test/botchan_en_bpe_1000.model"))
    spm_goldens("kyoto-unigram", extract(archives, "test/kyoto_ja_unigram_8000.model"))
    print("wrote", OUT, "(tiktoken %s)" % tiktoken.__version__)


if __name__ == "__main__":
    main()
