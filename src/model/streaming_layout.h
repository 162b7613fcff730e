// LayoutMlp: the MLP of one pack layout computed from blocks a BlockStreamer (streaming_blocks.h)
// pins -- BundleMlp (streaming_bundles.h), ColumnMlp (streaming_columns.h) or, for a mixture of
// experts, ExpertReader (streaming_experts.h). StreamingWeights (streaming_weights.h) chooses
// one when it is created, from the pack's layout, and sends every layer's MLP to it.
//
// Thread safety: one thread (the session's) calls a LayoutMlp.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/moe.h"
#include "sparsity/policy.h"

namespace weir::model {

class LayoutMlp {
 public:
  virtual ~LayoutMlp() = default;
  // out[t] = the MLP of `layer` applied to x[t], t < n (x, out: [n, d_model]); the contract of
  // StreamingWeights::Forward, which has checked the layer and zeroed *weight_bytes.
  virtual Status Forward(int layer, const float* x, int n, float* out, ThreadPool* pool,
                         sparsity::SparsityPolicy* policy, uint64_t* weight_bytes) = 0;
  // Unpins what the layout holds from one call to the next (span mode's records), at a sequence's
  // end and before the cache budget changes.
  virtual void ReleaseHeld() {}
  // Forgets the reads it queued by prediction (before the cache budget changes, which cancels
  // every queued read).
  virtual void ForgetPredictions() {}
  // The experts of a mixture of experts (experts layout), else nullptr.
  virtual ExpertSource* experts() { return nullptr; }
  // Bytes of scratch it allocated (at most the plan's scratch_bytes).
  virtual uint64_t scratch_bytes() const = 0;
};

}  // namespace weir::model
