#!/usr/bin/env python3
"""tokenize_ref.py — the reference side of bench/bench_tokenize.sh (dev time only).

Needs a virtual environment with Hugging Face `tokenizers` and `tiktoken` from PyPI
(CI never runs it):

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install tokenizers tiktoken

Subcommands (each prints one line; bench/bench_tokenize.sh drives them):

  corpus OUT               write the benchmark corpus: Debian's licences, the fortunes,
                           tests/tokenizer/data/corpus.txt and the changelogs under
                           /usr/share/doc (decompressed) up to ~10 MB, strict UTF-8 only
  check-ours T CORPUS IDS  dtrun tokenize's output IDS equals HF's encode() per line
  check-tiktoken T CORPUS  tiktoken (an Encoding built from T) equals HF per line
  time LIB T CORPUS N      one timed run with N threads; prints "seconds bytes"
                           LIB: hf-batch (encode_batch of the lines), hf-single (encode of
                           the whole text), tiktoken (encode_batch of the lines),
                           tiktoken-whole (encode of the whole text, one thread)
  table RESULTS BYTES      the table of medians from bench_tokenize.sh's results file

Thread counts reach tokenizers' Rayon pool only through RAYON_NUM_THREADS, read when the
pool starts: `time` sets it (and TOKENIZERS_PARALLELISM=true) before importing tokenizers,
so each timed run is its own process.
"""
import os
import sys
import time


def byte_level_decoder():
    """GPT-2's bytes_to_unicode, inverted: code point -> byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cps, n = [], 0
    for b in range(256):
        if b in keep:
            cps.append(b)
        else:
            cps.append(256 + n)
            n += 1
    return {chr(c): b for b, c in enumerate(cps)}


GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def split_pattern(cfg):
    """The tokenizer.json's split regex (the first Split, or ByteLevel's own GPT-2 regex)."""
    pt = cfg["pre_tokenizer"]
    stages = pt["pretokenizers"] if pt["type"] == "Sequence" else [pt]
    pats = []
    for s in stages:
        if s["type"] == "Split":
            pats.append(s["pattern"]["Regex"])
        elif s["type"] == "ByteLevel" and s.get("use_regex", True):
            pats.append(GPT2_PATTERN)
    if len(pats) != 1:
        raise SystemExit("tokenize_ref.py: expected exactly one split regex, got %d" % len(pats))
    return pats[0]


def tiktoken_encoding(path):
    """A tiktoken Encoding from a byte-level BPE tokenizer.json: mergeable_ranks from the
    vocabulary (each token's byte-level string mapped back to bytes, rank = id), pat_str
    the tokenizer's split regex, the added tokens as special tokens. tiktoken has no
    normalizer: NFC (Qwen2) is not applied."""
    import json

    import tiktoken

    cfg = json.load(open(path, encoding="utf-8"))
    u2b = byte_level_decoder()
    added = {a["content"]: a["id"] for a in cfg["added_tokens"]}
    ranks = {}
    for tok, i in cfg["model"]["vocab"].items():
        if tok in added and added[tok] == i:
            continue
        ranks[bytes(u2b[c] for c in tok)] = i
    return tiktoken.Encoding(name=os.path.basename(path), pat_str=split_pattern(cfg),
                             mergeable_ranks=ranks, special_tokens=added)


def read_lines(corpus):
    text = open(corpus, encoding="utf-8").read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return text, lines


def hf(path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def cmd_corpus(out):
    import glob
    import gzip

    parts = []

    def add(b):
        if b"\0" in b:
            return
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            return
        parts.append(b if b.endswith(b"\n") else b + b"\n")

    for f in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(f) and not os.path.islink(f):
            add(open(f, "rb").read())
    for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if os.path.isfile(f) and not os.path.islink(f) and "." not in os.path.basename(f):
            add(open(f, "rb").read())
    here = os.path.dirname(os.path.abspath(__file__))
    add(open(os.path.join(here, "..", "tests", "tokenizer", "data", "corpus.txt"), "rb").read())
    for f in sorted(glob.glob("/usr/share/doc/*/changelog*.gz")):
        if sum(map(len, parts)) > 10_000_000:
            break
        try:
            add(gzip.open(f).read())
        except (OSError, EOFError):
            pass
    data = b"".join(parts)
    with open(out, "wb") as f:
        f.write(data)
    print("corpus: %s, %d bytes, %d lines" % (out, len(data), data.count(b"\n")))


def first_diff(a, b, lines):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return "line %d differs: %r\n  one:   %s\n  other: %s" % (i + 1, lines[i][:80], x[:20], y[:20])
    return "line counts differ: %d vs %d" % (len(a), len(b))


def cmd_check_ours(path, corpus, ids_file):
    _, lines = read_lines(corpus)
    ref = [e.ids for e in hf(path).encode_batch(lines, add_special_tokens=False)]
    with open(ids_file, encoding="ascii") as f:
        ours = [[int(x) for x in ln.split()] for ln in f.read().split("\n")[:-1]]
    if ours != ref:
        print("DIFFERENT %s: %s" % (os.path.basename(path), first_diff(ours, ref, lines)))
        return 1
    print("equal %s: dtrun tokenize == tokenizers on %d lines, %d tokens" %
          (os.path.basename(path), len(lines), sum(map(len, ref))))
    return 0


def cmd_check_tiktoken(path, corpus):
    _, lines = read_lines(corpus)
    ref = [e.ids for e in hf(path).encode_batch(lines, add_special_tokens=False)]
    enc = tiktoken_encoding(path)
    got = enc.encode_batch(lines, allowed_special="all")
    if got != ref:
        n = sum(1 for x, y in zip(got, ref) if x != y)
        print("DIFFERENT %s: tiktoken != tokenizers on %d of %d lines; %s" %
              (os.path.basename(path), n, len(lines), first_diff(got, ref, lines)))
        return 1
    print("equal %s: tiktoken == tokenizers on %d lines" % (os.path.basename(path), len(lines)))
    return 0


def cmd_time(lib, path, corpus, threads):
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    text, lines = read_lines(corpus)
    nbytes = len(text.encode("utf-8"))
    if lib in ("tiktoken", "tiktoken-whole"):
        enc = tiktoken_encoding(path)
        t0 = time.perf_counter()
        if lib == "tiktoken":
            enc.encode_batch(lines, num_threads=threads, allowed_special="all")
        else:
            enc.encode(text, allowed_special="all")
        dt = time.perf_counter() - t0
    else:
        tok = hf(path)
        t0 = time.perf_counter()
        if lib == "hf-batch":
            tok.encode_batch(lines, add_special_tokens=False)
        elif lib == "hf-single":
            tok.encode(text, add_special_tokens=False)
        else:
            raise SystemExit("tokenize_ref.py: unknown library %s" % lib)
        dt = time.perf_counter() - t0
    print("%.4f %d" % (dt, nbytes))
    return 0


def cmd_table(results, nbytes):
    """results: lines 'rep tokenizer impl threads seconds' -> median MB/s per row."""
    import statistics

    nbytes = int(nbytes)
    runs = {}
    order = []
    for ln in open(results):
        f = ln.split()
        if len(f) != 5:
            continue
        key = (f[1], f[2], int(f[3]))
        if key not in runs:
            runs[key] = []
            order.append(key)
        runs[key].append(float(f[4]))
    mbs = {k: nbytes / 1e6 / statistics.median(v) for k, v in runs.items()}
    toks = sorted({k[0] for k in order}, key=lambda t: [k[0] for k in order].index(t))
    print("| tokenizer | implementation | threads | MB/s (median of %d) | runs (s) | ours / fastest reference |"
          % max(len(v) for v in runs.values()))
    print("|---|---|---|---|---|---|")
    for tk in toks:
        for th in sorted({k[2] for k in order if k[0] == tk}):
            refs = [mbs[k] for k in order if k[0] == tk and k[2] == th and not k[1].startswith("dtrun")]
            best = max(refs) if refs else None
            for k in order:
                if k[0] != tk or k[2] != th:
                    continue
                ratio = "%.2f" % (mbs[k] / best) if best and k[1].startswith("dtrun") else ""
                print("| %s | %s | %d | %.2f | %s | %s |" %
                      (tk, k[1], th, mbs[k], " ".join("%.2f" % s for s in runs[k]), ratio))
    return 0


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    cmd, a = argv[1], argv[2:]
    if cmd == "corpus" and len(a) == 1:
        return cmd_corpus(*a) or 0
    if cmd == "check-ours" and len(a) == 3:
        return cmd_check_ours(*a)
    if cmd == "check-tiktoken" and len(a) == 2:
        return cmd_check_tiktoken(*a)
    if cmd == "time" and len(a) == 4:
        return cmd_time(a[0], a[1], a[2], int(a[3]))
    if cmd == "table" and len(a) == 2:
        return cmd_table(*a)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
