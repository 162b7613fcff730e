// Reads a Hugging Face config.json for LlamaForCausalLM into a LlamaConfig.
//
// Fields used (all others are kept as metadata only):
//   architectures / model_type   must include "LlamaForCausalLM" / be "llama"
//   hidden_size                  d_model                      (required)
//   intermediate_size            d_ff                         (required)
//   num_hidden_layers            n_layers                     (required)
//   num_attention_heads          n_head                       (required)
//   num_key_value_heads          n_head_kv                    (default n_head)
//   head_dim                     head_dim                     (default hidden_size / n_head)
//   vocab_size                   vocab_size                   (required)
//   max_position_embeddings      ctx_len                      (default 0 = unknown)
//   rms_norm_eps                 rms_eps                      (default 1e-6, as transformers)
//   rope_theta                   rope_theta                   (default 10000)
//   tie_word_embeddings          output head = token_embd     (default false, as transformers)
//   bos_token_id, eos_token_id   (eos may be a list; its first entry is used)
//   rope_scaling                 null / "default": none; "linear": rope_scaling_factor;
//                                "llama3": rope_freqs (Llama 3.1's factors, rope_scaling.h)
// Rejected as unsupported: other rope_scaling types, hidden_act other than "silu",
// attention_bias or mlp_bias true. RoPE is RopeStyle::kRotateHalf (HF's q/k layout).
//
// Thread safety: free function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/model_file.h"

namespace weir::format {

struct HfLlamaConfig {
  LlamaConfig config;  // layers filled uniformly
  bool tie_word_embeddings = false;
  bool tie_word_embeddings_stated = false;  // the file has the field
  int32_t bos_token_id = -1;                // -1: not stated
  int32_t eos_token_id = -1;
  // Every top-level scalar field as ("hf.<key>", value) for `weir inspect`.
  std::vector<std::pair<std::string, std::string>> metadata;
  // rope_scaling "llama3": the per-pair RoPE frequency factors [rope_dim / 2], which the reader
  // stores as the tensor rope_freqs.weight (empty: none).
  std::vector<float> rope_freqs;
};

// `path` is only used in messages.
Result<HfLlamaConfig> ParseHfLlamaConfig(std::string_view json_text, const std::string& path);

}  // namespace weir::format
