// ColumnMlp: the MLP of a column-layout pack (weir pack --layout columns, dense or sparse
// records; format/weir_pack_format.h) computed as DIP computes it (paper 000 §3, Algorithm 1),
// over columns the BlockStreamer (streaming_blocks.h) reads and pins.
//
// A column-layout group has two extents, its MLP input columns (gate^T and up^T rows per input
// channel) and its down columns (down^T rows per neuron), and a token runs DIP's dataflow (paper
// 000 §3) over them:
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
// Span mode: a policy that selects the input channels once per group (dip span=N with N = the
// pack's --group), one token at a time. The group's first layer reads the kept channels'
// records for all its layers into one compact buffer (StreamingOptions::compact_span: large
// reads, no cache entries; otherwise, or when they do not fit it, it pins their blocks through
// the cache), pins the group's down columns when W_down is kept whole, and keeps them until
// its last layer; it queues the next group's W_down (and, through the cache, the next group's
// records for the same channels: cross-layer preloading, ActiveFlow §3.2). A compact read also
// starts reading the next group's records, guessed from this layer's input, into a second
// buffer on a thread of its own (StreamingOptions::span_read_ahead, storage/record_buffers.h);
// the next group reads only what the guess missed.
//
// Thread safety: one thread (the session's) calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/ops.h"
#include "model/streaming_blocks.h"
#include "model/streaming_layout.h"
#include "model/streaming_plan.h"
#include "sparsity/index_list.h"
#include "sparsity/policy.h"

namespace weir::model {

class ColumnMlp final : public LayoutMlp {
 public:
  // The record offset tables of a sparse column pack's groups (StreamPlan::Build takes them),
  // read from `device`; empty tables for the other groups.
  static Result<std::vector<StreamPlan::RecordTables>> ReadRecordTables(
      const format::PackFile& pack, storage::BlockDevice* device);
  // `plan` and `streamer` must outlive it; `glu` is the architecture's gated unit.
  static Result<std::unique_ptr<ColumnMlp>> Create(const StreamPlan& plan, BlockStreamer* streamer,
                                                   kernels::Glu glu);
  // One token at a time; `policy` (nullptr = dense) selects the columns.
  Status Forward(int layer, const float* x, int n, float* out, ThreadPool* pool,
                 sparsity::SparsityPolicy* policy, uint64_t* weight_bytes) override;
  void ReleaseHeld() override { ReleaseSpan(); }
  void ForgetPredictions() override { predicted_.clear(); }
  uint64_t scratch_bytes() const override;

 private:
  using Group = StreamPlan::Group;
  using Extent = StreamPlan::Extent;
  using Batch = BlockStreamer::Batch;
  ColumnMlp(const StreamPlan& plan, BlockStreamer* streamer, kernels::Glu glu)
      : plan_(plan), streamer_(streamer), glu_(glu) {}
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
  // Span mode (above).
  bool SpanMode(const Group& g, const sparsity::SparsityPolicy* policy) const;
  Status AcquireSpan(const Group& g, int layer, const float* x, sparsity::SparsityPolicy* policy);
  // Queues the next group's records for the channels `in` through the cache (span mode without
  // a compact read).
  void PredictNextGroup(const Group& g, const sparsity::IndexList& in);
  // Span mode with compact_span: reads the kept records (sel_in_) of g compactly
  // (BlockStreamer::ReadRecords) and numbers them; false (nothing read) when they do not fit or
  // the mode is off.
  Result<bool> ReadSpanCompact(const Group& g);
  // Span mode with compact_span and StreamingOptions::span_read_ahead: guesses the next group's
  // kept channels from layer's input x (the policy's PredictSpan) and starts reading their
  // records (BlockStreamer::ReadRecordsAhead) while this group computes.
  void ReadNextRecordsAhead(const Group& g, int layer, const float* x,
                            sparsity::SparsityPolicy* policy);
  // ColumnProduct's input product over that compact copy.
  void CompactInputProduct(const Group& g, const int32_t* rows, const float* coef, int64_t n,
                           float* y, ThreadPool* pool, uint64_t* bytes);
  void ReleaseSpan();
  // Byte range of input channel i's record: its gate^T and up^T rows for every layer of g.
  std::pair<uint64_t, uint64_t> InputRecord(const Group& g, int64_t i) const;
  // Releases the predicted blocks that were not used.
  void DropPredictions();

  const StreamPlan& plan_;
  BlockStreamer* streamer_;
  kernels::Glu glu_;

  // Scratch, allocated once (sizes for the largest group).
  AlignedBuffer rows_x_;                   // [rows] coefficients at their rows (gathered kernel)
  AlignedBuffer gate_;                     // [d_ff] g, then h
  AlignedBuffer up_;                       // [d_ff]
  std::vector<int32_t> idx_rows_;          // [d_model] gate^T rows of the kept channels
  std::vector<int32_t> idx_up_;            // [d_model] up^T rows
  std::vector<int32_t> idx_down_;          // [d_ff] down^T rows of the kept neurons
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
  bool span_compact_ = false;  // the held group's records are in the streamer's compact copy
  std::vector<int64_t> span_slots_;  // their slots, ascending
  std::vector<int32_t> span_pos_;    // slot -> its record's place in the compact copy
  std::vector<int32_t> span_places_;  // span_slots_[k]'s place
  int64_t span_places_used_ = 0;      // 1 + the highest place
  // Read-ahead (ReadNextRecordsAhead): each group's slots at its last compact read, and the
  // channels and slots a layer's input guesses for the next group.
  std::vector<std::vector<int64_t>> prev_slots_;
  sparsity::IndexList guess_in_;
  std::vector<int64_t> guess_slots_;
  bool single_token_ = false;  // the Forward call at hand has one token (span mode needs it)
};

}  // namespace weir::model
