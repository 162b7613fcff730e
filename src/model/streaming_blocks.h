// BlockStreamer: the blocks of a StreamPlan's extents (streaming_plan.h) in memory. It owns the
// slabs the blocks live in, the byte-budgeted WeightCache that holds them and the Prefetcher
// whose I/O thread reads them; the layouts' MLPs (streaming_bundles.h, streaming_columns.h,
// streaming_experts.h) pin the blocks they compute from through it. It knows extents and blocks,
// nothing about MLPs.
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
// Resident mode. When the cache budget holds every block, each extent is loaded once and its
// blocks stay pinned: later tokens compute straight from the slabs with no cache traffic, which
// is what makes streaming cost nothing when the model fits.
//
// Thread safety: one thread (the session's) calls everything but stats(), cache_stats() and
// resident_mode(), which any thread may call. The plan and the device must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/streaming_plan.h"
#include "storage/block_device.h"
#include "storage/prefetcher.h"
#include "storage/record_buffers.h"
#include "storage/slab_placement.h"
#include "storage/unit_id.h"
#include "storage/weight_cache.h"

namespace weir::model {

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
  // Rows of the streamed token embedding (StreamPlan::embedding_row_bytes): read outside the cache
  // and its traces, so counted apart from storage_bytes / storage_reads.
  uint64_t embedding_bytes = 0, embedding_reads = 0;
  uint64_t records_read = 0;       // span mode, compact_span: records read compactly (read
                                   // ahead by a guess, or kept and not guessed)
  uint64_t records_ahead = 0;      // of those: read ahead for the next group by a guess
  uint64_t records_ahead_used = 0;  // ... that the group then kept
  // Of storage_bytes / storage_reads / io_seconds: the compact record reads (span records,
  // experts' channel records; storage::RecordBuffers), read while the compute waits, apart from
  // the cache's block reads, so that each kind's read rate shows (bytes / seconds).
  uint64_t record_bytes = 0, record_reads = 0;
  double record_io_seconds = 0;
  // Experts layout: experts the layers chose, those already in memory (cached, or read ahead by a
  // prediction) when the layer asked, and the predictions (experts predicted for a layer, and
  // how many of them it then chose: recall = predicted_used / chosen in predicted layers).
  uint64_t expert_uses = 0, expert_hits = 0;
  uint64_t experts_predicted = 0, experts_predicted_used = 0, experts_chosen_predicted = 0;
  uint64_t experts_preloaded = 0;  // predicted experts handed to the I/O thread (recall high)
  // Experts stored as channel records under a sparsity policy: the W_down each (token, expert)
  // use computes with, and those found in the cache (so only the kept channels were read).
  uint64_t down_uses = 0, down_hits = 0;
  double stall_seconds = 0;        // compute thread waiting for blocks (demand reads included)
  // ... split by what was waited for: attention blocks, MLP blocks (bundles, W_down columns,
  // experts), input-column blocks, and span records read compactly.
  double stall_attention_seconds = 0, stall_mlp_seconds = 0, stall_input_seconds = 0,
         stall_records_seconds = 0;
  double io_seconds = 0;           // wall time of device reads (I/O thread and demand)
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

class BlockStreamer {
 public:
  using Extent = StreamPlan::Extent;
  // Blocks acquired for the work at hand, and transient reads to drop afterwards.
  struct Batch {
    std::vector<uint64_t> blocks;  // ascending
    std::vector<storage::CacheHandle> handles;
    std::vector<std::pair<std::byte*, size_t>> transient;
    uint64_t pinned_bytes = 0;
    int lane_begin = 0, lane_end = 0;  // MLP: lanes whose blocks are all here
  };

  // The charge function of a cache under `options`' policy (StreamPlan::Build takes it).
  static Result<StreamPlan::EntryCharge> EntryChargeOf(const StreamingOptions& options);
  // The slabs, cache (budget plan.options.cache_budget) and I/O thread of `plan`'s extents.
  static Result<std::unique_ptr<BlockStreamer>> Create(const StreamPlan& plan,
                                                       storage::BlockDevice* device);
  ~BlockStreamer();
  BlockStreamer(const BlockStreamer&) = delete;
  BlockStreamer& operator=(const BlockStreamer&) = delete;
  // Stops the I/O thread (reads in flight are finished); blocks stay pinned until released.
  void Shutdown();

  // Where e's blocks are: its slab, block b at base(e) + b * e.block_bytes.
  std::byte* base(const Extent& e) const { return state_[e.slab].base; }
  // Resident mode: e's blocks are all loaded and pinned (LoadResident).
  bool held(const Extent& e) const { return state_[e.slab].held; }
  bool resident_mode() const { return resident_mode_; }
  // Sparse mode: the MLP is read by prediction, not by the read-ahead cursor.
  bool sparse_mlp() const { return sparse_mlp_; }
  // With experts stored as channel records the staging partition shrinks (sparse) or grows back
  // (StreamPlan::PartitionWeights): the budget is set again under the new shares, as
  // SetCacheBudget does. OutOfMemory (the mode unchanged) when what is pinned does not fit.
  Status set_sparse_mlp(bool sparse);
  // The cache's shares under the current mode: staging's, and every partition's.
  std::vector<uint64_t> PartitionWeights(uint64_t budget) const {
    return plan_.PartitionWeights(budget, sparse_mlp_);
  }
  // The streamed token embedding table (StreamPlan::embedding_row_bytes > 0): reads the rows of
  // `tokens` (at most StreamPlan::kEmbeddingBatchRows, all in flight at once) into a buffer of
  // this object and returns it, row k at k * embedding_row_bytes (valid until the next call);
  // the reads count in StreamStats::embedding_bytes and their wait as stall.
  Result<const std::byte*> EmbeddingRows(std::span<const int32_t> tokens);
  // Span mode with W_down kept whole (ColumnMlp): the read-ahead cursor also reads each column
  // group's whole W_down, at the group's first layer, and runs a group of layers ahead, so that
  // attention and W_down arrive in the order the compute needs them.
  void set_span_down_ahead(bool on) { span_down_ahead_ = on; }

  storage::UnitRead BlockRead(const Extent& e, uint64_t block) const;
  // Hands the I/O thread the blocks of layers layer .. layer + prefetch_layers (attention, then
  // MLP, layer by layer; on into the next token's first layers) that are not cached, as far as
  // staging has room; called again as the compute frees room, it goes on where it stopped.
  void Prefetch(int layer);
  // Pins `block` of `e` into the batch, or reads it transiently when no partition can take it.
  // `make_room`, when set, finishes and releases earlier work of the batch to free pinned room;
  // it returns false when there was none. `claim_queued`: a block the I/O thread has queued is
  // waited for rather than read here (so that it stays part of a merged read).
  Status AcquireBlock(const Extent& e, uint64_t block, Batch* batch,
                      const std::function<bool()>& make_room, bool claim_queued = false);
  // Pins the ascending `blocks` of `e`: the missing ones are queued at once (unless the caller
  // has, `queued`), then each claimed.
  Status AcquireBlocks(const Extent& e, const std::vector<uint64_t>& blocks, bool queued,
                       Batch* batch);
  // Unpins the batch's blocks below keep_from_block and drops its transient reads there.
  void Release(Batch* batch, uint64_t keep_from_block, const Extent& e);
  // Queues the blocks[from..] of e that are not cached, until staging refuses one; their ids go
  // to *queued when set.
  void QueueMissing(const Extent& e, const std::vector<uint64_t>& blocks, size_t from,
                    std::vector<storage::UnitId>* queued);
  // Reads the records `slots` (ascending) of e, each `record_bytes` from the extent's start, into
  // one compact buffer outside the cache (storage/record_buffers.h; the plan's
  // record_buffer_bytes): slots[k]'s record at records() + places[k] * record_bytes, taken from
  // a read-ahead of e where one guessed it. False, reading nothing, when they do not fit it. The
  // wait counts as stall.
  // `at`: the records start that many bytes into e (an expert's channel records: its record's
  // offset in the layer's extent).
  Result<bool> ReadRecords(const Extent& e, uint64_t record_bytes, const int64_t* slots,
                           int64_t n, int32_t* places, uint64_t at = 0);
  // Starts reading the records `slots` (ascending) of e ahead, for the next ReadRecords of e
  // (storage::RecordBuffers::ReadAhead): false when that is off (StreamingOptions::
  // span_read_ahead, prefetch_layers < 0) or the buffer is not split.
  bool ReadRecordsAhead(const Extent& e, uint64_t record_bytes, std::vector<int64_t> slots);
  // Whether the record buffer, when ReadRecords first makes it, gets its read-ahead half (the
  // plan's record_ahead_bytes); fixed once it is made. Off until set.
  void set_record_ahead(bool on) { record_ahead_ = on; }
  // The read-ahead buffer has been made (its bytes are in use from then on).
  bool record_ahead_made() const { return record_ahead_made_; }
  const std::byte* records() const { return records_->data(); }
  // A copy of bytes the caller read (StreamPlan::Group::down_copy: an expert's W_down) as block
  // `block` of `e`, `bytes` long, in e's partition. One cache access. A cached copy comes back
  // ready; a missing one as a loader handle whose room is reserved (evicting by the policy): the
  // caller fills mutable_data() and calls Publish(). An invalid handle when no room can be made
  // (the caller computes from its own read, as without the cache).
  Result<storage::CacheHandle> AcquireCopy(const Extent& e, uint64_t block, size_t bytes);
  // Cancels a queued read that has not started (what was read stays cached, evictable).
  void Cancel(storage::UnitId id) { prefetcher_->Cancel(id); }
  bool Contains(storage::UnitId id) const { return cache_->Contains(id); }
  // Resident mode: reads the whole extent and keeps it pinned.
  Status LoadResident(const Extent& e);
  // Bit b of words[b / 64]: block b of e is cached where a cache-aware mask may count it (with
  // read-ahead on, outside staging). `words` holds (e.n_blocks + 63) / 64 words.
  void ResidentBlocks(const Extent& e, uint64_t* words) const;
  // What the cache charges an entry of `bytes` (WeightCache::EntryCharge).
  uint64_t EntryCharge(uint64_t bytes) const {
    return cache_->EntryCharge(static_cast<size_t>(bytes));
  }
  // The budget of a cache partition.
  uint64_t partition_budget(uint32_t partition) const {
    return cache_->partition_stats(partition).budget_bytes;
  }

  // Attention (stream_attention): pins every block of `layer`'s attention extent, reading what
  // is missing, until ReleaseAttention().
  Status AcquireAttention(int layer);
  void ReleaseAttention();

  // Token and sequence boundaries (forwarded to the eviction policy).
  void BeginToken();
  void ResetSequence();
  // Changes the cache budget (leaving resident mode unpins every extent first; reads in flight
  // are cancelled or finished). OutOfMemory when pinned blocks exceed the new budget.
  Status SetCacheBudget(uint64_t bytes);

  // A block the compute needed (hit: served without the cache, in resident mode).
  void CountAccess(uint64_t bytes, bool hit);
  // Updates the compute-side counters under their lock.
  void UpdateStats(const std::function<void(StreamStats&)>& update);
  StreamStats stats() const;
  storage::CacheStats cache_stats() const { return cache_->stats(); }
  std::vector<storage::UnitId> TakeTrace() { return cache_->TakeTrace(); }

 private:
  // What an extent holds in memory: its slab and, in resident mode, every block pinned.
  struct ExtentState {
    std::byte* base = nullptr;
    bool held = false;                       // resident mode: every block pinned below
    std::vector<storage::CacheHandle> pins;  // resident mode
  };
  BlockStreamer(const StreamPlan& plan, storage::BlockDevice* device)
      : plan_(plan), device_(device) {}
  bool CheckResidentMode() const;

  const StreamPlan& plan_;
  storage::BlockDevice* device_ = nullptr;
  std::unique_ptr<storage::SlabPlacement> slabs_;
  std::unique_ptr<storage::WeightCache> cache_;
  std::unique_ptr<storage::Prefetcher> prefetcher_;
  std::unique_ptr<storage::RecordBuffers> records_;  // made at first use, under stats_mu_
  std::vector<ExtentState> state_;  // per extent, by slab
  Batch attention_batch_;           // the pinned attention of the layer being computed
  std::atomic<bool> resident_mode_{false};
  bool sparse_mlp_ = false;
  bool span_down_ahead_ = false;
  std::vector<std::byte> embedding_rows_;  // EmbeddingRows' buffer
  bool record_ahead_ = false, record_ahead_made_ = false;
  // Read-ahead: the next block to hand to the I/O thread.
  struct Cursor {
    int64_t position = 0;  // lap * n_layers + layer
    int phase = 0;         // 0 attention, 1 bundles (columns: input), 2 columns: down
    uint64_t block = 0;
  };
  Cursor ahead_;
  int64_t lap_ = 0;  // tokens seen, counted by the layer order
  int last_layer_ = -1;

  mutable std::mutex stats_mu_;
  StreamStats stats_;  // compute-side counters (the I/O side is read from the prefetcher)
};

}  // namespace weir::model
