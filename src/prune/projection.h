// The seven projections of a Llama decoder layer -- the units Mosaic assigns pruning targets to --
// and checked views of them in a ModelFile.
//
//   q    blk.N.attn_q.weight      [n_head * head_dim, d_model]     input site kAttnIn
//   k    blk.N.attn_k.weight      [n_head_kv * head_dim, d_model]  input site kAttnIn
//   v    blk.N.attn_v.weight      [n_head_kv * head_dim, d_model]  input site kAttnIn
//   o    blk.N.attn_output.weight [d_model, n_head * head_dim]     input site kAttnOut
//   gate blk.N.ffn_gate.weight    [d_ff, d_model]                  input site kMlpIn
//   up   blk.N.ffn_up.weight      [d_ff, d_model]                  input site kMlpIn
//   down blk.N.ffn_down.weight    [d_model, d_ff]                  input site kMlpDown
//
// Thread safety: plain values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
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
// "blk.<layer>.attn_q.weight", ...
std::string ProjectionTensorName(int layer, Projection p);
// The site whose activations feed the projection (the columns of its weight).
sparsity::Site ProjectionSite(Projection p);
// True for q, k, v, o (the attention block); false for gate, up, down (the MLP).
inline bool IsAttention(Projection p) {
  return static_cast<int>(p) <= static_cast<int>(Projection::kO);
}

// One layer's projection weights and dimensions.
struct LayerProjections {
  std::array<TensorView, kNumProjections> w;  // indexed by Projection, shapes as above
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int d_ff = 0;
  int64_t d_model = 0;

  const TensorView& operator[](Projection p) const { return w[static_cast<size_t>(p)]; }
  int64_t params(Projection p) const { return (*this)[p].shape.numel(); }
};

// Views of every layer's projections. Fails with a message naming the file and tensor when a
// projection is missing, not 2-D, of the wrong shape for the config's per-layer dims, or when the
// dims themselves are inconsistent (n_head not a multiple of n_head_kv).
Result<std::vector<LayerProjections>> BindProjections(const format::ModelFile& model);

}  // namespace weir::prune
