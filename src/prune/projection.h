// The seven projections of a dense decoder layer -- the units Mosaic assigns pruning targets to --
// and checked views of them in a ModelFile, for every dense architecture of format/arch_spec.h.
//
//   q    role kAttnQ      [n_head * head_dim, d_model]     input site kAttnIn
//   k    role kAttnK      [n_head_kv * head_dim, d_model]  input site kAttnIn
//   v    role kAttnV      [n_head_kv * head_dim, d_model]  input site kAttnIn
//   o    role kAttnOutput [d_model, n_head * head_dim]     input site kAttnOut
//   gate role kFfnGate    [d_ff, d_model]                  input site kMlpIn
//   up   role kFfnUp      [d_ff, d_model]                  input site kMlpIn
//   down role kFfnDown    [d_model, d_ff]                  input site kMlpDown
// and the optional q/k/v biases (roles kAttnQBias/KBias/VBias, F32 [rows of the projection]),
// which lose their entries together with the rows of a removed head or key-value group.
//
// Tensor names come from the architecture's row (format::TensorName of the role's TensorSpec):
// "blk.N.attn_q.weight" on every row today, also where the file stores the projection fused
// (phi3's attn_qkv, ffn_up = gate + up): the loader splits a fused tensor into views under the
// parts' names and the GGUF writer fuses the parts again, so pruning edits parts.
//
// Every other per-layer tensor of a dense row is left alone by pruning, which holds because none
// has a dimension that pruning changes: norms ([d_model]; QK-norm weights are [head_dim], shared
// by all heads), rope_freqs ([rope_dim / 2], global). BindProjections refuses a row with a
// tensor whose shape involves n_head, n_head_kv or d_ff that is not listed above (the
// mixture-of-experts rows, whose MLP is stacked experts and a router: refused by name).
//
// Thread safety: plain values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/arch_spec.h"
#include "format/model_file.h"
#include "sparsity/site.h"
#include "tensor/tensor_view.h"

namespace weir::prune {

enum class Projection : uint8_t { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumProjections = 7;
inline constexpr std::array<Projection, kNumProjections> kAllProjections = {
    Projection::kQ,    Projection::kK,  Projection::kV,   Projection::kO,
    Projection::kGate, Projection::kUp, Projection::kDown};

// "q", "k", "v", "o", "gate", "up", "down".
std::string_view ProjectionName(Projection p);
// The projection's role in the architecture tables (kAttnQ, ..., kFfnDown).
format::TensorRole ProjectionRole(Projection p);
// The bias role of q, k and v (kAttnQBias, ...); for o, gate, up, down: false.
bool ProjectionBiasRole(Projection p, format::TensorRole* role);
// The projection's tensor name in `arch`'s files, "blk.<layer>.attn_q.weight"; empty when the
// row has no such tensor.
std::string ProjectionTensorName(const format::ArchSpec& arch, int layer, Projection p);
// The site whose activations feed the projection (the columns of its weight).
sparsity::Site ProjectionSite(Projection p);
// True for q, k, v, o (the attention block); false for gate, up, down (the MLP).
inline bool IsAttention(Projection p) {
  return static_cast<int>(p) <= static_cast<int>(Projection::kO);
}

// The row of a config (a config without one is Llama's, as model/glu_of.h reads it).
inline const format::ArchSpec& ArchOf(const format::LlamaConfig& c) {
  return c.arch != nullptr ? *c.arch : format::LlamaArch();
}

// "llama, qwen2, qwen3, gemma3, gemma2, phi3": the rows pruning supports (for messages).
std::string PrunableArchList();

// One layer's projection weights and dimensions.
struct LayerProjections {
  std::array<TensorView, kNumProjections> w;  // indexed by Projection, shapes as above
  std::array<std::string, kNumProjections> names;
  // q, k, v biases (indexed by Projection::kQ..kV): F32 [rows of the projection]; invalid (no
  // data) when the model has none.
  std::array<TensorView, 3> bias;
  std::array<std::string, 3> bias_names;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int d_ff = 0;
  int64_t d_model = 0;

  const TensorView& operator[](Projection p) const { return w[static_cast<size_t>(p)]; }
  const std::string& name(Projection p) const { return names[static_cast<size_t>(p)]; }
  int64_t params(Projection p) const { return (*this)[p].shape.numel(); }
};

// Views of every layer's projections (and biases). Fails with a message naming the file and
// the architecture when the row is not a dense one pruning supports (mixture of experts, or a
// tensor pruning would leave inconsistent), and naming the tensor when a projection is missing,
// not 2-D, not row-major, of the wrong shape for the config's per-layer dims, or a bias is not
// F32 of the projection's rows, or when the dims themselves are inconsistent (n_head not a
// multiple of n_head_kv).
Result<std::vector<LayerProjections>> BindProjections(const format::ModelFile& model);

}  // namespace weir::prune
