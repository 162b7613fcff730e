// StreamingWeights: the weights of a weir pack (format/weir_pack_format.h) that are streamed from
// storage into a byte-budgeted DRAM cache: the MLP of every layer, and (stream_attention) each
// layer's attention projections, pinned while the session computes attention from them.
//
// A facade over three parts, made once by Create from the pack and the options:
//   StreamPlan    (streaming_plan.h)   what is streamed: the extents, blocks, slabs, cache
//                                      partitions and their shares, the fixed bytes;
//   BlockStreamer (streaming_blocks.h) the blocks in memory: slabs, cache, I/O thread, the
//                                      read-ahead cursor, pinning and releasing, resident mode;
//   LayoutMlp     (streaming_layout.h) the MLP of the pack's layout from the blocks it pins:
//                 BundleMlp (streaming_bundles.h, neuron bundles lane by lane), ColumnMlp
//                 (streaming_columns.h, DIP's dataflow over columns, DIP-CA, span mode) or the
//                 ExpertReader of a mixture of experts (streaming_experts.h).
// Whatever was cached, prefetched or read on demand, a streamed run gives bit for bit the
// logits of a run with everything resident (each layout's header says why).
//
// Thread safety: one StreamingWeights serves one Session (one thread calls Forward/BeginToken);
// stats()/SetCacheBudget may be called from another thread. The device must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "format/weir_pack_reader.h"
#include "kernels/ops.h"
#include "model/moe.h"
#include "model/streaming_blocks.h"
#include "model/streaming_layout.h"
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
  ExpertSource* experts() { return mlp_->experts(); }

  // Sparse mode: the MLP is read by prediction, not by the read-ahead cursor.
  // With experts stored as channel records the cache's shares change with it
  // (BlockStreamer::set_sparse_mlp); OutOfMemory when what is pinned does not fit them.
  Status set_sparse(bool sparse);
  // The staging partition's share of a cache budget, under the current mode.
  uint64_t staging_bytes(uint64_t cache_bytes) const {
    return streamer_->PartitionWeights(cache_bytes).back();
  }
  // Experts stored as channel records read under a sparsity policy (W_down copies are cached).
  bool sparse_experts() const { return plan_.expert_records() && streamer_->sparse_mlp(); }
  // Experts stored as channel records: the bytes one W_down copy is charged in the cache (0 for
  // other packs).
  uint64_t down_copy_charge() const;
  // How many W_down copies the cache's group partitions hold beside every layer's attention
  // under a cache budget of `cache_bytes` (the current mode's shares), at most the experts' count;
  // 0 unless sparse_experts().
  uint64_t down_copies_fit(uint64_t cache_bytes) const;
  // The experts' count over all layers (the W_down copies there can be).
  uint64_t down_copies_total() const;
  // The most input channels a span selection keeps per group (dip span=N: its KeepCount of
  // d_model; 0 = no span selection), set by the session before the memory plan is fitted.
  void set_span_keep(int64_t kept) { span_keep_ = kept; }
  // The transient reserve that may be lent to the cache (StreamPlan::span_lendable_bytes), or 0:
  // only when no read can be transient once the cache holds span_pin_floor() -- the span
  // records read compactly and always fitting their buffer, no read-ahead buffer (whose misses
  // may not fit), one shared cache pool.
  uint64_t lendable_reserve() const;
  uint64_t span_pin_floor() const { return plan_.span_pin_floor_bytes; }

  // Attention (stream_attention): pins every block of `layer`'s attention tensors, reading what
  // is missing, until ReleaseAttention(); meanwhile their bytes are at TensorAddress(name).
  Status AcquireAttention(int layer) { return streamer_->AcquireAttention(layer); }
  void ReleaseAttention() { streamer_->ReleaseAttention(); }
  // Where a streamed static tensor ("blk.3.attn_q.weight") lives while pinned; nullptr for a
  // tensor this object does not stream.
  const std::byte* TensorAddress(const std::string& name) const;

  // The token embedding table is read a row per token (StreamingOptions::stream_embedding)
  // rather than held: then EmbeddingRows(tokens) reads up to StreamPlan::kEmbeddingBatchRows
  // rows at once (BlockStreamer::EmbeddingRows), valid until the next call.
  bool embedding_streamed() const { return plan_.embedding_row_bytes > 0; }
  Result<const std::byte*> EmbeddingRows(std::span<const int32_t> tokens) {
    return streamer_->EmbeddingRows(tokens);
  }

  // Token and sequence boundaries (forwarded to the eviction policy).
  void BeginToken();
  void ResetSequence();

  // Changes the cache budget at run time (the cache shrinks or grows; leaving resident mode
  // releases the pinned groups first). OutOfMemory when pinned blocks exceed the new budget.
  Status SetCacheBudget(uint64_t bytes);

  // Bytes outside the cache this object allocates, at most (StreamPlan::fixed_bytes): scratch
  // plus the transient reserve.
  uint64_t fixed_bytes() const;
  // Span mode's read-ahead buffer (StreamPlan::record_ahead_bytes; 0 when none may be used), and
  // whether to make it (BlockStreamer::set_record_ahead) and whether it is made.
  uint64_t record_ahead_bytes() const { return plan_.record_ahead_bytes; }
  void set_record_ahead(bool on) { streamer_->set_record_ahead(on); }
  bool record_ahead_made() const { return streamer_->record_ahead_made(); }
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
  StreamingWeights() = default;

  StreamingOptions options_;
  StreamPlan plan_;
  int64_t span_keep_ = 0;
  std::unique_ptr<BlockStreamer> streamer_;  // reads plan_
  std::unique_ptr<LayoutMlp> mlp_;           // pins through streamer_
};

}  // namespace weir::model
