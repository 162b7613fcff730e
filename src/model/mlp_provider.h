// MlpProvider: how one layer's MLP is computed, chosen once when a session is created
// (Session::Allocate), so the forward pass calls the same seam whatever holds the weights:
//
//   dense     batched products over resident weights (tiled when the model was loaded so):
//             y = W_down · glu(W_gate · x, W_up · x)                             dense_mlp.cc
//   sparse    the same per token with the columns a sparsity policy keeps (DIP §3), over the
//             resident weights and their transposed copies                        sparse_mlp.cc
//   streamed  a weir pack's MLP read from storage by StreamingWeights: neuron bundles (dense)
//             or columns (dense, or with the policy's selection)                  streamed_mlp.cc
//   m2cache   dynamic sparse mixed precision (paper 004 §5.2-5.3): predicted neurons at a
//             high or a low precision, from per-layer ATU cache units             m2cache_mlp.cc
//   moe       a mixture of experts: the router's top-k experts per token, their weighted sum
//             (model/moe.h), experts from an ExpertSource                         moe_mlp.cc
//
// Session::Mlp normalizes x, calls the layer's provider, applies the post-norm and adds the
// residual; a provider computes only the MLP product. A new way to hold or compute an MLP (a
// mixture of experts, another cache) is one more provider, not another branch in the pass.
//
// Thread safety: a provider belongs to one Session and is called from its thread.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "m2cache/mixed_mlp.h"
#include "model/activation_observer.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/streaming_weights.h"
#include "model/transposed_weights.h"
#include "sparsity/index_list.h"
#include "sparsity/policy.h"

namespace weir::model {

struct WeightTraffic;

// What a provider borrows from its session: buffers, pool and counters (none owned).
struct MlpContext {
  const Model* model = nullptr;
  ThreadPool* pool = nullptr;
  kernels::Glu glu = kernels::Glu::kSilu;  // the architecture's activation
  float* gate = nullptr;                   // [n_batch, max(d_ff, d_model)] scratch
  float* up = nullptr;                     // [n_batch, max d_ff] scratch
  ActivationObserver* const* observer = nullptr;  // the session's observer (may be null)
  WeightTraffic* traffic = nullptr;               // mlp_used / mlp_dense are added to
};

class MlpProvider {
 public:
  virtual ~MlpProvider() = default;
  // x[t] = MLP_layer(x[t]) in place for t < n; x: [n, d_model], the normalized block input.
  // Fails only when streamed weights cannot be read.
  virtual Status Forward(int layer, float* x, int n) = 0;
};

std::unique_ptr<MlpProvider> MakeDenseMlp(const MlpContext& ctx);
// `policy` selects the columns; `transposed` holds the transposed copies of its sites; the
// index lists are the session's scratch (capacity: the widest site).
std::unique_ptr<MlpProvider> MakeSparseMlp(const MlpContext& ctx,
                                           sparsity::SparsityPolicy* policy,
                                           const TransposedWeights* transposed,
                                           sparsity::IndexList* sel_in,
                                           sparsity::IndexList* sel_units,
                                           sparsity::IndexList* sel_down);
// `policy` is null for a dense streamed run.
std::unique_ptr<MlpProvider> MakeStreamedMlp(const MlpContext& ctx, StreamingWeights* streamed,
                                             sparsity::SparsityPolicy* policy);

// `mixed` (owned by the session) computes every layer's MLP from its neuron store.
std::unique_ptr<MlpProvider> MakeM2CacheMlp(const MlpContext& ctx, m2cache::MixedMlp* mixed);

// `moe` holds the routing state (owned by the session), `experts` where the experts are read.
std::unique_ptr<MlpProvider> MakeMoeMlp(const MlpContext& ctx, MoeMlp* moe,
                                        ExpertSource* experts);

}  // namespace weir::model
