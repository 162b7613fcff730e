#!/usr/bin/python3
"""Validates the numpy oracle (weir_ref.py) itself, before weir is compared against it.

  check_oracle.py SHARED_DIR

Checks, each printed as "ok: ..." or "FAIL: ...":
  1. Element decoders: hand-built Q8_0 / Q4_0 / F16 / BF16 blocks decode to known values (the
     Q4_0 nibble order included), through a GGUF file written here; the gguf package (used for
     every other type) decodes the Q8_0 / Q4_0 blocks the same way. Gemma 3's GELU and
     sliding-window mask give hand-computed values; so does mixture-of-experts routing, and an
     MoE layer of identical experts equals the dense MLP.
  2. GGUF metadata of every value type, arrays included, round-trips; every truncation of a
     GGUF header is a clean ModelError.
  3. Real models (skipped when absent): stories260K.bin greedy from BOS reproduces llama2.c's
     published text; TinyStories-656K (safetensors) greedy from BOS gives its known opening;
     the GGUF conversions give the same logits as the originals; per-layer head counts and d_ff
     (GGUF arrays, v2, 64-byte alignment) equal the full model with the dropped heads' and units'
     output columns zeroed.
Exit code 0 when nothing failed.
"""

import copy
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weir_ref  # noqa: E402
from gguf_writer import model_to_gguf, narrow_last_layer, write_gguf  # noqa: E402

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


# ----------------------------------------------------------------------------------------------
# Token pieces, for turning greedy ids into text (tokenization proper is not the oracle's job).

def llama2c_pieces(path):
    with open(path, "rb") as f:
        data = f.read()
    pos, pieces = 4, []
    while pos < len(data):
        _score, n = struct.unpack_from("<fi", data, pos)
        pieces.append(data[pos + 8:pos + 8 + n])
        pos += 8 + n
    return pieces


def hf_pieces(path):
    with open(path) as f:
        vocab = json.load(f)["model"]["vocab"]
    pieces = [b""] * len(vocab)
    for piece, i in vocab.items():
        pieces[i] = piece.replace("\u2581", " ").encode()
    return pieces


def decode(pieces, ids):
    out = b""
    for i in ids:
        p = pieces[i]
        if p.startswith(b"<0x") and p.endswith(b">") and len(p) == 6:
            p = bytes([int(p[3:5], 16)])
        out += p
    return out.decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------------------------

def check_decoders(tmp):
    f16 = lambda x: struct.pack("<e", x)  # noqa: E731
    # Q8_0: d = 0.5, q = -16..15  ->  x = 0.5 * q
    q8 = f16(0.5) + bytes((q & 0xFF) for q in range(-16, 16))
    # Q4_0: d = 0.25, byte j = lo(j) | hi(j) << 4 with lo = j, hi = 15 - j
    #       -> value j = 0.25 * (j - 8), value j + 16 = 0.25 * (7 - j)
    q4 = f16(0.25) + bytes(j | ((15 - j) << 4) for j in range(16))
    vals = [1.0, -2.5, 65504.0, 2.0 ** -24]
    f16s = b"".join(f16(v) for v in vals)
    bf16s = b"".join(struct.pack("<f", v)[2:] for v in (1.0, -3.0, 0.15625, 1e30))
    path = os.path.join(tmp, "types.gguf")
    write_gguf(path, [("general.architecture", "str", "none")],
               [("q8", [32], 8, q8), ("q4", [32], 2, q4), ("f16", [4], 1, f16s),
                ("bf16", [4], 30, bf16s)], alignment=64, version=2)
    _, t = weir_ref.read_gguf(path)
    check(np.array_equal(t["q8"], 0.5 * np.arange(-16, 16)), "Q8_0 block decodes to d*q")
    want4 = np.concatenate([0.25 * (np.arange(16) - 8), 0.25 * (7 - np.arange(16))])
    check(np.array_equal(t["q4"], want4), "Q4_0 block: low nibbles are values 0..15, high 16..31")
    check(np.array_equal(t["f16"], np.float32(vals)), "F16 decodes (incl. max and subnormal)")
    bf = np.float32([1.0, -3.0, 0.15625, np.frombuffer(struct.pack("<I", struct.unpack(
        "<I", struct.pack("<f", 1e30))[0] & 0xFFFF0000), "<f4")[0]])
    check(np.array_equal(t["bf16"], bf), "BF16 decodes as the upper half of an F32")
    # Types other than these five go through the gguf package: it must agree with the decoders
    # above on theirs (so a package that reads blocks differently cannot pass unnoticed).
    for ttype, raw, name in ((8, q8, "Q8_0"), (2, q4, "Q4_0")):
        pkg = weir_ref._gguf_package_type(ttype)
        if pkg is None:
            print(f"skip: gguf package absent ({name} cross-check)")
            continue
        check(np.array_equal(pkg[3](raw, 1), weir_ref.GGML_TYPES[ttype][3](raw, 1)),
              f"the gguf package decodes {name} as the oracle's own decoder does")


def check_gemma3_block():
    """Gemma 3's pieces against hand-computed values: GELU's tanh form, QK-norm over each head,
    the sliding-window mask (a query at p sees p-w+1..p)."""
    g = np.array([-3.0, -1.0, 0.0, 0.5, 2.0])
    want = np.array([-0.0036373920817729943, -0.15880800939172324, 0.0, 0.34571400982514394,
                     1.954597694087775])  # 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
    check(np.allclose(weir_ref.gelu_tanh(g), want, rtol=1e-12, atol=1e-15), "GELU (tanh form)")
    m = weir_ref.Model()
    m.head_dim, m.n_rot, m.theta, m.rope, m.eps = 2, 2, 10000.0, "half", 1e-6
    m.n_heads, m.n_kv_heads, m.window, m.sliding = [1], [1], 2, [True]
    eye = np.eye(2)
    # wq = 0 makes every score 0, so each query averages the values it can see: with v = x,
    # position p's output is the mean of x over its window.
    x = np.array([[1.0, 0.0], [0.0, 1.0], [3.0, 3.0], [5.0, 1.0]])
    layer = dict(wq=np.zeros((2, 2)), wk=eye, wv=eye, wo=eye)
    out = weir_ref.attention(m, layer, x, 0)
    want = np.array([x[0], (x[0] + x[1]) / 2, (x[1] + x[2]) / 2, (x[2] + x[3]) / 2])
    check(np.allclose(out, want), "sliding window of 2: each query sees itself and one before")


def check_moe():
    """Mixture-of-experts routing against hand-computed values, and an MoE layer whose experts
    are all one MLP against that dense MLP (the chosen weights sum to 1)."""
    logits = np.array([1.0, 3.0, 2.0, 3.0])
    experts, w = weir_ref.route(logits, 2, True)
    check(experts == [1, 3] and np.allclose(w, [0.5, 0.5]),
          f"top-2 of [1, 3, 2, 3]: experts 1 and 3 (tie to the lower id), 0.5 each ({experts}, {w})")
    experts, w = weir_ref.route(logits, 3, True)
    want = np.exp([3.0, 3.0, 2.0]) / np.exp([3.0, 3.0, 2.0]).sum()
    check(experts == [1, 3, 2] and np.allclose(w, want, rtol=1e-12),
          "top-3 weights are the softmax over the chosen logits")
    experts, w = weir_ref.route(logits, 2, False)
    want = np.exp(3.0) / np.exp(logits).sum()
    check(np.allclose(w, [want, want], rtol=1e-12),
          "without expert_weights_norm: the chosen experts' softmax over all experts")
    rng = np.random.default_rng(7)
    D, F, E = 8, 12, 4
    wg, wu, wd = rng.normal(size=(F, D)), rng.normal(size=(F, D)), rng.normal(size=(D, F))
    h = rng.normal(size=(3, D))
    m = weir_ref.Model()
    m.n_expert, m.n_expert_used = E, 2
    layer = dict(router=rng.normal(size=(E, D)), gate_exps=np.stack([wg] * E),
                 up_exps=np.stack([wu] * E), down_exps=np.stack([wd] * E))
    dense = weir_ref.gated_mlp("silu", wg, wu, wd, h)
    check(np.allclose(weir_ref.mlp(m, layer, h), dense, rtol=1e-12, atol=1e-12),
          "an MoE layer of identical experts equals the dense MLP")
    # Different experts: the output is the weighted sum of the two chosen experts' outputs.
    layer["gate_exps"] = rng.normal(size=(E, F, D))
    t = h[:1]
    experts, w = weir_ref.route((t @ layer["router"].T)[0], 2, True)
    want = sum(wi * weir_ref.gated_mlp("silu", layer["gate_exps"][e], layer["up_exps"][e],
                                       layer["down_exps"][e], t) for e, wi in zip(experts, w))
    check(np.allclose(weir_ref.mlp(m, layer, t), want, rtol=1e-12),
          "an MoE layer is the weighted sum of its chosen experts")


def check_metadata(tmp):
    kvs = [("a.u8", "u8", 200), ("a.i8", "i8", -5), ("a.u16", "u16", 60000),
           ("a.i16", "i16", -30000), ("a.u32", "u32", 4000000000), ("a.i32", "i32", -7),
           ("a.f32", "f32", 1.5), ("a.bool", "bool", True), ("a.str", "str", "héllo"),
           ("a.u64", "u64", 2 ** 63 + 1), ("a.i64", "i64", -(2 ** 40)), ("a.f64", "f64", 0.1),
           ("a.arr_i32", "arr:i32", [1, -2, 3]), ("a.arr_str", "arr:str", ["x", "", "yz"]),
           ("a.arr_f32", "arr:f32", [])]
    path = os.path.join(tmp, "meta.gguf")
    header_bytes = write_gguf(path, kvs, [])
    meta, _ = weir_ref.read_gguf(path)
    check(all(meta[k] == v for k, _, v in kvs), "GGUF metadata of every value type round-trips")
    with open(path, "rb") as f:
        raw = f.read()
    trunc = os.path.join(tmp, "trunc.gguf")
    bad = 0
    for n in range(header_bytes):
        with open(trunc, "wb") as f:
            f.write(raw[:n])
        try:
            weir_ref.read_gguf(trunc)
        except weir_ref.ModelError:
            bad += 1
    check(bad == header_bytes,
          f"every truncation of a GGUF header is a ModelError ({bad}/{header_bytes})")


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def check_real_models(shared, tmp):
    toks = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315]
    d260 = os.path.join(shared, "models/stories260K")
    if os.path.exists(os.path.join(d260, "stories260K.bin")):
        m = weir_ref.load_model(os.path.join(d260, "stories260K.bin"))
        pieces = llama2c_pieces(os.path.join(d260, "tok512.bin"))
        text = decode(pieces, weir_ref.greedy(m, [1], 60))
        want = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
                "in the park. One day, she saw a big, red ball. She wanted to play with it, but it "
                "was too high")
        check(text.lstrip().startswith(want), f"stories260K greedy from BOS: {text!r}")
        ref = weir_ref.forward(m, toks)
        g = os.path.join(d260, "stories260K-F32.gguf")
        if os.path.exists(g):
            e = rel_err(weir_ref.forward(weir_ref.load_model(g), toks), ref)
            check(e < 1e-6, f"stories260K-F32.gguf logits == stories260K.bin (rel err {e:.2e})")
        # Per-layer arrays in GGUF metadata mean the same model as scalars.
        p1, p2 = os.path.join(tmp, "s.gguf"), os.path.join(tmp, "a.gguf")
        model_to_gguf(m, p1)
        model_to_gguf(m, p2, per_layer_arrays=True)
        a, b = (weir_ref.forward(weir_ref.load_model(p), toks) for p in (p1, p2))
        check(rel_err(a, ref) < 1e-6 and rel_err(b, ref) < 1e-6,
              "re-written GGUF (scalar and per-layer-array hyperparameters) gives the same logits")
        # Layers that really differ: the last layer loses a kv head (with its query heads) and
        # a third of its MLP units. That must equal the full model with those heads' wo columns
        # and those units' w_down columns zeroed.
        narrow = copy.deepcopy(m)
        narrow_last_layer(narrow)
        h, f = narrow.n_heads[-1] * m.head_dim, narrow.d_ff[-1]
        last = m.layers[-1]
        m.layers[-1] = dict(last, wo=last["wo"].copy(), w_down=last["w_down"].copy())
        m.layers[-1]["wo"][:, h:] = 0
        m.layers[-1]["w_down"][:, f:] = 0
        want = weir_ref.forward(m, toks)
        m.layers[-1] = last
        model_to_gguf(narrow, p2, per_layer_arrays=True, version=2, alignment=64)
        got = weir_ref.forward(weir_ref.load_model(p2), toks)
        check(rel_err(got, want) < 1e-9 and rel_err(want, ref) > 1e-3,
              f"per-layer head counts and d_ff (GGUF arrays) (rel err {rel_err(got, want):.1e})")
    else:
        print("skip: stories260K absent")

    d656 = os.path.join(shared, "models/tinystories-656k")
    if os.path.exists(os.path.join(d656, "model.safetensors")):
        m = weir_ref.load_model(d656)
        pieces = hf_pieces(os.path.join(d656, "tokenizer.json"))
        text = decode(pieces, weir_ref.greedy(m, [1], 40))
        want = ("Once upon a time, there was a little girl named Lily. She had a toy car that she "
                "loved very much.")
        check(text.startswith(want), f"TinyStories-656K greedy from BOS: {text!r}")
        toks656 = [1, 3, 100, 2000, 17, 5, 900, 1500, 42, 7, 300, 1024]
        ref = weir_ref.forward(m, toks656)
        g = os.path.join(d656, "tinystories-656k-F32.gguf")
        if os.path.exists(g):
            e = rel_err(weir_ref.forward(weir_ref.load_model(g), toks656), ref)
            check(e < 1e-6, f"tinystories-656k-F32.gguf (adjacent pairs on permuted q/k) logits == "
                  f"safetensors (rotate-half) (rel err {e:.2e})")
        q = os.path.join(d656, "tinystories-656k-Q8_0.gguf")
        if os.path.exists(q):
            lq = weir_ref.forward(weir_ref.load_model(q), toks656)
            e = rel_err(lq, ref)
            agree = float(np.mean(lq.argmax(-1) == ref.argmax(-1)))
            check(e < 0.05 and agree >= 0.75,
                  f"tinystories-656k-Q8_0.gguf close to F32 (rel err {e:.2e}, argmax agree "
                  f"{agree:.2f})")
    else:
        print("skip: tinystories-656k absent")


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "../../../shared")
    with tempfile.TemporaryDirectory() as tmp:
        check_decoders(tmp)
        check_gemma3_block()
        check_moe()
        check_metadata(tmp)
        check_real_models(shared, tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
