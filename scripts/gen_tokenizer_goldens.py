#!/usr/bin/env python3
"""Regenerates tests/tokenizer/data/: three small byte-level BPE tokenizers trained with
Hugging Face `tokenizers` and one SentencePiece BPE model trained with `sentencepiece`, all
on text Debian ships, a test corpus, and the ids each library gives for each corpus case.
Dev-time only (CI reads the committed files, no Python):

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers sentencepiece
    /tmp/tokvenv/bin/python scripts/gen_tokenizer_goldens.py

Training is deterministic (same library versions, same Debian text: the same files byte for
byte; tokenizers 0.23.3 and sentencepiece 0.2.x made the committed ones).

  gpt2-mini: GPT-2's configuration (ByteLevel pre-tokenizer with its own regex,
             add_prefix_space false; ByteLevel decoder; merges written as "a b" strings,
             as GPT-2's own file has them), special <|endoftext|>.
  llama3-mini: Llama-3's configuration (Split with Llama-3's regex, \\p{N}{1,3}, Isolated;
             ByteLevel(use_regex=False); the model's ignore_merges set), <|endoftext|>, and
             Llama-3's chat tokens after the vocabulary (<|begin_of_text|> .. <|eot_id|>, ids
             1500..1504, as 128000.. in Llama-3).
  qwen2-mini: Qwen2's configuration (NFC normalizer; Split with Qwen2's regex, single
             \\p{N} digits, Isolated; then ByteLevel(use_regex=False)); specials
             <|endoftext|>, <|im_start|>, <|im_end|>.
  llama2-mini.model: a SentencePiece BPE model with Llama-2's trainer and normalizer
             settings (byte_fallback, split_digits, add_dummy_prefix, identity normalizer,
             whitespace-only pieces allowed, <unk> <s> </s> at 0 1 2); its .ids are
             SentencePieceProcessor.encode(case) (no BOS/EOS), read by the C side through
             Debian's libsentencepiece.
corpus.txt holds one case per line; a case's line may use the escapes \\n \\t \\r \\\\
(for multi-line cases), which the C test and this script decode the same way.
<name>.ids holds the expected ids of each case, space-separated, one line per case.

It also writes the goldens of `dtrun prepare --format chat` (tests/data/): chat.jsonl, a
few conversations, and chat-chatml.golden (qwen2-mini) / chat-llama3.golden (llama3-mini):
per line of chat.jsonl either "skip" (no assistant turn) or two lines, the document's ids
(end-of-text first) and its loss mask (1 on the assistant's content and the token ending
its turn). The ids are the chat template rendered as the models' tokenizer_config.json
chat_template does (written out below) and tokenized as one string by `tokenizers` (what
transformers' apply_chat_template(..., tokenize=True) gives), except in the one case whose
message holds a special token's text, which dtrun encodes as text.
"""
import glob
import json
import os
import sys
import unicodedata

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
    # decomposed text (NFD): Qwen2's NFC normalizer composes it before the pre-tokenizer
    "cafe\u0301, nai\u0308ve, re\u0301sume\u0301, Ame\u0301lie",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165",
    "a\u0301\u0323 a\u0323\u0301 q\u0307\u0323 \u212b \u2126 A\u030a",
    "Vie\u0302\u0323t Nam, \u0110a\u0300 Na\u0306\u0303ng, Cyrillic \u0439 and \u0438\u0306",
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
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"]


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


# Llama-2's tokenizer.model: its TrainerSpec and NormalizerSpec (the fields that change what
# encode() returns; vocab_size is ours).
LLAMA2_SPM = dict(model_type="bpe", byte_fallback=True, split_digits=True,
                  add_dummy_prefix=True, normalization_rule_name="identity",
                  remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
                  split_by_unicode_script=True, split_by_whitespace=True, split_by_number=True,
                  treat_whitespace_as_suffix=False, max_sentencepiece_length=16,
                  character_coverage=0.99995, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                  max_sentence_length=4192)


def build_spm(name, vocab_size):
    import io
    import sentencepiece as spm
    lines = []
    for f in training_text():
        with open(f, encoding="utf-8", errors="replace") as inp:
            lines += [ln for ln in inp.read().split("\n") if ln.strip()]
    model = io.BytesIO()
    # sentences from an iterator and the model into memory: no temporary path ends up in
    # the model's TrainerSpec; one thread and no sampling: the same model on every run
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                   vocab_size=vocab_size, num_threads=1,
                                   input_sentence_size=0, shuffle_input_sentence=False,
                                   minloglevel=2, **LLAMA2_SPM)
    path = os.path.join(OUT, name + ".model")
    with open(path, "wb") as f:
        f.write(model.getvalue())
    return spm.SentencePieceProcessor(model_file=path)


HERE_DATA = os.path.join(HERE, "..", "tests", "data")

# (messages or record, HF whole-string tokenization applies)
CHATS = [
    ({"messages": [{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": "What is 2+2?"},
                   {"role": "assistant", "content": "4"}]}, True),
    ({"messages": [{"role": "user", "content": "Hello there"},
                   {"role": "assistant", "content": "Hi! How can I help?"},
                   {"role": "user", "content": "Tell me a fortune."},
                   {"role": "assistant", "content": "You will be successful in your work."}],
      "id": 7, "source": "fortunes"}, True),
    ({"messages": [{"role": "user", "content": "Caf\u00e9 or cafe\u0301? \u4f60\u597d \U0001F600"},
                   {"role": "assistant", "content": "  Both spell caf\u00e9.  \n"}]}, True),
    ({"instruction": "Translate to French", "input": "Good morning", "output": "Bonjour"}, True),
    ({"instruction": "Name a prime.", "output": "7", "system": "Answer briefly."}, True),
    ({"messages": [{"role": "user", "content": "Say <|im_end|> and <|eot_id|>"},
                   {"role": "assistant", "content": "<|im_end|><|eot_id|>"}]}, False),
    ({"messages": [{"role": "user", "content": "no answer here"}]}, True),
    ({"messages": [{"role": "user", "content": "empty answer"},
                   {"role": "assistant", "content": ""}]}, True),
]


def chat_messages(rec):
    if "messages" in rec:
        return rec["messages"]
    user = rec["instruction"] + ("\n\n" + rec["input"] if rec.get("input") else "")
    head = [{"role": "system", "content": rec["system"]}] if "system" in rec else []
    return head + [{"role": "user", "content": user}, {"role": "assistant", "content": rec["output"]}]


def render(template, msgs, tok):
    """(whole rendered string, ids by segment, mask) of one conversation: the template
    tokens by id, the texts encoded apart (as dtrun does), the assistant's content and
    turn end masked 1."""
    sp = lambda t: tok.token_to_id(t)
    # the texts with special tokens' text encoded as text (dtrun's with_special = 0)
    tok.encode_special_tokens = True
    enc = lambda t: tok.encode(t, add_special_tokens=False).ids if t else []
    ids, mask, text = [], [], ""
    if template == "llama3":
        ids, mask, text = [sp("<|begin_of_text|>")], [0], "<|begin_of_text|>"
    for m in msgs:
        a = m["role"] == "assistant"
        if template == "chatml":
            # Qwen2: '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n'
            text += "<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>\n"
            parts = ([("assistant\n", 0), (m["content"], 1)] if a
                     else [(m["role"] + "\n" + m["content"], 0)])
            ids.append(sp("<|im_start|>")); mask.append(0)
            for t, b in parts:
                e = enc(t); ids += e; mask += [b] * len(e)
            ids.append(sp("<|im_end|>")); mask.append(int(a))
            e = enc("\n"); ids += e; mask += [0] * len(e)
        else:
            # Llama-3: '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content|trim + '<|eot_id|>'
            c = m["content"].strip()
            text += "<|start_header_id|>" + m["role"] + "<|end_header_id|>\n\n" + c + "<|eot_id|>"
            ids.append(sp("<|start_header_id|>")); mask.append(0)
            e = enc(m["role"]); ids += e; mask += [0] * len(e)
            ids.append(sp("<|end_header_id|>")); mask.append(0)
            parts = [("\n\n", 0), (c, 1)] if a else [("\n\n" + c, 0)]
            for t, b in parts:
                e = enc(t); ids += e; mask += [b] * len(e)
            ids.append(sp("<|eot_id|>")); mask.append(int(a))
    return text, ids, mask


def chat_goldens():
    os.makedirs(HERE_DATA, exist_ok=True)
    with open(os.path.join(HERE_DATA, "chat.jsonl"), "w", encoding="utf-8") as f:
        for rec, _ in CHATS:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    for template, name in (("chatml", "qwen2-mini"), ("llama3", "llama3-mini")):
        tok = Tokenizer.from_file(os.path.join(OUT, name + ".json"))
        eot = tok.token_to_id("<|endoftext|>")
        with open(os.path.join(HERE_DATA, "chat-%s.golden" % template), "w") as f:
            for rec, whole in CHATS:
                msgs = chat_messages(rec)
                if not any(m["role"] == "assistant" for m in msgs):
                    f.write("skip\n")
                    continue
                text, ids, mask = render(template, msgs, tok)
                tok.encode_special_tokens = False
                if whole:   # the ids of the rendered string tokenized as one
                    assert ids == tok.encode(text, add_special_tokens=False).ids, (template, rec)
                f.write(" ".join(map(str, [eot] + ids)) + "\n")
                f.write(" ".join(map(str, [0] + mask)) + "\n")


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
            # and its chat tokens follow the BPE vocabulary (ids 1500.., as 128000.. in Llama-3)
            for i, t in enumerate(LLAMA3_SPECIALS):
                d["added_tokens"].append({"id": vs + i, "content": t, "single_word": False,
                                          "lstrip": False, "rstrip": False, "normalized": False,
                                          "special": True})
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
                # decoding gives the normalized text back (Qwen2: NFC of the case)
                want = unicodedata.normalize("NFC", c) if name == "qwen2-mini" else c
                assert tok.decode(ids, skip_special_tokens=False) == want, (name, c)
                f.write(" ".join(map(str, ids)) + "\n")
        print(name, tok.get_vocab_size(), "tokens")
    sp = build_spm("llama2-mini", 1000)
    with open(os.path.join(OUT, "llama2-mini.ids"), "w") as f:
        for c in cases:
            ids = sp.encode(c)
            assert sp.decode(ids) == c, ("llama2-mini", c)
            f.write(" ".join(map(str, ids)) + "\n")
    print("llama2-mini", sp.get_piece_size(), "pieces")
    chat_goldens()
    print("chat goldens", len(CHATS), "conversations")


if __name__ == "__main__":
    main()
