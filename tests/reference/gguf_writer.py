#!/usr/bin/python3
"""A minimal GGUF writer for test inputs, and model variants that exercise a reader's corners.

  gguf_writer.py variant MODEL OUT.gguf [--per-layer] [--version 2|3] [--alignment N]

writes MODEL (any format weir_ref.py reads; adjacent-pair RoPE, i.e. llama2.c or GGUF) as an
F32 GGUF. --per-layer also makes the last layer narrower than the others -- one key/value head
fewer (with its query heads) and a third fewer MLP units -- and writes head_count, head_count_kv
and feed_forward_length as per-layer arrays. Only the logits of the written file are meaningful
(the variant is a different model); compare two engines on it, not with the source.
The output head is written as output.weight only when it is not the token embedding.
"""

import argparse
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weir_ref  # noqa: E402


def _s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


SCALAR_TYPES = {"u8": (0, "<B"), "i8": (1, "<b"), "u16": (2, "<H"), "i16": (3, "<h"),
                "u32": (4, "<I"), "i32": (5, "<i"), "f32": (6, "<f"), "bool": (7, "<?"),
                "u64": (10, "<Q"), "i64": (11, "<q"), "f64": (12, "<d")}


def _value(kind, v):
    if kind == "str":
        return struct.pack("<I", 8) + _s(v)
    if kind.startswith("arr:"):
        ek = kind[4:]
        body = b"".join(_s(x) if ek == "str" else struct.pack(SCALAR_TYPES[ek][1], x) for x in v)
        et = 8 if ek == "str" else SCALAR_TYPES[ek][0]
        return struct.pack("<I", 9) + struct.pack("<IQ", et, len(v)) + body
    t, fmt = SCALAR_TYPES[kind]
    return struct.pack("<I", t) + struct.pack(fmt, v)


def write_gguf(path, kvs, tensors, alignment=32, version=3):
    """kvs: [(key, kind, value)]; tensors: [(name, ne (innermost first), type id, raw bytes)].
    Returns the length of the header before its padding."""
    if alignment != 32:
        kvs = kvs + [("general.alignment", "u32", alignment)]
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    head += b"".join(_s(k) + _value(kind, v) for k, kind, v in kvs)
    data, infos = b"", b""
    for name, ne, ttype, raw in tensors:
        data += b"\0" * (-len(data) % alignment)
        infos += _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", ttype, len(data))
        data += raw
    body = head + infos
    header_bytes = len(body)
    body += b"\0" * (-len(body) % alignment)
    with open(path, "wb") as f:
        f.write(body + data)
    return header_bytes


def model_to_gguf(m, path, per_layer_arrays=False, version=3, alignment=32):
    """Writes an oracle Model (adjacent-pair RoPE) as an F32 GGUF."""
    L = m.n_layers
    arr = per_layer_arrays
    kvs = [("general.architecture", "str", "llama"),
           ("llama.embedding_length", "u32", m.d_model), ("llama.block_count", "u32", L),
           ("llama.feed_forward_length", "arr:i32" if arr else "u32",
            m.d_ff if arr else m.d_ff[0]),
           ("llama.attention.head_count", "arr:u32" if arr else "u32",
            m.n_heads if arr else m.n_heads[0]),
           ("llama.attention.head_count_kv", "arr:u32" if arr else "u32",
            m.n_kv_heads if arr else m.n_kv_heads[0]),
           ("llama.attention.layer_norm_rms_epsilon", "f32", m.eps),
           ("llama.rope.freq_base", "f32", m.theta),
           ("tokenizer.ggml.bos_token_id", "u32", m.bos)]
    f32 = lambda a: np.ascontiguousarray(a, dtype="<f4").tobytes()  # noqa: E731
    ts = [("token_embd.weight", [m.d_model, m.vocab], 0, f32(m.tok_emb)),
          ("output_norm.weight", [m.d_model], 0, f32(m.out_norm))]
    names = dict(attn_norm="attn_norm", wq="attn_q", wk="attn_k", wv="attn_v", wo="attn_output",
                 ffn_norm="ffn_norm", w_gate="ffn_gate", w_up="ffn_up", w_down="ffn_down")
    for i, l in enumerate(m.layers):
        for k, n in names.items():
            ts.append((f"blk.{i}.{n}.weight", list(reversed(l[k].shape)), 0, f32(l[k])))
    if m.w_out is not m.tok_emb:
        ts.append(("output.weight", [m.d_model, m.vocab], 0, f32(m.w_out)))
    write_gguf(path, kvs, ts, alignment=alignment, version=version)



def narrow_last_layer(m):
    """Drops the last kv head (with its query heads) and a third of the MLP units of the last
    layer, in place."""
    i, hd = m.n_layers - 1, m.head_dim
    H, KV, F = m.n_heads[i], m.n_kv_heads[i], m.d_ff[i]
    if KV < 2:
        raise weir_ref.ModelError(f"layer {i} has {KV} kv head(s); need 2 to drop one")
    kv, h, f = KV - 1, (KV - 1) * (H // KV), F - F // 3
    l = m.layers[i]
    m.layers[i] = dict(l, wq=l["wq"][:h * hd], wk=l["wk"][:kv * hd], wv=l["wv"][:kv * hd],
                       wo=l["wo"][:, :h * hd], w_gate=l["w_gate"][:f], w_up=l["w_up"][:f],
                       w_down=l["w_down"][:, :f])
    m.n_heads[i], m.n_kv_heads[i], m.d_ff[i] = h, kv, f


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("variant")
    p.add_argument("model")
    p.add_argument("output")
    p.add_argument("--per-layer", action="store_true")
    p.add_argument("--version", type=int, choices=(2, 3), default=3)
    p.add_argument("--alignment", type=int, default=32)
    args = ap.parse_args(argv)
    try:
        m = weir_ref.load_model(args.model)
        if m.rope != "adjacent":
            raise weir_ref.ModelError(f"{args.model}: rotate-half RoPE; GGUF llama needs adjacent")
        if args.per_layer:
            narrow_last_layer(m)
        model_to_gguf(m, args.output, per_layer_arrays=args.per_layer, version=args.version,
                      alignment=args.alignment)
    except (weir_ref.ModelError, OSError) as e:
        print(f"gguf_writer: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
