#!/usr/bin/python3
"""Independent reference forward pass of a Llama-family model, in numpy, for checking weir.

It is written from the model definitions (llama2.c's run.c semantics, Hugging Face's
LlamaForCausalLM, llama.cpp's GGUF "llama" architecture), not from weir's C++ code, and
computes in float64 so that its own rounding is negligible next to weir's float32.

Model files it reads (each reader checks every offset and length against the file size):

  GGUF v2/v3 (little-endian)
    u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv x { string key | u32 value_type | value }
      string = u64 length + UTF-8 bytes
      value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
                   9 array (u32 element_type, u64 count, elements), 10 u64, 11 i64, 12 f64
    n_tensors x { string name | u32 n_dims | u64 ne[n_dims] (innermost first) | u32 type |
                  u64 offset (relative to the data section, multiple of the alignment) }
    padding to general.alignment (default 32) | data section
    Tensor types read: 0 F32, 1 F16, 30 BF16, 8 Q8_0 {f16 d; i8 q[32]} x = d*q,
    2 Q4_0 {f16 d; u8 qs[16]}: value j = low nibble of qs[j], value j+16 = high nibble,
    x = d*(q-8), decoded here; every other ggml type (Q4_1, Q5_0, Q4_K, Q6_K, ...) through the
    `gguf` package's dequantize (pip install gguf), an implementation independent of weir's.
    Architectures (general.architecture, which also prefixes the hyperparameter keys):
      llama   RoPE on adjacent pairs (2i, 2i+1), SwiGLU
      qwen2   RoPE on halves (i, i + n_rot/2), q/k/v biases
      qwen3   RoPE on halves, RMSNorm over each q and k head (attn_q_norm, attn_k_norm)
      gemma2  (Hugging Face's Gemma2ForCausalLM, llama.cpp's gemma2 graph) gemma3's block without
              QK-norm, and with attention logit soft-capping: each score q.k * scale becomes
              cap*tanh(score/cap) before the mask and softmax, cap = gemma2.attn_logit_softcapping
              (default 50); final logits cap*tanh(logits/cap), cap =
              gemma2.final_logit_softcapping (default 30); layers 0, 2, 4, ... slide (window
              gemma2.attention.sliding_window, default 4096) with the same RoPE base as the others
              (unless gemma2.rope.freq_base_swa says otherwise). scale is 1/sqrt(head_dim), except
              for the 46-layer model (27B), whose query_pre_attn_scalar is d_model/n_heads.
              A stated cap of 0 means none here (Hugging Face's None). The output head is
              token_embd unless output.weight is stored.
      gemma3  RoPE on halves, QK-norm, RMSNorm on each block's output before the residual add
              (post_attention_norm, post_ffw_norm), GeGLU with gelu's tanh form, embeddings
              times sqrt(d_model), sliding-window attention (a query at p sees keys p-w+1..p)
              on the layers of gemma3.attention.sliding_window_pattern (default: all but every
              6th) with RoPE base gemma3.rope.freq_base_swa (default 10000), and
              cap*tanh(logits/cap) when gemma3.final_logit_softcapping is set. The converter
              stores Gemma's RMSNorm scale (1 + w) as the norm weight, so norms are plain.
      phi3    RoPE on halves (of the first rope.dimension_count dims of each head), SwiGLU;
              q, k and v stored as the rows of one attn_qkv [(H + 2 KV) hd, D] in that order
              (or as attn_q/k/v when attn_qkv is absent), gate and up as the rows of one ffn_up
              [2 F, D], gate first (Hugging Face's Phi3MLP: gate, up = gate_up_proj(x).chunk(2)).
              phi3.attention.sliding_window is ignored, as llama.cpp's phi3 graph ignores it.
    RoPE scaling (every architecture), as llama.cpp reads it: <arch>.rope.scaling.type (absent =
      "linear") "linear" divides positions by <arch>.rope.scaling.factor (or the older
      rope.scale_linear; absent or 0 = no scaling), "none" ignores the factor, other types
      (yarn, longrope) are refused, as is rope.scaling.attn_factor other than 1. Gemma 3 scales
      its global layers only (Hugging Face's Gemma3 gives the sliding layers plain RoPE).
      rope_freqs.weight (llama family only; F32 [n_rot/2], finite and > 0): pair i turns by
      pos * theta^(-2i/n_rot) / rope_freqs[i] (Llama 3.1's long-context factors).
      Mixtures of experts: "llama" with llama.expert_count > 0 (Mixtral) and qwen3moe (Qwen3's
              attention). The MLP is a router ffn_gate_inp [n_expert, D] and experts stacked
              in ffn_{gate,up,down}_exps [n_expert, F, D] / [n_expert, D, F], F =
              <arch>.expert_feed_forward_length if stated, else feed_forward_length. Each token
              runs the <arch>.expert_used_count experts with the largest router logits (Mixtral's
              torch.topk; ties to the lower id), weighted by the softmax over the chosen logits
              (Mixtral; Qwen3 with norm_topk_prob) or, when <arch>.expert_weights_norm is false,
              by their probabilities under the softmax over all experts.

  Hugging Face safetensors + config.json (LlamaForCausalLM, MistralForCausalLM,
  Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, MixtralForCausalLM,
  Qwen3MoeForCausalLM: HF_ARCHS below says how each differs from Llama)
    u64 header_length | JSON header {name: {dtype, shape, data_offsets [begin, end)}} | data
    dtypes F32, F16, BF16, F64.  Sharded models (model.safetensors.index.json) are accepted.
    If only one of lm_head.weight / model.embed_tokens.weight is stored the other is the same
    matrix (tied embeddings).  RoPE rotates halves (i, i + head_dim/2) in every family.  rope_scaling:
    null / "default" none; "linear" divides positions by its factor; "llama3" (Llama 3.1)
    divides the frequency f_i = theta^(-2i/hd) of pair i by 1 where its wavelength 2 pi / f_i
    is below original_max_position_embeddings / high_freq_factor, by factor where it is above
    original_max_position_embeddings / low_freq_factor, and in between by
    1 / ((1 - s) / factor + s), s = (original_max_position_embeddings * f_i / (2 pi) -
    low_freq_factor) / (high_freq_factor - low_freq_factor).  Other types are refused.

  llama2.c legacy checkpoint (.bin)
    7 x i32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len}; a negative
    vocab_size means a separate classifier follows.  Then f32 arrays: token_embedding [V, D],
    rms_att [L, D], wq [L, D, D], wk [L, KV, D], wv [L, KV, D], wo [L, D, D], rms_ffn [L, D],
    w1 (gate) [L, F, D], w2 (down) [L, D, F], w3 (up) [L, F, D], rms_final [D],
    freq_cis_real [S, hd/2], freq_cis_imag [S, hd/2], [wcls [V, D]].
    RMSNorm eps 1e-5, RoPE on adjacent pairs, theta 10000.

Commands (token ids in, numbers out; tokenization is not this script's job):
  weir_ref.py logits MODEL --tokens 1,2,3 -o out.f32   float32 [n_tokens, vocab], row-major LE
  weir_ref.py greedy MODEL --tokens 1 -n 60            prints the generated ids
  weir_ref.py ppl MODEL --tokens-file ids.txt -c CTX [--chunks N] [--json]
                                                       llama.cpp perplexity scheme
  weir_ref.py info MODEL                               prints the hyperparameters as JSON

Exit codes: 0 ok, 1 bad model file or input, 2 usage.
"""

import argparse
import json
import math
import mmap
import os
import struct
import sys

import numpy as np


class ModelError(Exception):
    """A model file that cannot be read; the message names the file and the field."""


# ----------------------------------------------------------------------------------------------
# Element decoding shared by the readers.

QK = 32  # values per Q8_0 / Q4_0 block


def _f16(buf, count):
    return np.frombuffer(buf, dtype="<f2", count=count).astype(np.float32)


def _bf16(buf, count):
    raw = np.frombuffer(buf, dtype="<u2", count=count).astype(np.uint32) << 16
    return raw.view(np.float32)


def _q8_0(buf, n_blocks):
    blocks = np.frombuffer(buf, dtype=np.uint8, count=n_blocks * 34).reshape(n_blocks, 34)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)  # [n_blocks, 1]
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)  # [n_blocks, 32]
    return (d * q).reshape(-1)


def _q4_0(buf, n_blocks):
    blocks = np.frombuffer(buf, dtype=np.uint8, count=n_blocks * 18).reshape(n_blocks, 18)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)  # [n_blocks, 1]
    qs = blocks[:, 2:]  # [n_blocks, 16]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0  # [n_blocks, 32]
    return (d * q).reshape(-1)


def _gguf_package_type(ttype):
    """(name, values per block, bytes per block, decoder) for a ggml type the `gguf` package
    dequantizes, or None."""
    try:
        import gguf  # noqa: PLC0415 -- optional: only files with such types need it
        from gguf.quants import dequantize
    except ImportError:
        return None
    try:
        qtype = gguf.GGMLQuantizationType(ttype)
    except ValueError:
        return None
    block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]

    def decode(buf, n_blocks):
        raw = np.frombuffer(buf, dtype=np.uint8, count=n_blocks * block_bytes)
        return dequantize(raw.reshape(1, -1), qtype).reshape(-1).astype(np.float32)
    return (qtype.name, block, block_bytes, decode)


# ggml type id -> (name, values per block, bytes per block, decoder(buffer, n_blocks))
GGML_TYPES = {
    0: ("F32", 1, 4, lambda b, n: np.frombuffer(b, dtype="<f4", count=n).astype(np.float32)),
    1: ("F16", 1, 2, _f16),
    30: ("BF16", 1, 2, _bf16),
    8: ("Q8_0", QK, 34, _q8_0),
    2: ("Q4_0", QK, 18, _q4_0),
}


# ----------------------------------------------------------------------------------------------
# GGUF reader.

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                10: "<Q", 11: "<q", 12: "<d"}
GGUF_STRING, GGUF_ARRAY = 8, 9


class _Cursor:
    """Bounds-checked little-endian reads from a byte buffer."""

    def __init__(self, buf, path):
        self.buf, self.path, self.pos = buf, path, 0

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise ModelError(f"{self.path}: {what} at offset {self.pos} needs {n} bytes, "
                             f"file has {len(self.buf)}")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        n = self.unpack("<Q", what + " length")
        return bytes(self.take(n, what)).decode("utf-8", errors="replace")

    def value(self, vtype, what, depth=0):
        if vtype in GGUF_SCALARS:
            return self.unpack(GGUF_SCALARS[vtype], what)
        if vtype == GGUF_STRING:
            return self.string(what)
        if vtype == GGUF_ARRAY:
            if depth > 0:
                raise ModelError(f"{self.path}: {what}: nested arrays are not supported")
            etype = self.unpack("<I", what + " array type")
            count = self.unpack("<Q", what + " array count")
            if etype in GGUF_SCALARS:
                size = struct.calcsize(GGUF_SCALARS[etype])
                raw = self.take(count * size, what + " array")  # checks count against the file
                return list(struct.unpack("<%d%s" % (count, GGUF_SCALARS[etype][1]), raw))
            if etype not in (GGUF_STRING, GGUF_ARRAY):
                raise ModelError(f"{self.path}: {what}: unknown array element type {etype}")
            if count > len(self.buf) - self.pos:  # every element takes at least one byte
                raise ModelError(f"{self.path}: {what}: array count {count} exceeds file size")
            return [self.value(etype, f"{what}[{i}]", depth + 1) for i in range(count)]
        raise ModelError(f"{self.path}: {what}: unknown value type {vtype}")


def read_gguf(path):
    """Returns (metadata dict, {tensor name: float32 ndarray, outermost dim first})."""
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.path.getsize(path) else b""
    cur = _Cursor(memoryview(buf), path)
    if bytes(cur.take(4, "magic")) != b"GGUF":
        raise ModelError(f"{path}: not a GGUF file (magic)")
    version = cur.unpack("<I", "version")
    if version not in (2, 3):
        raise ModelError(f"{path}: GGUF version {version} is not supported (2 or 3)")
    n_tensors = cur.unpack("<Q", "tensor_count")
    n_kv = cur.unpack("<Q", "metadata_kv_count")
    if n_tensors > len(buf) or n_kv > len(buf):
        raise ModelError(f"{path}: counts {n_tensors} tensors / {n_kv} keys exceed the file size")
    meta = {}
    for i in range(n_kv):
        key = cur.string(f"metadata key {i}")
        vtype = cur.unpack("<I", f"type of {key}")
        meta[key] = cur.value(vtype, key)
    infos = []
    for i in range(n_tensors):
        name = cur.string(f"tensor {i} name")
        n_dims = cur.unpack("<I", f"{name} n_dims")
        if n_dims > 4:
            raise ModelError(f"{path}: tensor {name}: n_dims {n_dims} > 4")
        ne = [cur.unpack("<Q", f"{name} ne[{d}]") for d in range(n_dims)]
        ttype = cur.unpack("<I", f"{name} type")
        offset = cur.unpack("<Q", f"{name} offset")
        infos.append((name, ne, ttype, offset))
    alignment = meta.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ModelError(f"{path}: general.alignment {alignment} is not a power of two")
    data_start = (cur.pos + alignment - 1) // alignment * alignment
    tensors = {}
    for name, ne, ttype, offset in infos:
        kind = GGML_TYPES.get(ttype) or _gguf_package_type(ttype)
        if kind is None:
            raise ModelError(f"{path}: unsupported type {ttype} in tensor {name} (types other "
                             f"than F32/F16/BF16/Q8_0/Q4_0 need the gguf package)")
        tname, block, block_bytes, decode = kind
        n = math.prod(ne) if ne else 1
        if ne and ne[0] % block:
            raise ModelError(f"{path}: tensor {name}: row length {ne[0]} is not a multiple of "
                             f"the {tname} block size {block}")
        if offset % alignment:
            raise ModelError(f"{path}: tensor {name}: offset {offset} not aligned to {alignment}")
        nbytes = n // block * block_bytes
        begin = data_start + offset
        if begin + nbytes > len(buf):
            raise ModelError(f"{path}: tensor {name}: bytes [{begin}, {begin + nbytes}) are "
                             f"past the end of the file ({len(buf)})")
        flat = decode(buf[begin:begin + nbytes], n // block)
        tensors[name] = flat.reshape(list(reversed(ne)) if ne else [])
    return meta, tensors


# ----------------------------------------------------------------------------------------------
# The model: hyperparameters and float64 weights, whatever the file format.

class Model:
    """d_model, n_layers, per-layer n_heads / n_kv_heads / d_ff, head_dim, n_rot, eps, theta,
    rope ("adjacent" or "half"), vocab, bos; weights as float64 arrays [out, in]. The
    architecture's extras default to Llama's: act ("silu" or "gelu_tanh"), embed_scale,
    attn_scale (None = 1/sqrt(head_dim)), softcap (0 = none) on the final logits, attn_softcap
    (0 = none) on the attention scores, window (0 = none) with one sliding flag and one RoPE base
    per layer (sliding, thetas)."""

    def __init__(self):
        self.layers = []  # dicts: attn_norm [D], wq [H*hd, D], wk [KV*hd, D], wv [KV*hd, D],
        #                   wo [D, H*hd], ffn_norm [D], w_gate [F, D], w_up [F, D], w_down [D, F]
        #                   optional: bq [H*hd], bk / bv [KV*hd], q_norm / k_norm [hd],
        #                   post_attn_norm [D], post_ffn_norm [D]
        self.tok_emb = None  # [V, D]
        self.out_norm = None  # [D]
        self.w_out = None  # [V, D]
        self.arch = "llama"
        self.act = "silu"
        self.embed_scale = 1.0
        self.attn_scale = None
        self.softcap = 0.0
        self.attn_softcap = 0.0
        self.window = 0
        self.sliding = None  # [n_layers] bools, None = every layer global
        self.thetas = None  # [n_layers] RoPE bases, None = theta everywhere
        self.n_expert = 0  # mixture of experts: layers hold router [E, D], gate_exps /
        self.n_expert_used = 0  # up_exps [E, F, D], down_exps [E, D, F] instead of w_gate..
        self.expert_norm = True
        self.rope_scales = None  # [n_layers] position multipliers (1 / linear factor), None = 1
        self.rope_freqs = None  # [n_rot/2] frequency divisors (Llama 3.1), None = 1

    def info(self):
        return {k: getattr(self, k) for k in (
            "format", "arch", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "n_rot",
            "d_ff", "eps", "theta", "rope", "vocab", "bos", "act", "embed_scale", "softcap",
            "attn_softcap", "window", "sliding", "thetas", "n_expert", "n_expert_used", "expert_norm",
            "rope_scales")} | {"rope_freqs": None if self.rope_freqs is None
                               else [float(v) for v in self.rope_freqs]}

    def check(self, path):
        """Validates every weight shape against the hyperparameters."""
        def need(name, arr, shape):
            if arr is None:
                raise ModelError(f"{path}: missing tensor {name}")
            if tuple(arr.shape) != tuple(shape):
                raise ModelError(f"{path}: tensor {name} has shape {list(arr.shape)}, "
                                 f"expected {list(shape)}")
        D, V, hd = self.d_model, self.vocab, self.head_dim
        need("token embedding", self.tok_emb, (V, D))
        need("output norm", self.out_norm, (D,))
        need("output head", self.w_out, (V, D))
        if len(self.layers) != self.n_layers:
            raise ModelError(f"{path}: {len(self.layers)} layers, expected {self.n_layers}")
        for i, l in enumerate(self.layers):
            H, KV, F = self.n_heads[i], self.n_kv_heads[i], self.d_ff[i]
            if H <= 0 or KV <= 0 or H % KV:
                raise ModelError(f"{path}: layer {i}: n_heads {H} not a multiple of "
                                 f"n_kv_heads {KV}")
            E = self.n_expert
            mlp_shapes = ((("router", (E, D)), ("gate_exps", (E, F, D)), ("up_exps", (E, F, D)),
                           ("down_exps", (E, D, F))) if E else
                          (("w_gate", (F, D)), ("w_up", (F, D)), ("w_down", (D, F))))
            for name, shape in (("attn_norm", (D,)), ("wq", (H * hd, D)), ("wk", (KV * hd, D)),
                                ("wv", (KV * hd, D)), ("wo", (D, H * hd)),
                                ("ffn_norm", (D,))) + mlp_shapes:
                need(f"layer {i} {name}", l.get(name), shape)
            for name, shape in (("bq", (H * hd,)), ("bk", (KV * hd,)), ("bv", (KV * hd,)),
                                ("q_norm", (hd,)), ("k_norm", (hd,)), ("post_attn_norm", (D,)),
                                ("post_ffn_norm", (D,))):
                if l.get(name) is not None:
                    need(f"layer {i} {name}", l[name], shape)
        if self.n_expert and not 1 <= self.n_expert_used <= self.n_expert:
            raise ModelError(f"{path}: expert_used_count {self.n_expert_used} not in "
                             f"1..expert_count {self.n_expert}")
        if self.n_rot % 2 or not 0 < self.n_rot <= hd:
            raise ModelError(f"{path}: rope dimension {self.n_rot} invalid for head_dim {hd}")
        if self.rope_freqs is not None:
            need("rope_freqs", self.rope_freqs, (self.n_rot // 2,))
            if not np.all(np.isfinite(self.rope_freqs)) or np.any(self.rope_freqs <= 0):
                raise ModelError(f"{path}: rope_freqs must be finite and > 0")
        return self


def _per_layer(value, n_layers, path, key):
    if isinstance(value, list):
        if len(value) != n_layers:
            raise ModelError(f"{path}: {key} has {len(value)} entries, expected {n_layers}")
        return [int(v) for v in value]
    return [int(value)] * n_layers


def _f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


# The architectures the GGUF reader knows, from their published definitions (llama.cpp's graph
# per architecture, Hugging Face's modeling files): RoPE pairing, activation, which optional
# per-layer tensors the block must have, the sliding-window defaults (theta_swa None: the global
# base) and the soft-caps a file gets when it leaves their keys out.
GGUF_ARCHS = {
    "llama": dict(rope="adjacent", act="silu", need=(), rope_freqs=True),
    "qwen2": dict(rope="half", act="silu", need=()),
    "qwen3": dict(rope="half", act="silu", need=("q_norm", "k_norm")),
    "gemma3": dict(rope="half", act="gelu_tanh", emb_sqrt_d=True, swa_period=6, theta_swa=10000.0,
                   need=("q_norm", "k_norm", "post_attn_norm", "post_ffn_norm")),
    "gemma2": dict(rope="half", act="gelu_tanh", emb_sqrt_d=True, swa_period=2, theta_swa=None,
                   window=4096, attn_softcap=50.0, final_softcap=30.0,
                   need=("post_attn_norm", "post_ffn_norm")),
    "qwen3moe": dict(rope="half", act="silu", need=("q_norm", "k_norm"), moe=True),
    "phi3": dict(rope="half", act="silu", need=(), fused_qkv=True, fused_gate_up=True),
}


def _split_rows(a, sizes, name, path):
    """Rows of a fused tensor `a` cut into consecutive pieces of `sizes` rows (elements for 1-D)."""
    if a is None:
        return [None] * len(sizes)
    if a.shape[0] != sum(sizes):
        raise ModelError(f"{path}: fused tensor {name} has {a.shape[0]} rows, expected "
                         f"{' + '.join(map(str, sizes))} = {sum(sizes)}")
    ends = np.cumsum(sizes)
    return [a[e - n:e] for n, e in zip(sizes, ends)]


def load_gguf(path):
    meta, t = read_gguf(path)
    arch = meta.get("general.architecture")
    if arch not in GGUF_ARCHS:
        raise ModelError(f"{path}: general.architecture is {arch!r}, supported: "
                         f"{', '.join(GGUF_ARCHS)}")
    spec = GGUF_ARCHS[arch]

    def key(name, default=None):
        k = arch + "." + name
        if k not in meta:
            if default is None:
                raise ModelError(f"{path}: missing metadata {k}")
            return default
        return meta[k]
    m = Model()
    m.format = "gguf"
    m.arch = arch
    m.d_model = int(key("embedding_length"))
    m.n_layers = int(key("block_count"))
    m.n_heads = _per_layer(key("attention.head_count"), m.n_layers, path, "head_count")
    m.n_kv_heads = _per_layer(key("attention.head_count_kv", m.n_heads), m.n_layers, path,
                              "head_count_kv")
    m.n_expert = int(meta.get(arch + ".expert_count", 0))
    if spec.get("moe") and m.n_expert <= 0:
        raise ModelError(f"{path}: {arch} needs {arch}.expert_count >= 1, got {m.n_expert}")
    ff_key = "feed_forward_length"
    if m.n_expert > 0:
        m.n_expert_used = int(key("expert_used_count"))
        m.expert_norm = bool(meta.get(arch + ".expert_weights_norm", True))
        if arch + ".expert_feed_forward_length" in meta:
            ff_key = "expert_feed_forward_length"
    m.d_ff = _per_layer(key(ff_key), m.n_layers, path, ff_key)
    m.head_dim = int(key("attention.key_length", m.d_model // max(m.n_heads[0], 1)))
    m.n_rot = int(key("rope.dimension_count", m.head_dim))
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.theta = float(key("rope.freq_base", 10000.0))
    scaling = meta.get(arch + ".rope.scaling.type", "linear")  # llama.cpp's default
    if scaling not in ("none", "linear"):
        raise ModelError(f"{path}: {arch}.rope.scaling.type {scaling!r} is not supported")
    factor = float(meta.get(arch + ".rope.scaling.factor",
                            meta.get(arch + ".rope.scale_linear", 0.0)))
    if not math.isfinite(factor) or factor < 0:
        raise ModelError(f"{path}: {arch}.rope.scaling.factor {factor} must be >= 0")
    pos_scale = 1.0 / factor if scaling == "linear" and factor > 0 else 1.0
    if float(meta.get(arch + ".rope.scaling.attn_factor", 1.0)) != 1.0:
        raise ModelError(f"{path}: {arch}.rope.scaling.attn_factor other than 1 is not supported")
    if "rope_freqs.weight" in t:
        if not spec.get("rope_freqs"):
            raise ModelError(f"{path}: {arch} does not use rope_freqs.weight")
        m.rope_freqs = _f64(t["rope_freqs.weight"])
    m.rope = spec["rope"]
    m.act = spec["act"]
    if spec.get("emb_sqrt_d"):
        m.embed_scale = math.sqrt(m.d_model)
    m.softcap = float(meta.get(arch + ".final_logit_softcapping", spec.get("final_softcap", 0.0)))
    m.attn_softcap = 0.0
    if "attn_softcap" in spec:
        m.attn_softcap = float(meta.get(arch + ".attn_logit_softcapping", spec["attn_softcap"]))
    for name, cap in (("final_logit_softcapping", m.softcap),
                      ("attn_logit_softcapping", m.attn_softcap)):
        if not (math.isfinite(cap) and cap >= 0):
            raise ModelError(f"{path}: {arch}.{name} = {cap}, expected a finite number >= 0")
    # The 27B models: query_pre_attn_scalar d/heads (Gemma 2: 4608/32; Gemma 3: 5376/32).
    if (arch, m.n_layers) in (("gemma2", 46), ("gemma3", 62)):
        m.attn_scale = 1.0 / math.sqrt(m.d_model // m.n_heads[0])
    window = (int(meta.get(arch + ".attention.sliding_window", spec.get("window", 0)))
              if spec.get("swa_period") else 0)
    if window > 0:
        m.window = window
        pattern = meta.get(arch + ".attention.sliding_window_pattern", spec["swa_period"])
        if isinstance(pattern, list):
            if len(pattern) != m.n_layers:
                raise ModelError(f"{path}: sliding_window_pattern has {len(pattern)} entries, "
                                 f"expected {m.n_layers}")
            m.sliding = [bool(v) for v in pattern]
        else:
            n = int(pattern)
            m.sliding = [n == 0 or i % n < n - 1 for i in range(m.n_layers)]
        theta_swa = float(meta.get(arch + ".rope.freq_base_swa", spec["theta_swa"] or m.theta))
        m.thetas = [theta_swa if sl else m.theta for sl in m.sliding]
    # Linear scaling on every layer but Gemma 3's sliding ones.
    m.rope_scales = [1.0 if (arch == "gemma3" and m.sliding and m.sliding[i]) else pos_scale
                     for i in range(m.n_layers)]
    for factors in ("rope_factors_long.weight", "rope_factors_short.weight"):  # LongRoPE
        if factors in t:
            raise ModelError(f"{path}: tensor {factors} (RoPE frequency factors) is not supported")
    m.bos = int(meta.get("tokenizer.ggml.bos_token_id", 1))
    m.tok_emb = _f64(t.get("token_embd.weight"))
    if m.tok_emb is None:
        raise ModelError(f"{path}: missing tensor token_embd.weight")
    m.vocab = m.tok_emb.shape[0]
    m.out_norm = _f64(t.get("output_norm.weight"))
    m.w_out = _f64(t["output.weight"]) if "output.weight" in t else m.tok_emb  # tied
    for i in range(m.n_layers):
        g = lambda n, kind="weight": _f64(t.get(f"blk.{i}.{n}.{kind}"))  # noqa: E731
        layer = dict(attn_norm=g("attn_norm"), wq=g("attn_q"), wk=g("attn_k"),
                     wv=g("attn_v"), wo=g("attn_output"), ffn_norm=g("ffn_norm"),
                     w_gate=g("ffn_gate"), w_up=g("ffn_up"), w_down=g("ffn_down"),
                     bq=g("attn_q", "bias"), bk=g("attn_k", "bias"), bv=g("attn_v", "bias"),
                     q_norm=g("attn_q_norm"), k_norm=g("attn_k_norm"),
                     post_attn_norm=g("post_attention_norm"), post_ffn_norm=g("post_ffw_norm"),
                     router=g("ffn_gate_inp"), gate_exps=g("ffn_gate_exps"),
                     up_exps=g("ffn_up_exps"), down_exps=g("ffn_down_exps"))
        H, KV, F, hd = m.n_heads[i], m.n_kv_heads[i], m.d_ff[i], m.head_dim
        qkv_w, qkv_b = g("attn_qkv"), g("attn_qkv", "bias")
        if spec.get("fused_qkv") and qkv_w is not None:
            for n in ("attn_q", "attn_k", "attn_v"):
                if f"blk.{i}.{n}.weight" in t:
                    raise ModelError(f"{path}: layer {i} has both attn_qkv and {n}")
            sizes = (H * hd, KV * hd, KV * hd)
            layer["wq"], layer["wk"], layer["wv"] = _split_rows(
                qkv_w, sizes, f"blk.{i}.attn_qkv.weight", path)
            if qkv_b is not None:
                layer["bq"], layer["bk"], layer["bv"] = _split_rows(
                    qkv_b, sizes, f"blk.{i}.attn_qkv.bias", path)
        if spec.get("fused_gate_up"):
            if layer["w_gate"] is not None:
                raise ModelError(f"{path}: {arch} layer {i} has ffn_gate; its gate lives in ffn_up")
            layer["w_gate"], layer["w_up"] = _split_rows(
                layer["w_up"], (F, F), f"blk.{i}.ffn_up.weight", path)
        for name in spec["need"]:
            if layer[name] is None:
                raise ModelError(f"{path}: {arch} layer {i} has no {name} tensor")
        m.layers.append(layer)
    return m.check(path)


# ----------------------------------------------------------------------------------------------
# safetensors + config.json reader.

ST_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": (None, 2), "F64": ("<f8", 8)}


def read_safetensors(path):
    """Returns {name: float32/float64 ndarray}."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    if size < 8:
        raise ModelError(f"{path}: {size} bytes, too short for the safetensors header length")
    (hlen,) = struct.unpack("<Q", buf[:8])
    if hlen > size - 8:
        raise ModelError(f"{path}: header length {hlen} exceeds file size {size}")
    try:
        header = json.loads(bytes(buf[8:8 + hlen]))
    except ValueError as e:
        raise ModelError(f"{path}: header is not valid JSON: {e}")
    data_start = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in ST_DTYPES:
            raise ModelError(f"{path}: tensor {name}: unsupported dtype {dtype}")
        np_dtype, elem = ST_DTYPES[dtype]
        n = math.prod(shape)
        if not 0 <= begin <= end <= size - data_start or end - begin != n * elem:
            raise ModelError(f"{path}: tensor {name}: data_offsets [{begin}, {end}) invalid for "
                             f"{n} x {dtype} in a data section of {size - data_start} bytes")
        raw = buf[data_start + begin:data_start + end]
        arr = _bf16(raw, n) if dtype == "BF16" else np.frombuffer(raw, dtype=np_dtype, count=n)
        out[name] = arr.reshape(shape)
    return out


# The Hugging Face model classes the reader knows (config.json "architectures"), from
# transformers' modeling files: the GGUF architecture whose forward pass it is, and how its
# checkpoint differs from Llama's.
#   bias     q_proj/k_proj/v_proj have biases (Qwen2)
#   qk_norm  self_attn.q_norm / k_norm, RMSNorm over each head (Qwen3, Gemma 3)
#   gemma    Gemma3RMSNorm computes x * (1 + w) and the checkpoint stores w; norms are
#            input_layernorm, post_attention_layernorm (on the attention's output),
#            pre_feedforward_layernorm, post_feedforward_layernorm; GELU-tanh; embeddings times
#            sqrt(hidden_size); queries scaled by query_pre_attn_scalar^-1/2; sliding layers from
#            layer_types or sliding_window_pattern (layer i slides when (i + 1) % pattern != 0,
#            default 6) with RoPE base rope_local_base_freq (default 10000)
#   window   "every": a non-null sliding_window applies to every layer (Mistral, Mixtral)
#   gemma2   Gemma2ForCausalLM: gemma's names and norms without q_norm/k_norm;
#            attn_logit_softcapping and final_logit_softcapping (left out: Gemma2Config's 50 and
#            30; null: none); layer_types, else every other layer slides from layer 0
#            (Gemma2Config: layer i slides when (i + 1) % 2 != 0); sliding_window left out: 4096;
#            no rope_local_base_freq: sliding layers share rope_theta; tie_word_embeddings
#            defaults to true
#   phi3     Phi3ForCausalLM: self_attn.qkv_proj holds q, k, v rows in that order and
#            mlp.gate_up_proj gate rows then up rows (Phi3MLP: gate, up = chunk(2)); RoPE on
#            halves of the first int(head_dim * partial_rotary_factor) dims; sliding_window
#            ignored (as llama.cpp's phi3 graph); rope_scaling longrope / su / yarn refused
#   moe      "mixtral": block_sparse_moe.gate (router), block_sparse_moe.experts.E.w1 (gate),
#            w3 (up), w2 (down); "qwen": mlp.gate, mlp.experts.E.{gate,up,down}_proj with
#            moe_intermediate_size and norm_topk_prob (default false)
HF_ARCHS = {
    "LlamaForCausalLM": dict(model_type="llama"),
    "MistralForCausalLM": dict(model_type="mistral", window="every"),
    "Qwen2ForCausalLM": dict(model_type="qwen2", bias=True),
    "Qwen3ForCausalLM": dict(model_type="qwen3", qk_norm=True),
    "Gemma3ForCausalLM": dict(model_type="gemma3_text", qk_norm=True, gemma=True),
    "MixtralForCausalLM": dict(model_type="mixtral", window="every", moe="mixtral"),
    "Qwen3MoeForCausalLM": dict(model_type="qwen3_moe", qk_norm=True, moe="qwen"),
    "Gemma2ForCausalLM": dict(model_type="gemma2", gemma=True, gemma2=True),
    "Phi3ForCausalLM": dict(model_type="phi3", phi3=True),
}


def load_hf(model_dir):
    cfg_path = os.path.join(model_dir, "config.json")
    try:
        with open(cfg_path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ModelError(f"{cfg_path}: {e}")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    t = {}
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        for s in shards:
            t.update(read_safetensors(os.path.join(model_dir, s)))
    else:
        t = read_safetensors(os.path.join(model_dir, "model.safetensors"))

    def c(name, default=None):
        if cfg.get(name) is None:
            if default is None:
                raise ModelError(f"{cfg_path}: missing {name}")
            return default
        return cfg[name]
    hf_name = next((a for a in cfg.get("architectures") or [] if a in HF_ARCHS), None)
    if hf_name is None and not cfg.get("architectures"):
        hf_name = next((a for a, s in HF_ARCHS.items() if s["model_type"] == cfg.get("model_type")),
                       None)
    if hf_name is None:
        raise ModelError(f"{cfg_path}: architectures {cfg.get('architectures')} not supported")
    spec = HF_ARCHS[hf_name]
    gemma, moe = spec.get("gemma", False), spec.get("moe")
    gemma2, phi3 = spec.get("gemma2", False), spec.get("phi3", False)
    m = Model()
    m.format = "safetensors"
    m.arch = hf_name
    m.d_model = int(c("hidden_size"))
    m.n_layers = int(c("num_hidden_layers"))
    m.n_heads = [int(c("num_attention_heads"))] * m.n_layers
    m.n_kv_heads = [int(c("num_key_value_heads", m.n_heads[0]))] * m.n_layers
    ff = "moe_intermediate_size" if moe == "qwen" else "intermediate_size"
    m.d_ff = [int(c(ff))] * m.n_layers
    m.head_dim = int(c("head_dim", m.d_model // m.n_heads[0]))
    m.n_rot = int(m.head_dim * float(c("partial_rotary_factor", 1.0)))
    m.eps = float(c("rms_norm_eps", 1e-6))
    m.theta = float(c("rope_theta", 10000.0))
    m.rope = "half"
    rs = cfg.get("rope_scaling")
    if rs is not None:
        kind = rs.get("rope_type", rs.get("type"))
        if kind == "linear":
            m.rope_scales = [1.0 / float(rs["factor"])] * m.n_layers
        elif kind == "llama3":
            factor, lo, hi = float(rs["factor"]), float(rs["low_freq_factor"]), \
                float(rs["high_freq_factor"])
            ctx = float(rs["original_max_position_embeddings"])
            freq = m.theta ** (-np.arange(0, m.n_rot, 2, dtype=np.float64) / m.n_rot)
            wavelen = 2 * math.pi / freq
            s = (ctx / wavelen - lo) / (hi - lo)
            m.rope_freqs = np.where(wavelen < ctx / hi, 1.0, np.where(
                wavelen > ctx / lo, factor, 1.0 / ((1 - s) / factor + s)))
        elif kind != "default":
            raise ModelError(f"{cfg_path}: rope_scaling {rs} is not supported")
    m.bos = int(c("bos_token_id", 1))
    if gemma:
        m.act = "gelu_tanh"
        m.embed_scale = math.sqrt(m.d_model)
        m.attn_scale = float(c("query_pre_attn_scalar", m.head_dim)) ** -0.5
        m.softcap = float(cfg.get("final_logit_softcapping") or 0.0)
        if gemma2:
            m.softcap = float(cfg.get("final_logit_softcapping", 30.0) or 0.0)
            m.attn_softcap = float(cfg.get("attn_logit_softcapping", 50.0) or 0.0)
    if moe:
        m.n_expert = int(c("num_local_experts" if moe == "mixtral" else "num_experts"))
        m.n_expert_used = int(c("num_experts_per_tok"))
        m.expert_norm = bool(cfg.get("norm_topk_prob", moe == "mixtral"))
    # Sliding-window layers.
    sliding = None
    if cfg.get("layer_types") is not None:
        sliding = [lt == "sliding_attention" for lt in cfg["layer_types"]]
    elif gemma2:
        sliding = [(i + 1) % 2 != 0 for i in range(m.n_layers)]
    elif gemma:
        p = int(c("sliding_window_pattern", 6))
        sliding = [(i + 1) % p != 0 for i in range(m.n_layers)]
    elif spec.get("window") == "every" and cfg.get("sliding_window") is not None:
        sliding = [True] * m.n_layers
    if sliding and any(sliding):
        m.window = int(c("sliding_window", 4096 if gemma2 and "sliding_window" not in cfg else None))
        m.sliding = sliding
        local = m.theta if gemma2 else float(c("rope_local_base_freq",
                                              10000.0 if gemma else m.theta))
        m.thetas = [local if s else m.theta for s in sliding]
        if gemma and not gemma2 and m.rope_scales:
            # transformers' Gemma3: sliding layers rotate with the local, unscaled RoPE.
            m.rope_scales = [1.0 if s else f for s, f in zip(sliding, m.rope_scales)]

    emb = t.get("model.embed_tokens.weight", t.get("lm_head.weight"))
    head = t.get("lm_head.weight", emb)
    if not cfg.get("tie_word_embeddings", True) and (
            "lm_head.weight" not in t or "model.embed_tokens.weight" not in t):
        raise ModelError(f"{model_dir}: tie_word_embeddings is false but only one of "
                         f"lm_head.weight / model.embed_tokens.weight is stored")
    if cfg.get("tie_word_embeddings", gemma2):
        head = emb
    m.tok_emb, m.w_out = _f64(emb), _f64(head)
    m.vocab = int(c("vocab_size"))
    shift = 1.0 if gemma else 0.0  # Gemma stores w of x * (1 + w)

    def need(name):
        if name not in t:
            raise ModelError(f"{model_dir}: missing tensor {name}")
        return _f64(t[name])

    def norm(name):
        return need(name) + shift
    m.out_norm = norm("model.norm.weight")
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        layer = dict(attn_norm=norm(p + "input_layernorm.weight"),
                     wo=need(p + "self_attn.o_proj.weight"))
        if phi3:
            H, KV, hd = m.n_heads[i], m.n_kv_heads[i], m.head_dim
            layer["wq"], layer["wk"], layer["wv"] = _split_rows(
                need(p + "self_attn.qkv_proj.weight"), (H * hd, KV * hd, KV * hd),
                p + "self_attn.qkv_proj.weight", model_dir)
        else:
            layer.update(wq=need(p + "self_attn.q_proj.weight"),
                         wk=need(p + "self_attn.k_proj.weight"),
                         wv=need(p + "self_attn.v_proj.weight"))
        if spec.get("bias"):
            for b, proj in (("bq", "q"), ("bk", "k"), ("bv", "v")):
                layer[b] = need(p + f"self_attn.{proj}_proj.bias")
        if spec.get("qk_norm"):
            layer["q_norm"] = norm(p + "self_attn.q_norm.weight")
            layer["k_norm"] = norm(p + "self_attn.k_norm.weight")
        if gemma:
            layer["post_attn_norm"] = norm(p + "post_attention_layernorm.weight")
            layer["ffn_norm"] = norm(p + "pre_feedforward_layernorm.weight")
            layer["post_ffn_norm"] = norm(p + "post_feedforward_layernorm.weight")
        else:
            layer["ffn_norm"] = norm(p + "post_attention_layernorm.weight")
        if moe == "mixtral":
            e = p + "block_sparse_moe."
            layer["router"] = need(e + "gate.weight")
            for key, w in (("gate_exps", "w1"), ("up_exps", "w3"), ("down_exps", "w2")):
                layer[key] = np.stack([need(e + f"experts.{x}.{w}.weight")
                                       for x in range(m.n_expert)])
        elif phi3:
            F = m.d_ff[i]
            layer["w_gate"], layer["w_up"] = _split_rows(
                need(p + "mlp.gate_up_proj.weight"), (F, F), p + "mlp.gate_up_proj.weight",
                model_dir)
            layer["w_down"] = need(p + "mlp.down_proj.weight")
        elif moe == "qwen":
            layer["router"] = need(p + "mlp.gate.weight")
            for key, w in (("gate_exps", "gate"), ("up_exps", "up"), ("down_exps", "down")):
                layer[key] = np.stack([need(p + f"mlp.experts.{x}.{w}_proj.weight")
                                       for x in range(m.n_expert)])
        else:
            layer.update(w_gate=need(p + "mlp.gate_proj.weight"), w_up=need(p + "mlp.up_proj.weight"),
                         w_down=need(p + "mlp.down_proj.weight"))
        m.layers.append(layer)
    return m.check(model_dir)


# ----------------------------------------------------------------------------------------------
# llama2.c legacy checkpoint reader.

def load_llama2c(path):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        data = f.read()
    if size < 28:
        raise ModelError(f"{path}: {size} bytes, too short for the llama2.c header")
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("<7i", data[:28])
    if dim == 0x616B3432:
        raise ModelError(f"{path}: llama2.c version-1+ checkpoints (magic ak42) not supported")
    shared = vocab > 0
    vocab = abs(vocab)
    if min(dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len) <= 0 or dim % n_heads:
        raise ModelError(f"{path}: header {dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len} "
                         f"is invalid")
    hd = dim // n_heads
    kv_dim = n_kv * hd
    L = n_layers
    sections = [("token_embedding", (vocab, dim)), ("rms_att", (L, dim)), ("wq", (L, dim, dim)),
                ("wk", (L, kv_dim, dim)), ("wv", (L, kv_dim, dim)), ("wo", (L, dim, dim)),
                ("rms_ffn", (L, dim)), ("w1", (L, hidden, dim)), ("w2", (L, dim, hidden)),
                ("w3", (L, hidden, dim)), ("rms_final", (dim,)),
                ("freq_cis_real", (seq_len, hd // 2)), ("freq_cis_imag", (seq_len, hd // 2))]
    if not shared:
        sections.append(("wcls", (vocab, dim)))
    need = 28 + 4 * sum(math.prod(s) for _, s in sections)
    if need != size:
        raise ModelError(f"{path}: header {dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len} "
                         f"implies {need} bytes, file has {size}")
    w, pos = {}, 28
    for name, shape in sections:
        n = math.prod(shape)
        w[name] = np.frombuffer(data, dtype="<f4", count=n, offset=pos).reshape(shape)
        pos += 4 * n
    m = Model()
    m.format = "llama2c"
    m.d_model, m.n_layers, m.vocab, m.head_dim, m.n_rot = dim, L, vocab, hd, hd
    m.n_heads, m.n_kv_heads, m.d_ff = [n_heads] * L, [n_kv] * L, [hidden] * L
    m.eps, m.theta, m.rope, m.bos = 1e-5, 10000.0, "adjacent", 1
    m.tok_emb = _f64(w["token_embedding"])
    m.out_norm = _f64(w["rms_final"])
    m.w_out = m.tok_emb if shared else _f64(w["wcls"])
    for i in range(L):
        m.layers.append(dict(
            attn_norm=_f64(w["rms_att"][i]), wq=_f64(w["wq"][i]), wk=_f64(w["wk"][i]),
            wv=_f64(w["wv"][i]), wo=_f64(w["wo"][i]), ffn_norm=_f64(w["rms_ffn"][i]),
            w_gate=_f64(w["w1"][i]), w_down=_f64(w["w2"][i]), w_up=_f64(w["w3"][i])))
    return m.check(path)


def load_model(path):
    if os.path.isdir(path):
        return load_hf(path)
    if path.endswith(".safetensors"):
        return load_hf(os.path.dirname(path) or ".")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return load_gguf(path)
    return load_llama2c(path)


# ----------------------------------------------------------------------------------------------
# The forward pass, over a whole token sequence at once (positions 0..n-1, causal).

def rms_norm(x, w, eps):  # x [n, D], w [D]
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, n_rot, theta, style, pos_scale=1.0, freq_div=None):
    """x [n, heads, hd]; rotates the first n_rot dims of every head by angle
    pos * pos_scale * freq_i / freq_div[i] (linear scaling; Llama 3.1's rope_freqs)."""
    n = x.shape[0]
    freq = theta ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)  # [n_rot/2]
    if freq_div is not None:
        freq = freq / freq_div
    ang = (np.arange(n, dtype=np.float64) * pos_scale)[:, None] * freq[None, :]  # [n, n_rot/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    if style == "adjacent":  # pairs (2i, 2i+1)
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    else:  # pairs (i, i + n_rot/2)
        h = n_rot // 2
        a, b = x[..., :h], x[..., h:n_rot]
        out[..., :h] = a * cos - b * sin
        out[..., h:n_rot] = a * sin + b * cos
    return out


def attention(m, l, h, i):  # h [n, D] (normed) -> [n, D]
    n, hd = h.shape[0], m.head_dim
    H, KV = m.n_heads[i], m.n_kv_heads[i]
    theta = m.thetas[i] if m.thetas else m.theta

    def project(w, b, heads, norm):  # -> [n, heads, hd]
        y = h @ w.T
        if b is not None:
            y = y + b
        y = y.reshape(n, heads, hd)
        return y if norm is None else rms_norm(y, norm, m.eps)  # QK-norm: over each head
    ps = m.rope_scales[i] if m.rope_scales else 1.0
    q = rope(project(l["wq"], l.get("bq"), H, l.get("q_norm")), m.n_rot, theta, m.rope, ps,
             m.rope_freqs)
    k = rope(project(l["wk"], l.get("bk"), KV, l.get("k_norm")), m.n_rot, theta, m.rope, ps,
             m.rope_freqs)
    v = project(l["wv"], l.get("bv"), KV, None)  # [n, KV, hd]
    group = H // KV
    k = np.repeat(k, group, axis=1)  # query head j reads kv head j // group
    v = np.repeat(v, group, axis=1)
    scale = m.attn_scale if m.attn_scale else 1.0 / math.sqrt(hd)
    scores = np.einsum("qhd,khd->hqk", q, k) * scale  # [H, n, n]
    if m.attn_softcap:  # Gemma 2: capped before the mask and the softmax
        scores = m.attn_softcap * np.tanh(scores / m.attn_softcap)
    dist = np.arange(n)[:, None] - np.arange(n)[None, :]  # query pos - key pos
    visible = dist >= 0  # causal
    if m.sliding and m.sliding[i]:
        visible &= dist < m.window  # the last `window` positions, the query's own included
    scores = np.where(visible[None], scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", scores, v).reshape(n, H * hd)
    return out @ l["wo"].T


def gelu_tanh(g):
    return 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))


def gated_mlp(act, w_gate, w_up, w_down, h):  # h [n, D] -> [n, D]
    g = h @ w_gate.T  # [n, F]
    u = h @ w_up.T
    a = gelu_tanh(g) if act == "gelu_tanh" else g / (1.0 + np.exp(-g))
    return (a * u) @ w_down.T


def route(logits, k, norm):
    """One token's experts: the k largest logits (ties: lower id first) and their weights,
    the softmax over the chosen logits (norm) or their probabilities under the softmax over
    all experts."""
    order = sorted(range(len(logits)), key=lambda e: (-logits[e], e))[:k]
    p = np.exp(logits - np.max(logits))
    chosen = p[order]
    return order, chosen / (chosen.sum() if norm else p.sum())


def mlp(m, l, h):  # h [n, D] (normed) -> [n, D]
    if l.get("router") is None:
        return gated_mlp(m.act, l["w_gate"], l["w_up"], l["w_down"], h)
    logits = h @ l["router"].T  # [n, E]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        experts, weights = route(logits[t], m.n_expert_used, m.expert_norm)
        for e, w in zip(experts, weights):
            out[t] += w * gated_mlp(m.act, l["gate_exps"][e], l["up_exps"][e],
                                    l["down_exps"][e], h[t:t + 1])[0]
    return out


def forward(m, tokens):
    """Logits [n, vocab] (float64) for every position of `tokens`."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size == 0:
        raise ModelError("no tokens")
    if tokens.min() < 0 or tokens.max() >= m.vocab:
        raise ModelError(f"token id out of range [0, {m.vocab}): {tokens.min()}..{tokens.max()}")
    x = m.tok_emb[tokens] * m.embed_scale  # [n, D]
    for i, l in enumerate(m.layers):
        a = attention(m, l, rms_norm(x, l["attn_norm"], m.eps), i)
        if l.get("post_attn_norm") is not None:
            a = rms_norm(a, l["post_attn_norm"], m.eps)
        x = x + a
        f = mlp(m, l, rms_norm(x, l["ffn_norm"], m.eps))
        if l.get("post_ffn_norm") is not None:
            f = rms_norm(f, l["post_ffn_norm"], m.eps)
        x = x + f
    logits = rms_norm(x, m.out_norm, m.eps) @ m.w_out.T
    if m.softcap:
        logits = m.softcap * np.tanh(logits / m.softcap)
    return logits


def greedy(m, prompt, n_predict):
    ids = list(prompt)
    for _ in range(n_predict):
        ids.append(int(np.argmax(forward(m, ids)[-1])))
    return ids[len(prompt):]


def perplexity(m, tokens, n_ctx, bos, max_chunks=0):
    """llama.cpp's scheme: non-overlapping chunks of n_ctx tokens, the first replaced by BOS,
    scoring the predictions of tokens n_ctx/2+1 .. n_ctx-1 of each chunk (at most max_chunks
    chunks when > 0). Returns (ppl, its standard error, tokens scored)."""
    n_chunks = len(tokens) // n_ctx
    if max_chunks > 0:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks == 0 or n_ctx < 4:
        raise ModelError(f"{len(tokens)} tokens, need at least one chunk of ctx {n_ctx} >= 4")
    nlls = []
    first = n_ctx // 2
    for c in range(n_chunks):
        chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        chunk[0] = bos
        logits = forward(m, chunk)[first:n_ctx - 1]  # predictions of chunk[first+1:]
        mx = logits.max(axis=-1, keepdims=True)
        logp = logits - mx - np.log(np.exp(logits - mx).sum(axis=-1, keepdims=True))
        targets = np.asarray(tokens[c * n_ctx + first + 1:(c + 1) * n_ctx])
        nlls.extend(-logp[np.arange(len(targets)), targets])
    nll = np.asarray(nlls)
    mean = nll.mean()
    se = math.sqrt(max(nll.var(), 0.0) / max(len(nll) - 1, 1))
    return math.exp(mean), math.exp(mean) * se, len(nll)


# ----------------------------------------------------------------------------------------------
# Command line.

def parse_ids(text):
    text = text.replace(",", " ").split()
    try:
        return [int(t) for t in text]
    except ValueError as e:
        raise ModelError(f"bad token id list: {e}")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("logits", "greedy", "ppl", "info"):
        p = sub.add_parser(name)
        p.add_argument("model")
        p.add_argument("--tokenizer", help="accepted for symmetry with weir; not used")
        if name in ("logits", "greedy"):
            p.add_argument("--tokens", required=True, help="comma-separated token ids")
        if name == "logits":
            p.add_argument("-o", "--output", required=True)
        if name == "greedy":
            p.add_argument("-n", "--n-predict", type=int, default=60)
        if name == "ppl":
            p.add_argument("--tokens-file", required=True, help="token ids, whitespace/commas")
            p.add_argument("-c", "--ctx-size", type=int, default=512)
            p.add_argument("--bos", type=int, help="BOS id (default: from the model file)")
            p.add_argument("--chunks", type=int, default=0, help="score at most this many chunks")
            p.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        m = load_model(args.model)
        if args.cmd == "info":
            print(json.dumps(m.info()))
        elif args.cmd == "logits":
            forward(m, parse_ids(args.tokens)).astype("<f4").tofile(args.output)
        elif args.cmd == "greedy":
            print(" ".join(str(t) for t in greedy(m, parse_ids(args.tokens), args.n_predict)))
        else:
            with open(args.tokens_file) as f:
                ids = parse_ids(f.read())
            bos = m.bos if args.bos is None else args.bos
            ppl, se, n = perplexity(m, ids, args.ctx_size, bos, args.chunks)
            if args.json:
                print(json.dumps({"ppl": ppl, "ppl_stderr": se, "tokens_scored": n,
                                  "ctx": args.ctx_size}))
            else:
                print(f"ppl {ppl:.6f} +/- {se:.6f} over {n} tokens (ctx {args.ctx_size})")
    except (ModelError, OSError) as e:
        print(f"weir_ref: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
