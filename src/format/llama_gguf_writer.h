// Writing a model as a GGUF file llama.cpp can load: general.architecture and the key prefix are
// the config's ArchSpec row (llama, qwen2, qwen3, gemma3, phi3, ...), then the hyperparameters,
// the tokenizer and the weights of the row's tensor table under their canonical names, optionally
// converted to another element type. Works for a ModelFile from any reader (GGUF, safetensors,
// llama2.c). The parts of a fused tensor (TensorSpec::fused_in: phi3's attn_q/k/v, ffn_gate/up),
// which a ModelFile holds split, are written as the fused tensor, their rows one after another.
//
// RoPE: GGUF "llama" files pair adjacent dimensions (x[2i], x[2i+1]) of each head. A model laid
// out for rotate-half RoPE (Hugging Face: x[i] with x[i + rope_dim/2]) gets the rows of attn_q
// and attn_k permuted within each head -- new row 2i = old row i, new row 2i+1 = old row
// i + rope_dim/2 -- which gives identical attention scores under adjacent-pair RoPE (the same
// permutation of q and k leaves q.k unchanged; v and attn_output are untouched).
//
// Thread safety: free functions; the model is only read.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/gguf_writer.h"
#include "format/model_file.h"
#include "tensor/dtype.h"

namespace weir::format {

// Canonical tensor names in the order weir writes them: token_embd, per layer the tensors of the
// architecture's table in its order (Llama: attn_norm, attn_q, attn_k, attn_v, attn_output,
// ffn_norm, ffn_gate, ffn_up, ffn_down; a fused tensor once, under its own name: phi3's
// attn_qkv), then output_norm and output (left out when config.tied_output), then optional
// global tensors (rope_freqs.weight). An optional tensor (a q/k/v bias, rope_freqs) is listed
// when `has_optional(name)` says so (a fused one when it says so of any part); without the
// function, when the row's converter writes it (ArchSpec::qkv_bias: the biases).
std::vector<std::string> LlamaTensorNames(
    const LlamaConfig& config,
    const std::function<bool(const std::string&)>& has_optional = nullptr);

// llama.cpp's general.file_type for a model whose 2-D weights are mostly `t`: the DTypeTraits
// table's file_type (F32 0, F16 1, Q4_0 2, Q8_0 7, BF16 32, ...).
uint32_t LlamaFileType(DType t);

// Adds general.architecture/name/file_type, every <arch>.* hyperparameter (Gemma 2/3 also
// attention.sliding_window, its pattern when it is not the row's default, rope.freq_base_swa
// unless it is gemma2's global base, final_logit_softcapping and attn_logit_softcapping when
// set, and for Gemma 2 a 0 where it means none; rope.scaling.type "linear" and
// rope.scaling.factor when config.rope_scaling_factor != 1) and the tokenizer.ggml.* keys.
// Per-layer head counts and d_ff are written as arrays of n_layers values when they differ
// between layers (weir's structured pruning; llama.cpp reads such arrays too), and
// llama.attention.key_length/value_length when head_dim is not d_model / n_head. A context
// length of 0 (unknown) is written as 2048, because llama.cpp requires the key. Tokenizers: SentencePiece -> "llama" (token types inferred when absent:
// <0xNN> BYTE, bos/eos CONTROL, unk UNKNOWN); byte-level BPE -> "gpt2" with merges;
// merge-list BPE that is not byte-level (tokenizer.json with a "▁" marker) -> "llama" with the
// score of the token each merge makes set to -rank; none -> "no_vocab".
Status AddLlamaGgufMetadata(const LlamaConfig& config, const TokenizerSpec& tokenizer,
                            const std::string& name, uint32_t file_type, GgufWriter* writer);

// Writes `model` to `path` (via path.tmp + rename). With `convert_to`, every 2-D or 3-D weight
// whose row length is a multiple of the type's block size is converted (dequantize to F32, then
// quantize with the reference QuantizeRow) except mixture-of-experts routers (ffn_gate_inp,
// kept as llama-quantize keeps them); others keep their type. 1-D tensors (the norms)
// are always written as F32. rotate-half models of arch llama get the q/k row permutation
// described above (the other architectures' GGUF files rotate halves themselves). Tensors
// outside the architecture's table are not written. `extra_metadata` is appended after
// the hyperparameters and tokenizer keys (e.g. weir.prune.* from `weir prune`); a key that
// repeats one already written makes the write fail.
Status WriteLlamaGguf(const ModelFile& model, const std::string& path,
                      std::optional<DType> convert_to,
                      const std::function<void(double)>& progress = nullptr,
                      const std::vector<std::pair<std::string, GgufValue>>& extra_metadata = {});

}  // namespace weir::format
