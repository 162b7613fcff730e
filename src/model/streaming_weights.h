// StreamingWeights: the weights of a weir pack (format/weir_pack_format.h) that are streamed from
// storage into a byte-budgeted DRAM cache: the MLP of every layer, computed here from its neuron
// bundles, and (stream_attention) each layer's attention projections, pinned while the session
// computes attention from them.
//
// Memory. Each streamed extent -- a layer group's bundle tensor, a layer's attention tensors --
// has a slab: a reserved address range as large as the extent (storage/slab_placement.h). The
// cached unit is a *block*: block_bytes (a multiple of 4 KiB) of the extent, cached at its own
// offset in the slab, so resident blocks are, in place, views of the tensors the kernels read
// without a copy. A block that leaves the cache gives its pages back to the OS. Extents and
// blocks are page-aligned in the file, so O_DIRECT reads them straight into the slab.
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
// Cache. One partition per layer group (uniform or proportional shares, or one shared pool)
// under the eviction policy, plus a staging partition that every read lands in, so that reading
// ahead never evicts what the policy keeps. A block the compute used is moved from staging into
// its group's partition when the policy makes room for it and admits it (MRU admits only into
// free room: in a dense scan that keeps a fixed part of every layer and streams the rest).
//
// I/O. A read-ahead cursor walks the blocks of this layer and the next prefetch_layers layers
// (attention, then bundles; on into the next token's first layers: M2Cache's layer-wise
// preloading) and hands the I/O thread what is not cached while staging has room; it is topped
// up as the compute frees room. The I/O thread merges contiguous blocks into large reads. A
// block the compute needs is taken from the cache, waited for, or read on demand. When no
// partition can take a block (its room is pinned, or the policy refuses as ATU does), it is read
// into its slab place outside the cache and dropped after use (a transient read: at most one
// lane's blocks or one layer's attention at a time).
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
// Resident mode. When the cache budget holds every block, each extent is loaded once and its
// blocks stay pinned: later tokens compute straight from the slabs with no cache traffic, which
// is what makes streaming cost nothing when the model fits.
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
#include "storage/block_device.h"
#include "storage/eviction_policy.h"
#include "storage/prefetcher.h"
#include "storage/record_reader.h"
#include "storage/slab_placement.h"
#include "storage/weight_cache.h"
#include "sparsity/index_list.h"
#include "sparsity/policy.h"

namespace weir::model {

struct StreamingOptions {
  uint64_t cache_budget = 0;   // bytes for cached blocks (WeightCache charges)
  std::string policy = "lru";  // eviction policy (storage/eviction_policy.h)
  storage::PolicyOptions policy_options;
  // "uniform": one cache partition per layer group, equal shares (DIP's split);
  // "proportional": shares by group size; "shared": one pool for all groups.
  std::string partitions = "uniform";
  size_t block_bytes = 2 << 20;  // cached unit; a multiple of 4096 (2 MiB: huge pages, large reads)
  // Column layout: the cached unit of the input columns (0 = block_bytes). A pack grouped by
  // layers holds an input channel's rows for every layer of its group in one record of several
  // pages; 4 KiB blocks let a span selection (dip span=N) read just the kept records.
  size_t input_block_bytes = 0;
  int lane_channels = 0;         // channels per partial sum of W_down (a multiple of the
                                 // bundle chunk, 32); 0 = about 1 MiB of bundles
  int prefetch_layers = 1;       // layers ahead the I/O thread reads (0 = only the current;
                                 // -1 = no read-ahead: every block is read on demand, so the
                                 // cache's counters are deterministic and a trace replays exactly)
  size_t io_batch = 64;          // blocks per device read batch
  uint64_t staging_bytes = 0;    // staging partition; 0 = a quarter of the budget, within
                                 // [2 lanes, (prefetch_layers + 1) groups]
  bool record_trace = false;     // record block accesses for a later belady run
  // Stream each layer's attention projections too (whole layers, pinned while attention runs);
  // false keeps them static, read into memory once by StreamingModel.
  bool stream_attention = true;
  // Span mode (dip span=N on a pack written with --group N): read the kept channels' records
  // straight into one compact buffer (storage/record_reader.h), with large reads and no cache
  // entries, instead of pinning their 4 KiB blocks through the cache. The records are then
  // never cached (so DIP-CA sees none of them cached); W_down and attention still are. Off,
  // or when a selection's reads do not fit the buffer, the blocks go through the cache.
  bool compact_span = true;
  // False skips the arithmetic: the cache, its policy and the reads run exactly as they would,
  // which is how `weir sim` replays a trace of a streamed run (model/stream_replay.h).
  bool compute = true;
};

// Cumulative counters; per-token figures are differences between two readings.
struct StreamStats {
  uint64_t tokens = 0;            // BeginToken calls
  uint64_t block_accesses = 0;    // blocks the compute needed
  uint64_t block_hits = 0;        // ... that were resident before this token asked (no I/O)
  uint64_t accessed_bytes = 0;    // bytes of the blocks needed
  uint64_t cache_bytes = 0;       // ... served from DRAM without a read for this access
  uint64_t storage_bytes = 0;     // bytes read from the device (prefetch + demand + transient)
  uint64_t storage_reads = 0;     // device reads of those bytes (adjacent blocks merged count once)
  uint64_t prefetched_bytes = 0;  // of storage_bytes: read by the I/O thread ahead of use
  uint64_t transient_bytes = 0;   // of storage_bytes: read outside the cache
  uint64_t records_read = 0;      // span mode, compact_span: kept records read compactly
  // Experts layout: experts the layers chose, those already in memory (cached, or read ahead by a
  // prediction) when the layer asked, and the predictions (experts predicted for a layer, and
  // how many of them it then chose: recall = predicted_used / chosen in predicted layers).
  uint64_t expert_uses = 0, expert_hits = 0;
  uint64_t experts_predicted = 0, experts_predicted_used = 0, experts_chosen_predicted = 0;
  uint64_t experts_preloaded = 0;  // predicted experts handed to the I/O thread (recall high)
  double stall_seconds = 0;       // compute thread waiting for blocks (demand reads included)
  double io_seconds = 0;          // wall time of device reads (I/O thread and demand)
  double hit_rate() const {
    return block_accesses ? static_cast<double>(block_hits) / block_accesses : 1.0;
  }
  // Share of the read time the compute thread did not wait for.
  double overlap() const {
    if (io_seconds <= 0) return 1.0;
    const double f = 1.0 - stall_seconds / io_seconds;
    return f < 0 ? 0 : (f > 1 ? 1 : f);
  }
  StreamStats operator-(const StreamStats& o) const;
};

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
  bool columns() const { return !groups_.empty() && groups_[0].columns; }
  // The experts of an experts-layout pack (a mixture of experts), or nullptr.
  ExpertSource* experts();

  // Sparse mode: the MLP is read by prediction, not by the read-ahead cursor.
  void set_sparse(bool sparse) { sparse_mlp_ = sparse; }

  // Attention (stream_attention): pins every block of `layer`'s attention tensors, reading what
  // is missing, until ReleaseAttention(); meanwhile their bytes are at TensorAddress(name).
  Status AcquireAttention(int layer);
  void ReleaseAttention();
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
  uint64_t all_blocks_charge() const { return all_blocks_charge_; }
  bool resident_mode() const { return resident_mode_; }
  StreamStats stats() const;
  storage::CacheStats cache_stats() const { return cache_->stats(); }
  std::vector<storage::UnitId> TakeTrace() { return cache_->TakeTrace(); }
  const StreamingOptions& options() const { return options_; }
  // Where layer `layer`'s blocks are, for traces: the unit-id layer field (slab) and block count
  // of its attention extent (blocks 0 when attention is static), of its group's bundles (column
  // layout: down columns) and, column layout only, of its group's input columns (else 0).
  struct LayerBlocks {
    uint32_t attention_slab = 0, attention_blocks = 0, bundle_slab = 0, bundle_blocks = 0;
    uint32_t input_slab = 0, input_blocks = 0;
  };
  LayerBlocks layer_blocks(int layer) const;

 private:
  // A streamed byte range of the pack with its slab: blocks [0, n_blocks) of block_bytes.
  struct Extent {
    uint32_t slab = 0;       // = UnitLayer of its blocks' ids
    uint32_t kind = 0;       // unit kind: 1 bundles, 2 attention
    uint32_t partition = 0;  // cache partition of its blocks
    uint64_t offset = 0;     // file offset (page-aligned)
    uint64_t nbytes = 0;
    std::byte* base = nullptr;
    uint64_t n_blocks = 0;
    uint64_t block_bytes = 0;                // its cached unit (a multiple of 4 KiB)
    uint64_t charge = 0;                     // cache charge of all its blocks
    bool held = false;                       // resident mode: every block pinned below
    std::vector<storage::CacheHandle> pins;  // resident mode
  };
  struct Group {
    format::PackGroup pack;
    Extent extent;  // the bundle tensor (column layout: the down columns)
    Extent in;      // column layout: the input columns
    bool columns = false;
    bool experts = false;  // experts layout: extent = the layer's experts, block = one expert
    bool sparse = false;  // sparse column layout: records located by the offset tables
    std::vector<uint64_t> in_offsets, down_offsets;
    int n_lanes = 0;
  };
  // Blocks acquired for the work at hand, and transient reads to drop afterwards.
  struct Batch {
    std::vector<uint64_t> blocks;  // ascending
    std::vector<storage::CacheHandle> handles;
    std::vector<std::pair<std::byte*, size_t>> transient;
    uint64_t pinned_bytes = 0;
    int lane_begin = 0, lane_end = 0;  // MLP: lanes whose blocks are all here
  };

  class ExpertReader;
  friend class ExpertReader;

  StreamingWeights() = default;
  storage::UnitRead BlockRead(const Extent& e, uint64_t block) const;
  // First and last block of a group's bundle tensor holding channels [c0, c1).
  std::pair<uint64_t, uint64_t> BlocksOf(const Group& g, int64_t c0, int64_t c1) const;
  // Hands the I/O thread the blocks of layers layer .. layer + prefetch_layers (attention, then
  // MLP, layer by layer; on into the next token's first layers) that are not cached, as far as
  // staging has room; called again as the compute frees room, it goes on where it stopped.
  void Prefetch(int layer);
  // Pins `block` of `e` into the batch, or reads it transiently when no partition can take it.
  // `make_room`, when set, finishes and releases earlier work of the batch to free pinned room;
  // it returns false when there was none. `claim_queued`: a block the I/O thread has queued is
  // waited for rather than read here (so that it stays part of a merged read).
  Status AcquireBlock(Extent& e, uint64_t block, Batch* batch,
                      const std::function<bool()>& make_room, bool claim_queued = false);
  // Column layout (streaming_columns.cc).
  Status ForwardColumns(Group& g, int j, const float* x, float* out, ThreadPool* pool,
                        sparsity::SparsityPolicy* policy, uint64_t* weight_bytes);
  // Pins the ascending `blocks` of `e`: the missing ones are queued at once (unless the caller
  // has, `queued`), then each claimed.
  Status AcquireBlocks(Extent& e, const std::vector<uint64_t>& blocks, bool queued, Batch* batch);
  // Appends the blocks of e holding bytes [begin, end) of it (a block equal to the last one is
  // not repeated; the list is sorted and made unique after the calls, SortBlocks).
  void AddBlocks(const Extent& e, uint64_t begin, uint64_t end,
                 std::vector<uint64_t>* blocks) const;
  // *blocks = 0 .. e.n_blocks - 1 (within the capacity reserved at creation).
  void AllBlocks(const Extent& e, std::vector<uint64_t>* blocks) const;
  // Byte ranges (within the extents) of a column-layout group: input channel i (its gate^T and
  // up^T rows) / neuron c of its layer j.
  std::pair<uint64_t, uint64_t> InputColumn(const Group& g, int64_t i, int j) const;
  std::pair<uint64_t, uint64_t> DownColumn(const Group& g, int64_t c, int j) const;
  // y = sum over k < n of coef[k] * row rows[k] of the group's input (or down) columns: the
  // gathered kernel, or for the sparse layout the records (each checked against its bitmap:
  // Corrupt otherwise) split over the pool. Adds the weight bytes read to *bytes.
  Status ColumnProduct(const Group& g, bool input, const int32_t* rows, const float* coef,
                       int64_t n, float* y, ThreadPool* pool, uint64_t* bytes);
  // The same over a span read's compact copy of the group's kept input records.
  void CompactInputProduct(const Group& g, const int32_t* rows, const float* coef, int64_t n,
                           float* y, ThreadPool* pool, uint64_t* bytes);
  // Span mode with compact_span: reads the kept records (sel_in_) of g into span_reader_ and
  // numbers them; false (nothing read) when they do not fit its buffer or it cannot be used.
  Result<bool> ReadSpanCompact(const Group& g);
  // Queues the blocks[from..] of e that are not cached, until staging refuses one; their ids go
  // to *queued when set.
  void QueueMissing(const Extent& e, const std::vector<uint64_t>& blocks, size_t from,
                    std::vector<storage::UnitId>* queued);
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
  Status AcquireSpan(Group& g, int layer, const float* x, sparsity::SparsityPolicy* policy);
  void PredictNextGroup(const Group& g, const sparsity::IndexList& in, bool inputs,
                        bool whole_down);
  void ReleaseSpan();
  // Byte range of input channel i's record: its gate^T and up^T rows for every layer of g.
  std::pair<uint64_t, uint64_t> InputRecord(const Group& g, int64_t i) const;
  // Releases the predicted blocks that were not used.
  void DropPredictions();
  // Blocks of e the columns of one layer can need at most (the transient reserve).
  uint64_t MaxLayerBlocks(const Group& g, bool input) const;
  // Resident mode: reads the whole extent and keeps it pinned.
  Status LoadResident(Extent& e);
  // Computes lanes [k0, k1) of layer first + j for every token, adding to out in lane order.
  void ComputeTiledLanes(const Group& g, int j, int k0, int k1, const float* x, ThreadPool* pool);
  void ComputeLanes(const Group& g, int j, int k0, int k1, const float* x, int n, float* out,
                    ThreadPool* pool);
  // Unpins the batch's blocks below keep_from_block and drops its transient reads there.
  void Release(Batch* batch, uint64_t keep_from_block, const Extent& e);
  uint32_t PartitionOf(int group) const {
    return options_.partitions == "shared" ? 0u : static_cast<uint32_t>(group);
  }
  bool CheckResidentMode() const;
  // Cache partition weights (bytes) for a budget: groups, then staging.
  std::vector<uint64_t> PartitionWeights(uint64_t budget) const;
  void CountAccess(uint64_t bytes, bool hit);
  void MakeExpertReader();  // streaming_experts.cc

  StreamingOptions options_;
  storage::BlockDevice* device_ = nullptr;
  std::unique_ptr<storage::SlabPlacement> slabs_;
  std::unique_ptr<storage::WeightCache> cache_;
  std::unique_ptr<storage::Prefetcher> prefetcher_;
  std::vector<Group> groups_;
  std::vector<int> group_of_;                               // per layer
  std::vector<Extent> attention_;                           // per layer (stream_attention)
  std::map<std::string, const std::byte*> tensor_address_;  // streamed static tensors
  Batch attention_batch_;  // the pinned attention of the layer being computed
  int d_model_ = 0;
  kernels::Glu glu_ = kernels::Glu::kSilu;  // the architecture's gated unit
  int lane_channels_ = 0;
  int n_layers_ = 0;
  uint64_t all_blocks_charge_ = 0;
  uint64_t max_lane_bytes_ = 0;      // the transient reserve's MLP share
  uint64_t max_cache_pin_bytes_ = 0;  // column packs: the most MLP bytes pinned in the cache at once
  uint64_t max_group_bytes_ = 0;
  std::atomic<bool> resident_mode_{false};
  bool sparse_mlp_ = false;
  uint32_t staging_partition_ = 0;
  std::vector<uint64_t> partition_charge_;  // per group partition: all blocks it may hold
  uint64_t max_attention_bytes_ = 0;
  // Read-ahead: the next block to hand to the I/O thread.
  struct Cursor {
    int64_t position = 0;  // lap * n_layers + layer
    int phase = 0;         // 0 attention, 1 bundles
    uint64_t block = 0;
  };
  Cursor ahead_;
  int64_t lap_ = 0;  // tokens seen, counted by the layer order
  int last_layer_ = -1;

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
  // Span mode with compact_span: the kept records, read compactly (allocated at first use; its
  // buffer takes the input share of the transient reserve, which the records then do not use).
  std::unique_ptr<storage::RecordReader> span_reader_;
  uint64_t span_reader_capacity_ = 0;  // the largest group's input reserve
  bool span_compact_ = false;          // the held group's records are in span_reader_
  std::vector<int64_t> span_slots_;    // their slots, ascending
  std::vector<int32_t> span_pos_;      // slot -> its record's place in the compact copy
  bool single_token_ = false;  // the Forward call at hand has one token (span mode needs it)

  std::unique_ptr<ExpertSource> expert_reader_;  // experts layout only (an ExpertReader)

  mutable std::mutex stats_mu_;
  StreamStats stats_;  // compute-side counters (the I/O side is read from the prefetcher)

};

}  // namespace weir::model
