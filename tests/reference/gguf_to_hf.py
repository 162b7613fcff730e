#!/usr/bin/python3
"""Writes a GGUF model (F32/F16/BF16, e.g. from `weir gen`) as a Hugging Face checkpoint:
model.safetensors + config.json, the way transformers saves that model class.

It undoes what llama.cpp's converter (convert_hf_to_gguf.py) does, written from its
documented behaviour, not from weir's C++:
  - names: GGUF blk.N.attn_q.weight -> model.layers.N.self_attn.q_proj.weight, ... (per class)
  - Llama and Mixtral: the converter permutes the rows of q and k of each head from RoPE on
    halves (i, i + hd/2) to adjacent pairs (2i, 2i+1): GGUF row 2j + s of a head is HF row
    s * hd/2 + j; this script puts them back
  - Gemma 2 and 3: the converter stores 1 + w for every RMSNorm weight w; this script stores w
  - Phi-3: GGUF's attn_qkv (q, k, v rows) is HF's qkv_proj and GGUF's ffn_up (gate rows, then
    up rows) is HF's gate_up_proj, as they are; rope.dimension_count < head_dim is
    partial_rotary_factor
  - mixtures of experts: GGUF stacks the experts in [n_expert, rows, cols]; HF stores one
    2-D tensor per expert
Norms and biases are written F32; 2-D weights as --dtype (f32, f16 or bf16; a GGUF of that type
is written back bit for bit).

Usage: gguf_to_hf.py MODEL.gguf OUT_DIR --arch Qwen2ForCausalLM [--dtype bf16]
           [--sliding-window N] [--pattern-key]
  --sliding-window  Mistral/Mixtral: config.json's sliding_window (default null)
  --pattern-key     Gemma 3: state sliding_window_pattern instead of layer_types; Gemma 2:
                    state neither (transformers' default: every other layer from layer 0)
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weir_ref  # noqa: E402  (its GGUF reader only)

# HF class -> (GGUF architecture, model_type, family traits)
CLASSES = {
    "LlamaForCausalLM": ("llama", "llama", {}),
    "MistralForCausalLM": ("llama", "mistral", {}),
    "Qwen2ForCausalLM": ("qwen2", "qwen2", {"bias"}),
    "Qwen3ForCausalLM": ("qwen3", "qwen3", {"qk_norm"}),
    "Gemma3ForCausalLM": ("gemma3", "gemma3_text", {"qk_norm", "gemma"}),
    "MixtralForCausalLM": ("llama", "mixtral", {"mixtral"}),
    "Qwen3MoeForCausalLM": ("qwen3moe", "qwen3_moe", {"qk_norm", "qwen_moe"}),
    "Gemma2ForCausalLM": ("gemma2", "gemma2", {"gemma"}),
    "Phi3ForCausalLM": ("phi3", "phi3", {"phi3"}),
}


def unpermute(w, n_head):
    """GGUF (adjacent pairs) rows of q or k -> HF (halves) rows, per head."""
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_bytes(a, dtype):
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    bits = a.view(np.uint32)  # BF16: round to nearest even (exact for values that came from BF16)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, ndarray)."""
    header, blobs, off = {}, [], 0
    for name, dtype, a in tensors:
        b = to_bytes(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header)
    text += " " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for b in blobs:
            f.write(b)


def convert(gguf_path, out_dir, hf_class, dtype, sliding_window, pattern_key):
    gguf_arch, model_type, traits = CLASSES[hf_class]
    meta, t = weir_ref.read_gguf(gguf_path)
    if meta.get("general.architecture") != gguf_arch:
        raise SystemExit(f"{gguf_path}: general.architecture {meta.get('general.architecture')!r}"
                         f", {hf_class} needs {gguf_arch!r}")
    k = lambda name, default=None: meta.get(f"{gguf_arch}.{name}", default)  # noqa: E731
    L = int(k("block_count"))
    D = int(k("embedding_length"))
    H = k("attention.head_count")
    KV = k("attention.head_count_kv", H)
    if isinstance(H, list) or isinstance(KV, list):
        raise SystemExit(f"{gguf_path}: per-layer head counts have no config.json form")
    H, KV = int(H), int(KV)
    hd = int(k("attention.key_length", D // H))
    experts = "mixtral" in traits or "qwen_moe" in traits
    ff = int(k("expert_feed_forward_length", k("feed_forward_length")) if experts
             else k("feed_forward_length"))
    vocab = t["token_embd.weight"].shape[0]
    cfg = {
        "architectures": [hf_class], "model_type": model_type,
        "hidden_size": D, "intermediate_size": ff, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": hd,
        "vocab_size": vocab, "max_position_embeddings": int(k("context_length", 2048)),
        "rms_norm_eps": float(k("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(k("rope.freq_base", 10000.0)), "rope_scaling": None,
        "tie_word_embeddings": "output.weight" not in t,
        "bos_token_id": int(meta.get("tokenizer.ggml.bos_token_id", 1)),
        "eos_token_id": int(meta.get("tokenizer.ggml.eos_token_id", 2)),
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
    }
    if "gemma" in traits:
        gemma2 = gguf_arch == "gemma2"
        cfg["hidden_activation"] = "gelu_pytorch_tanh"
        # llama.cpp's converter writes no query scale: 1/sqrt(head_dim) (the 27B models aside).
        cfg["query_pre_attn_scalar"] = hd
        # GGUF keys left out: llama.cpp's defaults (Gemma 2: 50 and 30; Gemma 3: none).
        final_cap = k("final_logit_softcapping", 30.0 if gemma2 else None)
        cfg["final_logit_softcapping"] = None if final_cap is None else float(final_cap)
        cfg["attn_logit_softcapping"] = float(k("attn_logit_softcapping", 50.0)) if gemma2 else None
        window = int(k("attention.sliding_window", 4096 if gemma2 else 0))
        cfg["sliding_window"] = window or None
        if not gemma2:  # Gemma 2 has one RoPE base
            cfg["rope_local_base_freq"] = float(k("rope.freq_base_swa", 10000.0))
        elif k("rope.freq_base_swa") is not None:
            raise SystemExit("Gemma 2 has no config.json form of rope.freq_base_swa")
        pattern = k("attention.sliding_window_pattern", 2 if gemma2 else 6)
        if isinstance(pattern, list):
            flags = [bool(v) for v in pattern]
        else:
            flags = [int(pattern) == 0 or i % int(pattern) < int(pattern) - 1 for i in range(L)]
        if pattern_key:
            if isinstance(pattern, list):
                raise SystemExit("--pattern-key needs a periodic pattern")
            if not gemma2:
                cfg["sliding_window_pattern"] = int(pattern)
            elif flags != [i % 2 == 0 for i in range(L)]:
                raise SystemExit("Gemma 2 without layer_types slides on even layers only")
        elif window:
            cfg["layer_types"] = ["sliding_attention" if f else "full_attention" for f in flags]
    else:
        cfg["hidden_act"] = "silu"
    if "phi3" in traits:
        n_rot = int(k("rope.dimension_count", hd))
        if n_rot != hd:
            cfg["partial_rotary_factor"] = n_rot / hd
        # Phi-3-mini-4k states a window that the phi3 graphs of llama.cpp and weir ignore.
        phi_window = k("attention.sliding_window")
        cfg["sliding_window"] = None if phi_window is None else int(phi_window)
        if "rope_factors_long.weight" in t:
            raise SystemExit("LongRoPE factors have no config.json form here")
    if model_type in ("mistral", "mixtral"):
        cfg["sliding_window"] = sliding_window
    if "bias" not in traits and model_type != "qwen2":
        cfg["attention_bias"] = False
    if "mixtral" in traits:
        cfg["num_local_experts"] = int(k("expert_count"))
        cfg["num_experts_per_tok"] = int(k("expert_used_count"))
    if "qwen_moe" in traits:
        cfg["num_experts"] = int(k("expert_count"))
        cfg["num_experts_per_tok"] = int(k("expert_used_count"))
        cfg["moe_intermediate_size"] = ff
        cfg["intermediate_size"] = 3 * ff  # the dense width, read by no layer
        cfg["norm_topk_prob"] = bool(k("expert_weights_norm", True))
        cfg["decoder_sparse_step"] = 1
        cfg["mlp_only_layers"] = []

    permute = gguf_arch == "llama"
    shift = 1.0 if "gemma" in traits else 0.0
    out = []

    def weight(name, a):
        out.append((name, dtype, a))

    def vec(name, a, is_norm=True):
        out.append((name, "F32", a - shift if is_norm else a))

    weight("model.embed_tokens.weight", t["token_embd.weight"])
    for i in range(L):
        g = lambda n: t[f"blk.{i}.{n}"]  # noqa: E731
        p = f"model.layers.{i}."
        vec(p + "input_layernorm.weight", g("attn_norm.weight"))
        if "phi3" in traits:
            qkv = t.get(f"blk.{i}.attn_qkv.weight")
            if qkv is None:  # stored apart: fuse them as Phi3Attention's qkv_proj
                qkv = np.concatenate([g("attn_q.weight"), g("attn_k.weight"), g("attn_v.weight")])
            weight(p + "self_attn.qkv_proj.weight", qkv)
            if f"blk.{i}.attn_qkv.bias" in t or f"blk.{i}.attn_q.bias" in t:
                raise SystemExit("Phi3ForCausalLM has no q/k/v bias")
        else:
            q, kk = g("attn_q.weight"), g("attn_k.weight")
            weight(p + "self_attn.q_proj.weight", unpermute(q, H) if permute else q)
            weight(p + "self_attn.k_proj.weight", unpermute(kk, KV) if permute else kk)
            weight(p + "self_attn.v_proj.weight", g("attn_v.weight"))
        if "bias" in traits:
            for proj in "qkv":
                vec(p + f"self_attn.{proj}_proj.bias", g(f"attn_{proj}.bias"), is_norm=False)
        if "qk_norm" in traits:
            vec(p + "self_attn.q_norm.weight", g("attn_q_norm.weight"))
            vec(p + "self_attn.k_norm.weight", g("attn_k_norm.weight"))
        weight(p + "self_attn.o_proj.weight", g("attn_output.weight"))
        if "gemma" in traits:
            vec(p + "post_attention_layernorm.weight", g("post_attention_norm.weight"))
            vec(p + "pre_feedforward_layernorm.weight", g("ffn_norm.weight"))
        else:
            vec(p + "post_attention_layernorm.weight", g("ffn_norm.weight"))
        if experts:
            if "mixtral" in traits:
                moe, router, names = "block_sparse_moe.", "gate.weight", ("w1", "w3", "w2")
                fmt = p + moe + "experts.{x}.{w}.weight"
            else:
                moe, router, names = "mlp.", "gate.weight", ("gate", "up", "down")
                fmt = p + moe + "experts.{x}.{w}_proj.weight"
            out.append((p + moe + router, "F32", g("ffn_gate_inp.weight")))
            stacks = [g("ffn_gate_exps.weight"), g("ffn_up_exps.weight"), g("ffn_down_exps.weight")]
            for x in range(stacks[0].shape[0]):
                for w, stack in zip(names, stacks):
                    weight(fmt.format(x=x, w=w), stack[x])
        elif "phi3" in traits:
            weight(p + "mlp.gate_up_proj.weight", g("ffn_up.weight"))  # gate rows, then up rows
            weight(p + "mlp.down_proj.weight", g("ffn_down.weight"))
        else:
            weight(p + "mlp.gate_proj.weight", g("ffn_gate.weight"))
            weight(p + "mlp.up_proj.weight", g("ffn_up.weight"))
            weight(p + "mlp.down_proj.weight", g("ffn_down.weight"))
        if "gemma" in traits:
            vec(p + "post_feedforward_layernorm.weight", g("post_ffw_norm.weight"))
    vec("model.norm.weight", t["output_norm.weight"])
    if "output.weight" in t:
        weight("lm_head.weight", t["output.weight"])

    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), out)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out_dir")
    ap.add_argument("--arch", required=True, choices=sorted(CLASSES))
    ap.add_argument("--dtype", default="f32", choices=("f32", "f16", "bf16"))
    ap.add_argument("--sliding-window", type=int, default=None)
    ap.add_argument("--pattern-key", action="store_true")
    a = ap.parse_args(argv)
    try:
        convert(a.gguf, a.out_dir, a.arch, a.dtype.upper(), a.sliding_window, a.pattern_key)
    except weir_ref.ModelError as e:
        print(f"gguf_to_hf: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
