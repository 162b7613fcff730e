// Reads a Hugging Face config.json into a LlamaConfig, for every architecture of the HF table
// (format/arch_spec.h, HfArch): `architectures` (else model_type) picks the entry and so the
// ArchSpec row. This is the one place where config.json fields map to LlamaConfig.
//
// Fields used (all others are kept as metadata only):
//   architectures / model_type   an entry of the HF table: LlamaForCausalLM, MistralForCausalLM,
//                                Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM
//                                (gemma3_text), MixtralForCausalLM, Qwen3MoeForCausalLM,
//                                Gemma2ForCausalLM, Phi3ForCausalLM
//   hidden_size                  d_model                      (required)
//   intermediate_size            d_ff                         (required; MoE: expert width)
//   moe_intermediate_size        d_ff of a MoE row, when stated (Qwen3-MoE)
//   num_hidden_layers            n_layers                     (required)
//   num_attention_heads          n_head                       (required)
//   num_key_value_heads          n_head_kv                    (default n_head)
//   head_dim                     head_dim                     (default hidden_size / n_head)
//   vocab_size                   vocab_size                   (required)
//   max_position_embeddings      ctx_len                      (default 0 = unknown)
//   rms_norm_eps                 rms_eps                      (default 1e-6, as transformers)
//   rope_theta                   rope_theta                   (default 10000)
//   tie_word_embeddings          output head = token_embd     (default false, as transformers;
//                                true for Gemma 2, whose config class defaults to tied)
//   partial_rotary_factor        rope_dim = head_dim * it (Phi-4-mini), RoPE on halves of the
//                                first rope_dim dims (default 1)
//   bos_token_id, eos_token_id   (eos may be a list; its first entry is used)
//   hidden_act / hidden_activation  must be the row's activation: silu, or gelu_pytorch_tanh /
//                                gelu_new for GELU-tanh (Gemma)
//   query_pre_attn_scalar        attn_scale = 1/sqrt(it) when it differs from head_dim (Gemma)
//   final_logit_softcapping      final_logit_softcap (rows with a soft-cap; others refuse it)
//   attn_logit_softcapping       attn_logit_softcap (rows with ArchSpec::attn_softcap: Gemma 2;
//                                others refuse it). Either cap left out: the row's default
//                                (Gemma 2: 50 and 30, as Gemma2Config); null: off
//   sliding_window, layer_types, sliding_window_pattern, rope_local_base_freq
//                                sliding-window layers, their window and RoPE base:
//                                layer_types ("sliding_attention" / "full_attention" per layer)
//                                when stated; else as the entry says (HfSlidingWindow): Gemma
//                                the period sliding_window_pattern (default the row's), Mistral
//                                and Mixtral every layer when sliding_window is not null, Llama
//                                and Qwen none (use_sliding_window true without layer_types is
//                                refused), Phi-3 none (ignored, as llama.cpp's phi3 graph does).
//                                Gemma 2's period is 2: layers 0, 2, ... slide, as in
//                                transformers' Gemma2Config and llama.cpp. sliding_window left
//                                out: the row's default (Gemma 2: 4096). rope_local_base_freq is
//                                the sliding layers' RoPE base (default the row's, else
//                                rope_theta: Gemma 2 has one base).
//   num_local_experts / num_experts, num_experts_per_tok, norm_topk_prob
//                                n_expert, n_expert_used, expert_weights_norm (MoE rows)
//   rope_scaling                 null / "default": none; "linear": rope_scaling_factor;
//                                "llama3": rope_freqs (Llama 3.1's factors, rope_scaling.h)
// Rejected as unsupported: other rope_scaling types, rope_parameters other than null, an
// activation that is not the row's, attention_bias or mlp_bias true, a soft-cap the row lacks,
// use_bidirectional_attention, Qwen3-MoE's mlp_only_layers / decoder_sparse_step other than 1.
// RoPE is RopeStyle::kRotateHalf (HF's q/k layout, every architecture).
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
  LlamaConfig config;         // layers filled uniformly; config.arch is hf->arch
  const HfArch* hf = nullptr;  // the entry of the HF table (never null on success)
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
