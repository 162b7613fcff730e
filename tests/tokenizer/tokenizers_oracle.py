#!/usr/bin/python3
"""Oracle for weir's tokenizers: Hugging Face `tokenizers` (PyPI), built from each file's own
vocabulary, merges, token types and pre-tokenizer, must give the same ids on a corpus of hard
strings, and weir's decode(encode(x)) must give x back wherever the tokenizer is lossless.

  tokenizers_oracle.py --weir BUILD/bin/weir [--shared ../shared] [--gemma FILE] [--keep DIR]

Vocabularies checked (each printed as "ok: ...", "FAIL: ..." or "skipped: ..."):
  1. tiny byte-level BPE trained here by tokenizers' BpeTrainer, written as a tokenizer-only GGUF
     once per pre-tokenizer name of weir's registry (tokenizer.ggml.pre = that name);
  2. tiny SentencePiece-style vocabulary (scores, <0xNN> byte fallback, a user-defined symbol,
     control tokens) derived from a trained BPE, as GGUF tokenizer.ggml.model = llama;
  3. SmolLM2-135M-Instruct (shared/models) with its own pre (smollm) and, with `weir tokenize
     --pre`, every other registry name over its 49k vocabulary;
  4. Gemma 3 270M (model cache), 262k SentencePiece vocabulary.
Absent real files are skipped. Exit status 0 when everything compared is equal, 1 on any
difference, 77 (ctest's SKIP_RETURN_CODE) when the tokenizers or gguf package is missing.

How the reference is built (written from the tokenizers documentation, not from weir's code):
  byte-level: models.BPE(vocab, merges, ignore_merges for Llama 3's pre), pre-tokenizer Sequence
    of Split(Regex, "isolated") per stage of the pre-tokenizer as its model family's
    tokenizer.json states it (PRE_REGEXES below), then ByteLevel(use_regex=False);
  SentencePiece: models.BPE with byte_fallback, merges derived from the scores (every pair of
    pieces whose concatenation is a piece, ranked by that piece's score, as tokenizers'
    SentencePiece converter does), normalizer Replace(" ", "▁") (with Prepend("▁") when
    add_space_prefix), no pre-tokenizer;
  control tokens as special added tokens, user-defined tokens as non-special added tokens.
Special tokens are compared both ways: parsed (weir's default, tokenizers' default) and as text
(weir --no-special, tokenizers' encode_special_tokens = True).
Invalid UTF-8 cannot be given to tokenizers (it takes str); those inputs are only round-tripped.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import gguf
    import tokenizers
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, trainers
except ImportError as e:
    print("skipped: %s (pip install tokenizers==0.22.1 gguf==0.19.0)" % e)
    sys.exit(77)

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
         r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
    "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
    "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
    "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+")
CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"

# name -> (split regexes in order, ignore_merges)
PRE_REGEXES = {
    "default": ([GPT2], False),
    "gpt2": ([GPT2], False),
    "gpt-2": ([GPT2], False),
    "phi-2": ([GPT2], False),
    "smollm": ([r"\p{N}", GPT2], False),
    "starcoder": ([r"\p{N}", GPT2], False),
    "llama-bpe": ([LLAMA3], True),
    "llama3": ([LLAMA3], True),
    "qwen2": ([QWEN2], False),
    "deepseek-llm": ([r"[\r\n]", DEEPSEEK_LETTERS,
                      "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
                      r"\s+$", CJK, r"\p{N}+"], False),
    "deepseek-coder": ([r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"], False),
}

HARD = [
    "Hello world", "Hello, World!", " leading space", "trailing space ", "  two leading",
    "it's we'll they're I'd you've she'S DON'T 'tis", "I'M HERE 'LL",
    "1 12 123 1234 12345 123456789012 3.14159 1,000,000 0x1F -42 ٣٤٥ ½ ²",
    "2024-11-25T13:54:41Z", "phone: +1 (555) 123-4567",
    "def f(x):\n    return x**2  # square\n\n\tif x:\n\t\tpass\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * 2; }",
    "<div class=\"x\">&amp; &lt;tag&gt;</div>", "https://example.com/a?b=c&d=e#f",
    "中文字符测试，你好世界。", "日本語のテキスト、カタカナ", "한국어 텍스트입니다",
    "Привет, мир! Ёжик", "Ελληνικά γράμματα", "עברית ועוד", "العربية ١٢٣", "हिन्दी पाठ",
    "emoji 😀😃😄 👨‍👩‍👧‍👦 🇫🇷 ✨👍🏽", "math ∑∫√∞ ≠ ≤ ≥ → ⇒ ∀x∃y",
    "tabs\tand\nnewlines\n\n\nand\r\nCRLF\r\n", "   \n   \n\n    x", "\n", " ", "  ", "\t\t",
    "a  b   c    d     e", "end with newline\n", "\u00a0non-breaking\u2009thin\u3000ideographic",
    "café naïve résumé façade", "Ǆǅǆ ǈ ʰʱ ƻ ǀ", "ﬁ ﬂ Ａ Ｚ ａ ｚ ！ ？",
    "mixed123abc456DEF", "___init___ --flag ...... !!!???", "a'b'c'", "''''", "\"quoted\"",
    "Ω K Å ℃ №", "𐐀𐐨 𞤀", "\u200bzero\u200dwidth\ufeff",
    "ALL CAPS SENTENCE WITH 'S", "x" * 200, "ab" * 150, "9" * 40, " " * 17 + "z",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "text<|endoftext|>more", "<s>[INST] hi [/INST]</s>", "<|im_start|><|im_start|>",
    "▁already▁marked", "\u2581",
]
INVALID_UTF8 = [b"\xff\xfe bad", b"caf\xc3", b"\xc3\x28", b"\xe2\x82", b"ok\x80\x80ok", b"\xf0\x9f\x98",
                b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong"]


def wikitext_lines(shared, max_bytes=40000):
    path = os.path.join(shared, "data", "wikitext-2", "wiki.test.raw")
    if not os.path.exists(path):
        return [], None
    with open(path, encoding="utf-8") as f:
        text = f.read(max_bytes)
    lines = [l for l in text.split("\n") if l.strip()][:200]
    return lines, text[:20000]


def run_weir(weir, gguf_path, texts, workdir, extra):
    inp = os.path.join(workdir, "batch.hex")
    with open(inp, "w") as f:
        for t in texts:
            f.write((t if isinstance(t, bytes) else t.encode("utf-8")).hex() + "\n")
    cmd = [weir, "tokenize", "-m", gguf_path, "--no-bos", "--batch", inp] + extra
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd), r.stderr.decode(errors="replace")))
    out = []
    for line in r.stdout.decode().split("\n")[: len(texts)]:
        ids, hexed = line.split("\t")
        out.append(([int(x) for x in ids.split()] if ids else [], bytes.fromhex(hexed)))
    if len(out) != len(texts):
        raise RuntimeError("weir printed %d lines for %d texts" % (len(out), len(texts)))
    return out


def read_vocab(path):
    r = gguf.GGUFReader(path)

    def field(name, default=None):
        f = r.fields.get(name)
        return default if f is None else f.contents()

    return {
        "model": field("tokenizer.ggml.model"),
        "pre": field("tokenizer.ggml.pre", "default"),
        "tokens": field("tokenizer.ggml.tokens"),
        "types": field("tokenizer.ggml.token_type"),
        "scores": field("tokenizer.ggml.scores"),
        "merges": field("tokenizer.ggml.merges", []),
        "add_space_prefix": bool(field("tokenizer.ggml.add_space_prefix",
                                       field("tokenizer.ggml.model") == "llama")),
        "unk": field("tokenizer.ggml.unknown_token_id"),
    }


def add_specials(tk, v):
    special, user = [], []
    for i, (piece, t) in enumerate(zip(v["tokens"], v["types"])):
        if t in (2, 3):
            special.append(AddedToken(piece, special=True, normalized=False))
        elif t == 4:
            user.append(AddedToken(piece, special=False, normalized=False))
    tk.add_special_tokens(special)
    tk.add_tokens(user)


def hf_byte_level(v, pre_name):
    regexes, ignore_merges = PRE_REGEXES[pre_name]
    vocab = {}
    for i, p in enumerate(v["tokens"]):
        vocab.setdefault(p, i)
    merges = [tuple(m.split(" ", 1)) for m in v["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    add_specials(tk, v)
    return tk


def hf_sentencepiece(v):
    tokens, types, scores = v["tokens"], v["types"], v["scores"]
    vocab = {}
    for i, p in enumerate(tokens):
        vocab.setdefault(p, i)
    mergeable = {p: i for p, i in vocab.items() if types[i] in (1, 4)}
    merges = []
    for piece, i in mergeable.items():
        if types[i] != 1 and types[i] != 4:
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in mergeable and right in mergeable:
                merges.append((-float(scores[i]), i, left, right))
    merges.sort()
    unk = tokens[v["unk"]] if v["unk"] is not None else None
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[(l, r) for _, _, l, r in merges],
                              byte_fallback=True, unk_token=unk, fuse_unk=True))
    norms = [normalizers.Replace(" ", "\u2581")]
    if v["add_space_prefix"]:
        norms.insert(0, normalizers.Prepend("\u2581"))
    tk.normalizer = normalizers.Sequence(norms)
    tk.pre_tokenizer = None
    add_specials(tk, v)
    return tk


def bytes_to_unicode():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def byte_level_lossless(v):
    """decode(encode(x)) == x when every byte of x has a token: a vocabulary trained on UTF-8
    text may lack bytes that never occur in it (SmolLM2 has no token for 0xC0, 0xC1, 0xF5-0xFF),
    and those become unk."""
    pieces = set(v["tokens"])
    have = {b for b, ch in bytes_to_unicode().items() if ch in pieces}
    return lambda raw: all(b in have for b in raw)


def sentencepiece_lossless(v):
    """Lossless unless the text holds the space marker itself, or, with the space prefix, a
    user-defined piece (the text after it gets a prefix of its own, which decodes as a space)."""
    user = [p.encode() for p, t in zip(v["tokens"], v["types"]) if t == 4]
    marker = "\u2581".encode()

    def ok(raw):
        if marker in raw:
            return False
        return not (v["add_space_prefix"] and any(u in raw for u in user))
    return ok


class Report:
    def __init__(self):
        self.failures = 0
        self.checked = 0

    def ok(self, msg):
        print("ok: " + msg)

    def fail(self, msg):
        self.failures += 1
        print("FAIL: " + msg)

    def skip(self, msg):
        print("skipped: " + msg)


def compare(rep, label, weir, gguf_path, v, hf, texts, workdir, extra=(), lossless=True):
    """Encodes `texts` with both, parsing special tokens and not; round-trips the latter."""
    str_texts = [t for t in texts if isinstance(t, str)]
    bad_utf8 = [t for t in texts if isinstance(t, bytes)]
    total = 0
    bad = 0
    for special in (True, False):
        flags = list(extra) + ([] if special else ["--no-special"])
        got = run_weir(weir, gguf_path, str_texts + bad_utf8, workdir, flags)
        hf.encode_special_tokens = not special
        want = hf.encode_batch(str_texts, add_special_tokens=False)
        for t, (ids, _), enc in zip(str_texts, got, want):
            total += 1
            if ids != enc.ids:
                bad += 1
                if bad <= 5:
                    rep.fail("%s%s: %r\n  weir %s\n  hf   %s" % (
                        label, "" if special else " --no-special", t[:80], ids[:40], enc.ids[:40]))
        if special:
            continue
        # decode(encode(x)) == x, invalid UTF-8 included, where the tokenizer is lossless.
        for t, (ids, decoded) in zip(str_texts + bad_utf8, got):
            raw = t if isinstance(t, bytes) else t.encode("utf-8")
            if not lossless(raw):
                continue
            total += 1
            if decoded != raw:
                bad += 1
                if bad <= 5:
                    rep.fail("%s: decode(encode(x)) != x for %r: %r" % (label, raw[:60], decoded[:60]))
    rep.checked += total
    if bad == 0:
        rep.ok("%s: %d comparisons equal (%d texts)" % (label, total, len(texts)))


def write_gguf(path, tokens, types, model, pre=None, merges=None, scores=None, bos=None, eos=None,
               unk=None, add_space_prefix=False):
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model(model)
    if pre:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(merges)
    if scores is not None:
        w.add_token_scores(scores)
    for key, val in (("bos", bos), ("eos", eos), ("unk", unk)):
        if val is not None:
            getattr(w, "add_%s_token_id" % key)(val)
    w.add_add_bos_token(False)
    w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def train_byte_level(training_text, vocab_size=900):
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tk.train_from_iterator(training_text, trainer)
    model = json.loads(tk.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    tokens = [p for p, _ in vocab]
    types = [3 if p in specials else 1 for p in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges


def train_sentencepiece_like(training_text, vocab_size=700):
    """A SentencePiece-style vocabulary: "▁"-marked pieces from BPE training, scores that follow
    the merge order, 256 <0xNN> byte tokens, control and user-defined tokens."""
    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.Replace(" ", "\u2581")
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False)
    tk.train_from_iterator(training_text, trainer)
    model = json.loads(tk.to_str())["model"]
    merged = {}
    for rank, m in enumerate(model["merges"]):
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        merged.setdefault(left + right, rank)
    tokens = ["<unk>", "<s>", "</s>", "<start_of_turn>", "<end_of_turn>", "\n\n"]
    types = [2, 3, 3, 3, 3, 4]
    scores = [0.0, 0.0, 0.0, -1000.0, -1000.0, -1000.0]
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        types.append(6)
        scores.append(0.0)
    for piece, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]):
        if piece in tokens:
            continue
        tokens.append(piece)
        types.append(1)
        scores.append(-float(merged[piece]) if piece in merged else -1e6)
    return tokens, types, scores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", required=True)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                     "shared"))
    ap.add_argument("--gemma", default=os.path.expanduser(
        "~/.cache/weir/models/gemma-3-270m-Q4_K_M.gguf"))
    ap.add_argument("--keep", help="write the generated files here instead of a temporary folder")
    args = ap.parse_args()
    print("tokenizers %s, gguf-py" % tokenizers.__version__)

    rep = Report()
    wiki, wiki_block = wikitext_lines(args.shared)
    if not wiki:
        rep.skip("wikitext-2 absent from %s: the corpus is the hard strings only" % args.shared)
    texts = HARD + wiki + ([wiki_block] if wiki_block else []) + INVALID_UTF8
    training = HARD + wiki + ["The quick brown fox jumps over the lazy dog. " * 3,
                              "def main():\n    print('hello')\n" * 3]

    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.keep or tmp
        os.makedirs(workdir, exist_ok=True)

        # 1. Tiny byte-level BPE, one GGUF per pre-tokenizer name.
        tokens, types, merges = train_byte_level(training)
        for name in PRE_REGEXES:
            path = os.path.join(workdir, "tiny-bpe-%s.gguf" % name)
            write_gguf(path, tokens, types, "gpt2", pre=name, merges=merges, eos=0)
            v = read_vocab(path)
            compare(rep, "tiny byte-level BPE, pre %s" % name, args.weir, path, v,
                    hf_byte_level(v, name), texts, workdir, lossless=byte_level_lossless(v))

        # 2. Tiny SentencePiece-style vocabulary, with and without the space prefix.
        tokens, types, scores = train_sentencepiece_like(training)
        for prefix in (False, True):
            path = os.path.join(workdir, "tiny-spm-%d.gguf" % prefix)
            write_gguf(path, tokens, types, "llama", scores=scores, bos=1, eos=2, unk=0,
                       add_space_prefix=prefix)
            v = read_vocab(path)
            compare(rep, "tiny SentencePiece (add_space_prefix %s)" % prefix, args.weir, path, v,
                    hf_sentencepiece(v), texts, workdir, lossless=sentencepiece_lossless(v))

        # 3. SmolLM2: its own pre (smollm), then its vocabulary under every registry name.
        smollm = os.path.join(args.shared, "models", "smollm2-135m-instruct",
                              "SmolLM2-135M-Instruct.Q4_1.gguf")
        if os.path.exists(smollm):
            v = read_vocab(smollm)
            compare(rep, "SmolLM2 (pre %s)" % v["pre"], args.weir, smollm, v,
                    hf_byte_level(v, v["pre"]), texts, workdir, lossless=byte_level_lossless(v))
            for name in PRE_REGEXES:
                if name == v["pre"]:
                    continue
                compare(rep, "SmolLM2 vocabulary, --pre %s" % name, args.weir, smollm, v,
                        hf_byte_level(v, name), texts, workdir, extra=["--pre", name],
                        lossless=byte_level_lossless(v))
        else:
            rep.skip("%s absent" % smollm)

        # 4. Gemma 3 270M.
        if os.path.exists(args.gemma):
            v = read_vocab(args.gemma)
            compare(rep, "Gemma 3 270M (SentencePiece, %d tokens)" % len(v["tokens"]), args.weir,
                    args.gemma, v, hf_sentencepiece(v), texts, workdir,
                    lossless=sentencepiece_lossless(v))
        else:
            rep.skip("%s absent (scripts/fetch-gemma3)" % args.gemma)

    print("%d comparisons, %d failures" % (rep.checked, rep.failures))
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
