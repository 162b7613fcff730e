// ModelShape: the dimensions of a Llama-family model without its weights, which is all the
// simulator and planner need. Shapes come from named presets with published dimensions
// (ModelPreset) or from a real model file (the tool layer fills the struct from the loaded
// config, so this module does not depend on the readers).
//
// Tensor kinds use GGUF names. Parameter counts per kind and layer:
//   token_embd   [vocab, d_model]                    (one row is read per token)
//   output       [vocab, d_model]                    (absent when tied_output)
//   norm         attn_norm + ffn_norm per layer [d_model] each; output_norm [d_model] global
//   attn_q       [n_head * head_dim, d_model]        attn_output [d_model, n_head * head_dim]
//   attn_k/v     [n_head_kv * head_dim, d_model]
//   ffn_gate/up  [n_experts * d_ff, d_model]         ffn_down [d_model, n_experts * d_ff]
//   ffn_gate_inp [n_experts, d_model]                (the MoE router; only when n_experts > 1)
//
// MoE (Mixtral): the experts' gate/up/down of a layer are treated as one tensor per kind whose
// n_experts * d_ff units are laid out expert-major (unit e * d_ff + j is neuron j of expert e).
// Per token a router picks n_experts_active experts; only their units can be active. The router
// itself is a small static tensor.
//
// Thread safety: plain values.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace weir::sim {

enum class TensorKind : int {
  kTokenEmbd = 0,
  kOutput,
  kNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  kFfnRouter,
  kCount
};
constexpr int kNumTensorKinds = static_cast<int>(TensorKind::kCount);

// "token_embd", "output", "norm", "attn_q", ..., "ffn_gate_inp".
const char* TensorKindName(TensorKind kind);
std::optional<TensorKind> TensorKindFromName(const std::string& name);
bool IsLayerTensor(TensorKind kind);  // per layer (attn_*, ffn_*, norm) vs global

// Per-layer dimensions; structured pruning can make them differ between layers.
struct LayerShape {
  int n_head = 0;
  int n_head_kv = 0;
  int d_ff = 0;
};

struct ModelShape {
  std::string name;
  int d_model = 0;
  int n_layers = 0;
  int head_dim = 0;
  int vocab_size = 0;
  bool tied_output = false;
  int n_experts = 1;               // experts per MoE layer (1 = dense MLP)
  int n_experts_active = 1;        // experts the router picks per token
  std::vector<LayerShape> layers;  // [n_layers]

  // Parameters of `kind` in layer `layer` (ignored for global kinds, which count once).
  uint64_t TensorParams(TensorKind kind, int layer) const;
  // Parameters of `kind` over the whole model.
  uint64_t KindParams(TensorKind kind) const;
  uint64_t TotalParams() const;
  // KV cache elements per token of context, all layers (K and V).
  uint64_t KvElementsPerToken() const;
};

// Same dims in every layer.
ModelShape UniformShape(std::string name, int d_model, int n_layers, int n_head, int n_head_kv,
                        int head_dim, int d_ff, int vocab_size, bool tied_output = false);

// Checks positivity, head/kv grouping and layer count; names the field and value.
Status ValidateShape(const ModelShape& shape);

// Named architectures with their published dimensions (see model_shape.cc for sources):
// phi-3-mini, phi-3-medium, llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, mistral-7b,
// mixtral-8x7b, llama-1b (TinyLlama-1.1B), qwen3-30b-a3b.
Result<ModelShape> ModelPreset(const std::string& name);
std::vector<std::string> ModelPresetNames();

// Bits per weight for each tensor kind. Uniform(b) gives every matrix b bits and keeps norms at
// 32 (norms stay F32 in every quantized format weir reads).
struct WeightBits {
  std::array<double, kNumTensorKinds> bits{};
  static WeightBits Uniform(double bits_per_weight);
  double Of(TensorKind kind) const { return bits[static_cast<int>(kind)]; }
  void Set(TensorKind kind, double b) { bits[static_cast<int>(kind)] = b; }
};

// Parses "4" or "4,attn=8,embd=16,output=6,ffn_down=8": a default for every matrix, then
// overrides by kind name or by group ("attn" = q,k,v,output; "ffn" = gate,up,down; "embd" =
// token_embd). Bits must be in (0, 64].
Result<WeightBits> ParseWeightBits(const std::string& spec);
std::string FormatWeightBits(const WeightBits& bits);

// Bytes of `params` weights at `bits` per weight (fractional bytes are kept: a 4.5-bit format
// averages its scales over the weights).
inline double WeightBytes(uint64_t params, double bits) {
  return static_cast<double>(params) * bits / 8.0;
}

}  // namespace weir::sim
