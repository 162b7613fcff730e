// StreamingModel: runs a weir pack (format/weir_pack_format.h) under a hard memory budget.
//
// What it owns, and where each byte of the budget goes (MemoryPlan):
//   static   the static tensors (embeddings, norms, output head; attention too unless streamed),
//            read from the pack through the device into memory once (never mapped: the budget
//            is what weir holds);
//   session  the KV cache and activations of the Session that runs it (measured after the
//            session is created: Session::allocated_bytes());
//   streamer the streamer's scratch and its transient-read reserve (a lane of MLP blocks or a
//            layer's attention);
//   io       I/O buffers: O_DIRECT bounce buffers, io_uring rings, the prefetch queue;
//   policy   what the eviction policy keeps outside entries (LFU counts, Belady's trace);
//   cache    the rest: the DRAM cache of streamed blocks (storage/weight_cache.h charges).
// A budget below the sum of all but the cache is refused with a message giving that minimum.
// The budget may change at run time (SetMemoryBudget): only the cache's share moves.
// Outside the budget (a fixed overhead, measured in docs/streaming.md): the program and its
// libraries, thread stacks, the tokenizer's vocabulary, page tables, and the pack's header
// mapping while the pack is being opened.
//
// The Model it exposes has every static tensor; streamed attention tensors are views of the
// places the streamer pins them at (valid between AcquireAttention and ReleaseAttention), and
// its MLP tensors are stand-in views with the right shapes and no data (data == nullptr): the
// MLP is computed by streamer(), which the Session calls instead of its resident MLP
// (SessionOptions::streamed).
//
// Thread safety: Open/Fit/SetMemoryBudget from one thread; the model may be shared read-only;
// the StreamingWeights serves one session at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "format/weir_pack_reader.h"
#include "model/model.h"
#include "model/streaming_weights.h"
#include "storage/block_device.h"
#include "storage/open_device.h"

namespace weir::model {

// StreamingOptions::prefetch_layers as the tools default it: resolved by Open to 1 for dense packs
// and 0 for an experts pack (one layer of read-ahead made Qwen3 MoE small at 25 % slower, 9.3
// tok/s against 13.6 with 0, docs/moe.md; why -- staging taken by attention read ahead, or the
// reads competing with the experts' -- was not measured).
inline constexpr int kPrefetchAuto = -2;

struct StreamingConfig {
  uint64_t memory_budget = UINT64_MAX;  // --memory; UINT64_MAX = no limit (everything resident)
  storage::DeviceOptions device;        // --storage, --profile (kind "direct", "io_uring", ...)
  StreamingOptions stream;              // --policy, --prefetch, ...; cache_budget is planned here;
                                        // block_bytes 0 = by layout (2 MiB bundles, 64 KiB columns)
  // Count what the process holds before the weights (code, libraries, the pack's metadata and
  // vocabulary: its resident set when the pack has been opened) as part of the budget, so that
  // the whole process stays within --memory. The tools set it; tests leave it off so that a
  // budget means the same cache in every test process.
  bool count_process = false;
};

struct MemoryPlan {
  uint64_t budget = 0;
  uint64_t static_bytes = 0;
  uint64_t session_bytes = 0;
  uint64_t streamer_bytes = 0;
  uint64_t io_bytes = 0;
  uint64_t policy_bytes = 0;
  uint64_t process_bytes = 0;  // StreamingConfig::count_process: the resident set at open
  uint64_t cache_bytes = 0;
  // Of cache_bytes: the staging partition's share (what read-ahead lands in; the rest is the
  // layer groups' partitions). With experts stored as channel records and a sparsity policy,
  // the groups' partitions hold attention and copies of the experts' W_down, each charged
  // down_copy_bytes (0 for other packs).
  uint64_t staging_bytes = 0;
  uint64_t down_copy_bytes = 0;
  // How many copies the groups' partitions hold beside attention, of how many experts in all.
  uint64_t down_copies_fit = 0, down_copies_total = 0;
  // Span mode's read-ahead buffer, given from what would be the cache when that leaves at least
  // as much again (0: none; see StreamingModel::Plan).
  uint64_t record_ahead_bytes = 0;
  // Of streamer_bytes, the transient reserve lent to the cache (StreamingWeights::
  // lendable_reserve): cache_bytes includes it.
  uint64_t reserve_lent_bytes = 0;
  uint64_t streamed_bytes = 0;  // the streamed tensors, for scale
  // Everything but the cache: the smallest budget that runs at all.
  uint64_t minimum() const {
    return process_bytes + static_bytes + session_bytes + streamer_bytes + io_bytes +
           policy_bytes;
  }
  // "static 95.1 MiB + session 12.0 MiB + ... + cache 40.0 MiB = 155.0 MiB".
  std::string ToString() const;
};

class StreamingModel {
 public:
  // Opens the pack, creates the device and the MLP streamer, reads the static tensors. Refuses a
  // budget below the static tensors and the streamer's fixed needs (the session's share is
  // checked by Fit).
  static Result<std::unique_ptr<StreamingModel>> Open(const std::string& path,
                                                      const StreamingConfig& config);
  // The same over a device the caller made (tests: memory or fault-injecting devices).
  static Result<std::unique_ptr<StreamingModel>> Open(const std::string& path,
                                                      std::unique_ptr<storage::BlockDevice> device,
                                                      const StreamingConfig& config);
  ~StreamingModel();

  // Completes the plan once the session exists: its KV cache and activations take their share
  // and the cache gets the rest. OutOfMemory "memory budget X is below the minimum Y (...)" when
  // the budget cannot hold everything but the cache.
  Status Fit(uint64_t session_bytes);
  // Changes the budget while running (the cache shrinks or grows); same refusal as Fit.
  Status SetMemoryBudget(uint64_t bytes);

  const Model& model() const { return *model_; }
  StreamingWeights& streamer() { return *streamer_; }
  const MemoryPlan& plan() const { return plan_; }
  const storage::BlockDevice& device() const { return *device_; }
  const std::string& path() const { return path_; }

 private:
  StreamingModel() = default;
  Status Plan(uint64_t budget, uint64_t session_bytes, MemoryPlan* plan) const;

  std::string path_;
  StreamingConfig config_;
  uint64_t total_blocks_ = 0;
  std::unique_ptr<storage::BlockDevice> device_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<StreamingWeights> streamer_;
  MemoryPlan plan_;
};

}  // namespace weir::model
