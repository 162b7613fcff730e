// StreamingWeights: the weights of a weir pack (format/weir_pack_format.h) that are streamed from
// storage into a byte-budgeted DRAM cache: the MLP of every layer, computed here from its neuron
// bundles, and (stream_attention) each layer's attention projections, pinned while the session
// computes attention from them.
//
// Memory and cache: the extents, blocks, slabs and cache partitions are planned by StreamPlan
// (streaming_plan.h).
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
// Blocks: the block streamer (streaming_blocks.h) reads, caches and pins them.
//
// Column layout (weir pack --layout columns; streaming_columns.cc). A group then has two
// extents, its MLP input columns (gate^T and up^T rows per input channel) and its down columns
// (down^T rows per neuron), and a token runs DIP's dataflow (paper 000 §3) over them:
//   in   = SelectInput(x) (cache-aware for DIP-CA: the blocks resident now give the mask);
//   g, u = sum over i in `in` of x[i] * (gate^T, up^T)[i]    (the blocks of `in`, pinned);
//   h    = silu(g) * u;  down = SelectDown(h);  out = sum over c in `down` of h[c] * down^T[c].
// The blocks a layer needs are handed to the I/O thread at once (merged into large reads) and
// claimed in order. Sparse mode also reads ahead by prediction (ActiveFlow's cross-layer
// preloading): the channels layer L keeps are read for layer L + 1 while L computes, and what
// L + 1 then does not use is released. With no policy every column is kept (dense), and the
// read-ahead cursor reads whole extents as for bundles. Each product is one gathered kernel
// call over the layer's kept columns in ascending order, whatever was cached, so streamed
// results equal the resident ones bit for bit (and equal the GGUF session's sparse path, which
// makes the same calls on the same transposed bytes).
//
// Experts layout (a mixture of experts, weir pack --layout experts; streaming_experts.cc). Each
// layer's experts are one extent whose cached unit (block) is one expert: gate, up and down,
// page-aligned, one read. experts() is the ExpertSource the session's MoE MLP takes them from:
// Prepare queues the chosen experts that are not cached (the I/O thread reads them while the
// first is computed), Acquire pins one, Release unpins it; Predict queues the experts the next
// layer's router predicts from this layer's input (cross-layer preloading), and the next
// Prepare cancels the mispredicted ones still queued.
//
// Thread safety: one StreamingWeights serves one Session (one thread calls Forward/BeginToken);
// stats()/SetCacheBudget may be called from another thread. The device must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "format/weir_pack_reader.h"
#include "kernels/ops.h"
#include "model/moe.h"
#include "model/streaming_blocks.h"
#include "model/streaming_plan.h"
#include "sparsity/index_list.h"
#include "sparsity/policy.h"
#include "storage/block_device.h"
#include "storage/eviction_policy.h"
#include "storage/prefetcher.h"
#include "storage/slab_placement.h"
#include "storage/weight_cache.h"

namespace weir::model {

class StreamingWeights {
 public:
  // `pack` gives the geometry (only read here); `device` reads the pack's bytes.
  static Result<std::unique_ptr<StreamingWeights>> Create(const format::PackFile& pack,
                                                          storage::BlockDevice* device,
                                                          const StreamingOptions& options);
  ~StreamingWeights();
  StreamingWeights(const StreamingWeights&) = delete;
  StreamingWeights& operator=(const StreamingWeights&) = delete;

  // out[t] = W_down · (silu(W_gate · x[t]) ⊙ (W_up · x[t])) of `layer`, t < n.
  // x, out: [n, d_model]. An I/O error comes back as the Status (out is then unspecified).
  // `policy` (column layout only; nullptr = dense) selects the columns per token; it must not
  // predict units (UnitPredictor::kNone). `weight_bytes`, when set, receives the MLP weight
  // bytes the products used (summed over the n tokens).
  Status Forward(int layer, const float* x, int n, float* out, ThreadPool* pool,
                 sparsity::SparsityPolicy* policy = nullptr, uint64_t* weight_bytes = nullptr);
  // True when the pack has the column layout (sparsity can be applied).
  bool columns() const { return plan_.columns(); }
  // The experts of an experts-layout pack (a mixture of experts), or nullptr.
  ExpertSource* experts();

  // Sparse mode: the MLP is read by prediction, not by the read-ahead cursor.
  void set_sparse(bool sparse) { streamer_->set_sparse_mlp(sparse); }

  // Attention (stream_attention): pins every block of `layer`'s attention tensors, reading what
  // is missing, until ReleaseAttention(); meanwhile their bytes are at TensorAddress(name).
  Status AcquireAttention(int layer) { return streamer_->AcquireAttention(layer); }
  void ReleaseAttention() { streamer_->ReleaseAttention(); }
  // Where a streamed static tensor ("blk.3.attn_q.weight") lives while pinned; nullptr for a
  // tensor this object does not stream.
  const std::byte* TensorAddress(const std::string& name) const;

  // Token and sequence boundaries (forwarded to the eviction policy).
  void BeginToken();
  void ResetSequence();

  // Changes the cache budget at run time (the cache shrinks or grows; leaving resident mode
  // releases the pinned groups first). OutOfMemory when pinned blocks exceed the new budget.
  Status SetCacheBudget(uint64_t bytes);

  // Bytes outside the cache this object allocates: scratch plus the transient reserve.
  uint64_t fixed_bytes() const;
  // Bytes of the pack this object streams (bundles and, with stream_attention, attention).
  uint64_t streamed_bytes() const;
  // What the cache is charged to hold every block (resident mode needs at least this).
  uint64_t all_blocks_charge() const { return plan_.all_blocks_charge; }
  bool resident_mode() const { return streamer_->resident_mode(); }
  StreamStats stats() const { return streamer_->stats(); }
  storage::CacheStats cache_stats() const { return streamer_->cache_stats(); }
  std::vector<storage::UnitId> TakeTrace() { return streamer_->TakeTrace(); }
  const StreamingOptions& options() const { return options_; }
  // Where layer `layer`'s blocks are, for traces (StreamPlan::LayerBlocks).
  using LayerBlocks = StreamPlan::LayerBlocks;
  LayerBlocks layer_blocks(int layer) const { return plan_.layer_blocks(layer); }

 private:
  using Extent = StreamPlan::Extent;
  using Group = StreamPlan::Group;
  using Batch = BlockStreamer::Batch;

  class ExpertReader;
  friend class ExpertReader;

  StreamingWeights() = default;
  // Column layout (streaming_columns.cc).
  Status ForwardColumns(const Group& g, int j, const float* x, float* out, ThreadPool* pool,
                        sparsity::SparsityPolicy* policy, uint64_t* weight_bytes);
  // *blocks = 0 .. e.n_blocks - 1 (within the capacity reserved at creation).
  void AllBlocks(const Extent& e, std::vector<uint64_t>* blocks) const;
  // y = sum over k < n of coef[k] * row rows[k] of the group's input (or down) columns: the
  // gathered kernel, or for the sparse layout the records (each checked against its bitmap:
  // Corrupt otherwise) split over the pool. Adds the weight bytes read to *bytes.
  Status ColumnProduct(const Group& g, bool input, const int32_t* rows, const float* coef,
                       int64_t n, float* y, ThreadPool* pool, uint64_t* bytes);
  // DIP-CA's cache state of `channels` columns of e (column k resident when all its blocks
  // are); nullptr when everything is resident.
  const sparsity::CacheStateView* ColumnCacheState(
      const Extent& e, int64_t channels,
      const std::function<std::pair<uint64_t, uint64_t>(int64_t)>& range);
  // Queues the blocks of layer + 1's input columns `in` (cross-layer preloading).
  void PredictNextLayer(int layer, const sparsity::IndexList& in);
  // Span mode (streaming_columns.cc): a policy that selects the input channels once per group
  // (dip span=N with N = the pack's --group), one token at a time. The group's first layer pins
  // the kept channels' records for all its layers (and, when W_down is kept whole, the group's
  // down columns) until its last layer, and queues the next group's records for the same
  // channels (cross-layer preloading, ActiveFlow §3.2).
  bool SpanMode(const Group& g, const sparsity::SparsityPolicy* policy) const;
  Status AcquireSpan(const Group& g, int layer, const float* x, sparsity::SparsityPolicy* policy);
  void PredictNextGroup(const Group& g, const sparsity::IndexList& in, bool whole_down);
  void ReleaseSpan();
  // Byte range of input channel i's record: its gate^T and up^T rows for every layer of g.
  std::pair<uint64_t, uint64_t> InputRecord(const Group& g, int64_t i) const;
  // Releases the predicted blocks that were not used.
  void DropPredictions();
  // Computes lanes [k0, k1) of layer first + j for every token, adding to out in lane order.
  void ComputeTiledLanes(const Group& g, int j, int k0, int k1, const float* x, ThreadPool* pool);
  void ComputeLanes(const Group& g, int j, int k0, int k1, const float* x, int n, float* out,
                    ThreadPool* pool);
  void MakeExpertReader();  // streaming_experts.cc

  StreamingOptions options_;
  StreamPlan plan_;
  std::unique_ptr<BlockStreamer> streamer_;
  kernels::Glu glu_ = kernels::Glu::kSilu;  // the architecture's gated unit

  // Scratch, allocated once (sizes for the largest group).
  AlignedBuffer rows_y_;           // [rows] gate/up outputs at their bundle rows
  AlignedBuffer rows_x_;           // [rows] h at the down^T rows (the column form's input)
  AlignedBuffer gate_;             // [d_ff] per channel, then h
  AlignedBuffer up_;               // [d_ff]
  AlignedBuffer partials_;         // [n_lanes, d_model]
  AlignedBuffer x_tiled_;          // x prepared for tiled bundles (kernels/tiled.h)
  AlignedBuffer h_tiled_;          // [d_ff / 32] h records, prepared per lane
  std::vector<int32_t> idx_rows_;  // [2 d_ff] gate/up rows per channel
  std::vector<int32_t> idx_down_;  // [d_ff] down^T row per channel
  // Column layout scratch.
  std::vector<int32_t> idx_up_;            // [d_model] up^T rows
  std::vector<float> coef_;                // [max(d_model, d_ff)] kept columns' coefficients
  std::vector<float> sparse_partials_;     // [pool threads - 1, max width], sized at first use
  std::vector<uint64_t> blocks_;           // blocks a product needs
  std::vector<uint64_t> next_blocks_;      // blocks PredictNextLayer queues
  sparsity::IndexList sel_in_, sel_down_;  // kept columns
  sparsity::IndexList all_units_;          // every neuron (SelectDown's `units`)
  std::vector<uint64_t> block_words_, cache_words_;
  sparsity::CacheStateView cache_view_;
  std::vector<storage::UnitId> predicted_;  // blocks queued by PredictNextLayer
  Batch span_in_, span_down_;  // span mode: the group's pinned input records and down columns
  int span_group_ = -1;        // the group they belong to (-1: none held)
  bool single_token_ = false;  // the Forward call at hand has one token (span mode needs it)

  std::unique_ptr<ExpertSource> expert_reader_;  // experts layout only (an ExpertReader)
};

}  // namespace weir::model
