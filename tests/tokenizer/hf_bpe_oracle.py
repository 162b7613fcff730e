#!/usr/bin/python3
"""Independent reference for Hugging Face `tokenizers` BPE encoding, standard library only.

Written from the documented behaviour of tokenizers' BPE model, not from weir's C++ code, so the
tokenizer tests can compare the two. It deliberately uses a different merge algorithm from
weir's (the textbook GPT-2 loop: find the adjacent pair with the lowest merge rank, merge every
occurrence left to right, repeat), which gives the same result as tokenizers' priority queue for
merge lists produced by training (a merge is never ranked before the merges that build its parts).

Commands:
  encode TOKENIZER_JSON INPUTS_JSON
      INPUTS_JSON holds a JSON list of strings; prints a JSON list with the token ids of each
      (no special tokens added). Supported pieces of tokenizer.json: normalizer null / Sequence /
      Prepend / Replace (string pattern) / NFC / NFD / NFKC / NFKD; pre_tokenizer null / ByteLevel
      / Metaspace; model BPE with unk_token, byte_fallback, fuse_unk. Anything else is an error.
      An input that contains an added token's text is an error too (weir does not parse special
      tokens out of text, so the comparison would be meaningless).
  train-byte-level TEXT_FILE N_MERGES OUT_JSON
      Trains a tiny GPT-2 style byte-level BPE (256 byte symbols, N_MERGES merges, one special
      token "<|endoftext|>") on TEXT_FILE and writes it as a tokenizer.json.
"""

import json
import re
import sys
import unicodedata

# GPT-2's pre-tokenizer pattern written for Python's re: [^\W\d_] is a letter, \d a digit.
GPT2_SPLIT = re.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def fail(msg):
    sys.stderr.write("hf_bpe_oracle: " + msg + "\n")
    sys.exit(2)


def normalize(spec, text):
    if spec is None:
        return text
    kind = spec["type"]
    if kind == "Sequence":
        for sub in spec["normalizers"]:
            text = normalize(sub, text)
        return text
    if kind == "Prepend":
        return spec["prepend"] + text if text else text
    if kind == "Replace":
        pattern = spec["pattern"]
        if "String" not in pattern:
            fail("Replace with a regex pattern is not supported")
        return text.replace(pattern["String"], spec["content"])
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return unicodedata.normalize(kind, text)
    fail("normalizer %s is not supported" % kind)


def pre_tokenize(spec, text):
    """Returns the list of words (strings of model symbols) of a normalized text."""
    if spec is None:
        return [text] if text else []
    kind = spec["type"]
    if kind == "ByteLevel":
        if spec.get("add_prefix_space") and not text.startswith(" "):
            text = " " + text
        words = GPT2_SPLIT.findall(text) if spec.get("use_regex", True) else [text]
        table = bytes_to_unicode()
        return ["".join(table[b] for b in w.encode("utf-8")) for w in words]
    if kind == "Metaspace":
        rep = spec.get("replacement", "\u2581")
        text = text.replace(" ", rep)
        scheme = spec.get("prepend_scheme", "always")
        if scheme in ("always", "first") and not text.startswith(rep):
            text = rep + text
        if not spec.get("split", True):
            return [text] if text else []
        words, cur = [], ""
        for ch in text:
            if ch == rep and cur:
                words.append(cur)
                cur = ""
            cur += ch
        if cur:
            words.append(cur)
        return words
    fail("pre_tokenizer %s is not supported" % kind)


class Bpe:
    def __init__(self, model):
        if model.get("type") != "BPE":
            fail("model type %s is not supported" % model.get("type"))
        for key in ("continuing_subword_prefix", "end_of_word_suffix"):
            if model.get(key):
                fail("%s is not supported" % key)
        if model.get("ignore_merges"):
            fail("ignore_merges is not supported")
        self.vocab = model["vocab"]
        self.ranks = {}
        for rank, m in enumerate(model["merges"]):
            pair = tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
            if len(pair) != 2:
                fail("bad merge %r" % (m,))
            self.ranks.setdefault(pair, rank)
        self.unk = model.get("unk_token")
        self.byte_fallback = bool(model.get("byte_fallback"))
        self.fuse_unk = bool(model.get("fuse_unk"))
        # Adjacent character pairs that occur inside some piece. A merged symbol is a piece
        # whose text is the concatenation of the symbols it covers, so no symbol can ever span two
        # neighbours whose boundary characters form a pair outside this set: the symbol list can
        # be cut there and each part merged alone. This only makes the oracle faster.
        self.inner_pairs = set()
        for piece in self.vocab:
            for a, b in zip(piece, piece[1:]):
                self.inner_pairs.add((a, b))

    def initial_symbols(self, word):
        """The word's characters as pieces, with byte fallback and unk (fused when enabled)."""
        symbols = []
        pending_unk = False
        for ch in word:
            if ch in self.vocab:
                symbols.append(ch)
                pending_unk = False
                continue
            if self.byte_fallback:
                pieces = ["<0x%02X>" % b for b in ch.encode("utf-8")]
                if all(p in self.vocab for p in pieces):
                    symbols.extend(pieces)
                    pending_unk = False
                    continue
            if self.unk is None:
                fail("character %r is not in the vocabulary and there is no unk" % ch)
            if not (self.fuse_unk and pending_unk):
                symbols.append(self.unk)
            pending_unk = True
        return symbols

    def merge(self, symbols):
        while len(symbols) > 1:
            best = None
            for pair in zip(symbols, symbols[1:]):
                rank = self.ranks.get(pair)
                if rank is not None and (best is None or rank < best[0]):
                    best = (rank, pair)
            if best is None:
                break
            left, right = best[1]
            merged = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == left and symbols[i + 1] == right:
                    merged.append(left + right)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        return symbols

    def encode_word(self, word):
        symbols = self.initial_symbols(word)
        out, start = [], 0
        for i in range(1, len(symbols) + 1):
            if i == len(symbols) or (symbols[i - 1][-1], symbols[i][0]) not in self.inner_pairs:
                out.extend(self.merge(symbols[start:i]))
                start = i
        return [self.vocab[s] for s in out]


def encode(tokenizer_path, inputs_path):
    with open(tokenizer_path, encoding="utf-8") as f:
        tok = json.load(f)
    with open(inputs_path, encoding="utf-8") as f:
        inputs = json.load(f)
    bpe = Bpe(tok["model"])
    added = [t["content"] for t in tok.get("added_tokens", [])]
    results = []
    for text in inputs:
        for a in added:
            if a in text:
                fail("input contains added token %r" % a)
        words = pre_tokenize(tok.get("pre_tokenizer"), normalize(tok.get("normalizer"), text))
        ids = []
        for w in words:
            ids.extend(bpe.encode_word(w))
        results.append(ids)
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")


def train_byte_level(text_path, n_merges, out_path):
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    table = bytes_to_unicode()
    counts = {}
    for w in GPT2_SPLIT.findall(text):
        key = tuple(table[b] for b in w.encode("utf-8"))
        counts[key] = counts.get(key, 0) + 1
    words = [[list(k), c] for k, c in counts.items()]
    vocab = {table[b]: b for b in range(256)}
    merges = []
    for _ in range(n_merges):
        pair_counts = {}
        for symbols, c in words:
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] = pair_counts.get(pair, 0) + c
        if not pair_counts:
            break
        best = min(pair_counts, key=lambda p: (-pair_counts[p], p))
        merges.append(best[0] + " " + best[1])
        vocab[best[0] + best[1]] = len(vocab)
        for entry in words:
            symbols = entry[0]
            i, merged = 0, []
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == best[0] and symbols[i + 1] == best[1]:
                    merged.append(best[0] + best[1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            entry[0] = merged
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def main(argv):
    if len(argv) == 4 and argv[1] == "encode":
        encode(argv[2], argv[3])
    elif len(argv) == 5 and argv[1] == "train-byte-level":
        train_byte_level(argv[2], int(argv[3]), argv[4])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main(sys.argv)
