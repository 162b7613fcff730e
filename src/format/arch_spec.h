// ArchSpec: what a model architecture is, as data. One row per GGUF `general.architecture` weir
// runs; the GGUF loader, the validator (ValidateLlama), the weight binding (model/llama_weights),
// the GGUF writer and `weir gen` read the row instead of naming Llama's tensors themselves.
//
// A row holds
//   - the GGUF name, which is also the metadata key prefix ("gemma3" -> gemma3.block_count),
//   - the tensor table: each tensor's name, what it is to the forward pass (TensorRole), its
//     shape in terms of the config's symbols (Dim), whether it is per layer and whether it is
//     required (an optional tensor that is absent binds to nothing: output.weight -> tied head,
//     attn_q.bias -> no bias),
//   - the switches in which the decoder block differs between architectures: RoPE pairing,
//     QK-norm, post-norms, MLP activation, embedding scale, the sliding-window layer pattern and
//     the RoPE base of sliding layers, whether a final logit soft-cap may be stated.
// Values that differ between files of one architecture (the window size, the soft-cap, per-layer
// bases) are read by the loader into LlamaConfig (model_file.h); the row says which keys exist.
//
// Adding an architecture whose block is made of the switches below is one row in arch_spec.cc.
//
//   arch    RoPE         act        QK-norm  post-norms  emb. scale  sliding layers  q/k/v bias
//   llama   adjacent     SiLU       -        -           1           -               optional
//   qwen2   rotate-half  SiLU       -        -           1           -               optional
//   qwen3   rotate-half  SiLU       yes      -           1           -               optional
//   gemma3  rotate-half  GELU-tanh  yes      yes         sqrt(d)     5 of every 6    optional
//
// Thread safety: the rows are immutable statics.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tensor/rope_style.h"
#include "tensor/tensor_view.h"

namespace weir::format {

struct LlamaConfig;

enum class Activation : uint8_t {
  kSilu,      // SwiGLU: silu(g) * u
  kGeluTanh,  // GeGLU: gelu(g) * u with gelu's tanh approximation (Gemma)
};
const char* ActivationName(Activation a);

// A tensor dimension in terms of the config's symbols (the layer's own values for per-layer
// tensors).
enum class Dim : uint8_t {
  kNone,     // no second dimension (1-D tensor)
  kDModel,   // d_model
  kVocab,    // vocab_size
  kQDim,     // n_head * head_dim
  kKvDim,    // n_head_kv * head_dim
  kDff,      // d_ff
  kHeadDim,  // head_dim
};
// "d_model", "n_head * head_dim", ... (the symbols of error messages).
const char* DimName(Dim d);

// What a tensor is to the forward pass; model/llama_weights.cc binds each role to one field.
enum class TensorRole : uint8_t {
  kTokenEmbd,
  kOutputNorm,
  kOutput,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kAttnQNorm,
  kAttnKNorm,
  kAttnOutput,
  kPostAttnNorm,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  kPostFfnNorm,
};

struct TensorSpec {
  TensorRole role;
  const char* name;  // "attn_q.weight"; a per-layer tensor is "blk.N." + name
  bool per_layer;
  bool required;
  Dim outer;  // shape outermost first: [outer, inner], or [outer] when inner is kNone
  Dim inner;
  // 1-D tensors (norms, biases) are F32; 2-D ones are weights of any type.
  bool vector() const { return inner == Dim::kNone; }
};

struct ArchSpec {
  const char* name;  // GGUF general.architecture and metadata key prefix
  RopeStyle rope_style;
  Activation activation;
  bool qk_norm;             // RMSNorm (weights attn_q_norm / attn_k_norm) over each head's q, k
  bool post_norms;          // RMSNorm (post_attention_norm / post_ffw_norm) on each block's output
  bool embed_scale_sqrt_d;  // embeddings are multiplied by sqrt(d_model)
  // Sliding-window attention, when the file states <name>.attention.sliding_window: layer l is
  // global when l % period == period - 1, sliding otherwise (0: the architecture has none).
  // <name>.attention.sliding_window_pattern (a period or one bool per layer) overrides it.
  int sliding_window_period;
  float rope_theta_sliding;  // RoPE base of sliding layers unless <name>.rope.freq_base_swa
  bool logit_softcap;        // <name>.final_logit_softcapping may be stated
  bool qkv_bias;             // its converter writes q/k/v biases (`weir gen` writes them too)
  std::span<const TensorSpec> tensors;
};

// Every architecture weir runs.
std::span<const ArchSpec* const> AllArchs();
// The row named `name`, or nullptr.
const ArchSpec* FindArch(std::string_view name);
// "llama, qwen2, qwen3, gemma3" (for error messages and --help).
std::string ArchNameList();
// The default row of configs that do not say otherwise (llama2.c, safetensors Llama, synthetic).
const ArchSpec& LlamaArch();

// The row's spec of `role`, or nullptr when the architecture has no such tensor.
const TensorSpec* FindTensorSpec(const ArchSpec& arch, TensorRole role);
// The tensor's name in a file: "token_embd.weight" or "blk.3.attn_q.weight".
std::string TensorName(const TensorSpec& t, int layer);
// The tensor's shape for `config` (layer's own head counts and d_ff for per-layer tensors).
Shape ExpectedShape(const TensorSpec& t, const LlamaConfig& config, int layer);
// "[n_head * head_dim, d_model]": how the expected shape is derived, for messages.
std::string ShapeDerivation(const TensorSpec& t);

}  // namespace weir::format
