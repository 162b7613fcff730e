// BundleMlp: the MLP of a bundle-layout pack (weir pack --layout bundles; format/
// weir_pack_format.h) computed from its neuron bundles, which the BlockStreamer
// (streaming_blocks.h) pins lane by lane.
//
// Compute, for layer L = first + j of group g and a token x:
//   lanes: the channels are cut into lanes of lane_channels; lane k's blocks are acquired
//          (pinned) through the Prefetcher, as many lanes at a time as the budget allows;
//   lane:  on one thread, start to end: g, u = gate/up rows · x for the lane's channels
//          (GatherMatVecRows over the group view), h[c] = silu(g[c]) * u[c], and
//          partial_k = sum over the lane's chunks of W_down[:, chunk] · h[chunk]
//          (ChunkedMatVec over the chunks' down pieces: MatVec's numerics, blocks as stored).
//          A lane's bundles are read from memory once: its down pieces are still in L2 after
//          its gate/up rows;
//   out  = ((partial_0 + partial_1) + partial_2) + ...   in lane order.
// The lane is the unit of the floating-point sums, so the result does not depend on how lanes
// were batched, on the thread count, on what was cached or prefetched, or on the device: a
// streamed run gives bit for bit the logits of a run with everything resident.
//
// Thread safety: one thread (the session's) calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/ops.h"
#include "model/streaming_blocks.h"
#include "model/streaming_layout.h"
#include "model/streaming_plan.h"

namespace weir::model {

class BundleMlp final : public LayoutMlp {
 public:
  // `plan` and `streamer` must outlive it; `glu` is the architecture's gated unit.
  static Result<std::unique_ptr<BundleMlp>> Create(const StreamPlan& plan, BlockStreamer* streamer,
                                                   kernels::Glu glu);
  Status Forward(int layer, const float* x, int n, float* out, ThreadPool* pool,
                 sparsity::SparsityPolicy* policy, uint64_t* weight_bytes) override;
  uint64_t scratch_bytes() const override;

 private:
  using Group = StreamPlan::Group;
  using Extent = StreamPlan::Extent;
  using Batch = BlockStreamer::Batch;
  BundleMlp(const StreamPlan& plan, BlockStreamer* streamer, kernels::Glu glu)
      : plan_(plan), streamer_(streamer), glu_(glu) {}
  // Computes lanes [k0, k1) of layer first + j for every token, adding to out in lane order.
  void ComputeTiledLanes(const Group& g, int j, int k0, int k1, const float* x, ThreadPool* pool);
  void ComputeLanes(const Group& g, int j, int k0, int k1, const float* x, int n, float* out,
                    ThreadPool* pool);

  const StreamPlan& plan_;
  BlockStreamer* streamer_;
  kernels::Glu glu_;

  // Scratch, allocated once (sizes for the largest group).
  AlignedBuffer rows_y_;           // [rows] gate/up outputs at their bundle rows
  AlignedBuffer gate_;             // [d_ff] per channel, then h
  AlignedBuffer up_;               // [d_ff]
  AlignedBuffer partials_;         // [n_lanes, d_model]
  AlignedBuffer x_tiled_;          // x prepared for tiled bundles (kernels/tiled.h)
  AlignedBuffer h_tiled_;          // [d_ff / 32] h records, prepared per lane
  std::vector<int32_t> idx_rows_;  // [2 d_ff] gate/up rows per channel
};

}  // namespace weir::model
