// Reader for Hugging Face checkpoints in safetensors format, with config.json (and tokenizer.json)
// beside the weights: every `architectures` value of the HF table in format/arch_spec.h
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM,
// MixtralForCausalLM, Qwen3MoeForCausalLM).
//
// safetensors file layout:
//   offset 0      u64 (little-endian) N: length of the JSON header in bytes
//   offset 8      N bytes of UTF-8 JSON, an object:
//                   { "<tensor name>": { "dtype": "F32" | "F16" | "BF16" | ...,
//                                        "shape": [d0, d1, ...],            outermost first
//                                        "data_offsets": [begin, end] },
//                     ...,
//                     "__metadata__": { "<key>": "<string value>", ... } }   (optional)
//                 writers pad it with spaces so the data section starts 8-byte aligned
//   offset 8 + N  the data section; each tensor's bytes are [8 + N + begin, 8 + N + end),
//                 row-major, little-endian
// Checks: 2 <= N <= 100 MB and 8 + N <= file size; the JSON parses and is an object; every
// dtype is F32/F16/BF16 (others are reported as unsupported, naming the tensor); shape has at
// most 4 dims and product(shape) * dtype size == end - begin (overflow-safe); the extents lie in
// the data section, do not overlap and, as the format requires, cover it without holes.
// A tensor whose start is not aligned to its element size is copied into an owned, aligned
// buffer kept in ModelFile::backing; aligned tensors are views into the read-only mapping.
//
// Model mapping (HF name -> canonical GGUF name, see model_file.h): config.json (hf_config.h)
// picks the HF table's entry, whose names bind each tensor of the ArchSpec row by role; for
// Llama
//   model.embed_tokens.weight                      -> token_embd.weight
//   lm_head.weight                                 -> output.weight
//   model.norm.weight                              -> output_norm.weight
//   model.layers.N.input_layernorm.weight          -> blk.N.attn_norm.weight
//   model.layers.N.self_attn.{q,k,v,o}_proj.weight -> blk.N.attn_{q,k,v,output}.weight
//   model.layers.N.post_attention_layernorm.weight -> blk.N.ffn_norm.weight
//   model.layers.N.mlp.{gate,up,down}_proj.weight  -> blk.N.ffn_{gate,up,down}.weight
//   model.layers.N.self_attn.rotary_emb.inv_freq   (ignored: recomputed from rope_theta)
// and arch_spec.cc lists the other families' names. Every named tensor is required (lm_head
// unless tied); a stored tensor the entry does not name (a bias Llama does not have, adapters,
// quantization scales) is reported as unsupported rather than silently dropped. Each tensor's
// shape is checked against the row (messages give both names).
// At load, by the entry's switches:
//   - q/k keep HF's layout in every family, so RoPE is RopeStyle::kRotateHalf;
//   - 1-D tensors (norms, biases) stored F16/BF16 are converted to F32 (owned buffers);
//   - Gemma (norm_plus_one): HF stores w of x * (1 + w); the F32 copy holds 1 + w, what the
//     row's ordinary RMSNorm (and llama.cpp's GGUF) expects;
//   - experts (Mixtral's block_sparse_moe.experts.E.w1/w3/w2, Qwen3-MoE's
//     mlp.experts.E.{gate,up,down}_proj): the n_expert 2-D tensors of a layer are copied into
//     one owned [n_expert, rows, cols] tensor of their common type (the row's 3-D expert
//     tensors; a copy of every expert weight in memory).
// Tied embeddings: torch's save_model stores a shared tensor once and records the dropped name
// in __metadata__ ("model.embed_tokens.weight": "lm_head.weight" in TinyStories-656K); such an
// alias is resolved. When config.json says tie_word_embeddings, or only one of the two tensors
// exists, token_embd.weight is that tensor and config.tied_output = true.
// Norm weights stored as F16/BF16 are converted to F32 (owned buffers; norms are tiny).
//
// Sharded checkpoints: a directory holding model.safetensors.index.json ("weight_map":
// {tensor: shard file}) instead of model.safetensors is read shard by shard.
//
// Tokenizer: options.tokenizer_path, else tokenizer.json beside the weights (kind kNone when
// there is none). Special ids come from tokenizer.json / tokenizer_config.json; config.json's
// bos_token_id / eos_token_id fill in those the tokenizer files leave unset.
//
// Thread safety: free functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/model_file.h"
#include "tensor/tensor_view.h"

namespace weir::format {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // relative to the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t json_bytes = 0;                // N
  uint64_t data_offset = 0;               // 8 + N: where the data section starts in the file
  std::vector<SafetensorsEntry> tensors;  // sorted by begin
  std::vector<std::pair<std::string, std::string>> metadata;  // __metadata__
};

constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and checks the header of a whole file held in data[0..size). `path` is for messages.
Result<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* data, uint64_t size,
                                                 const std::string& path);

// `path` is a model directory, a .safetensors file (config.json beside it), or a
// model.safetensors.index.json.
Result<ModelFile> LoadSafetensorsModel(const std::string& path, const LoadOptions& options = {});

}  // namespace weir::format
