// ReplayStreamTrace: replays a block trace of a streamed run (model/trace_recorder.h) through the
// engine's own streaming code -- StreamingWeights with its WeightCache, eviction policy, staging
// partition, lane batches and reads -- with the arithmetic switched off (StreamingOptions::
// compute) and a NullDevice in place of the file, in the order Session::Forward drives it. The
// per-(step, layer, kind) counters are collected by the same TraceRecorder code that wrote the
// trace, so they compare field by field with the recorded ones.
//
// Exactness. With read-ahead off (the run used `--prefetch -1`) every read is made on demand by
// the compute thread, nothing depends on timing, and the replay with the recorded policy and
// budget reproduces every recorded counter exactly (tests/integration/trace_replay_test.cc). With
// read-ahead on, which blocks the I/O thread has read, or could still cancel, when the compute
// asks depends on timing: hits and bytes then agree only approximately.
//
// Sparse streamed runs (a column pack with --sparsity) are refused: their blocks depend on the
// activations, which a replay does not compute.
//
// What-if. A different policy or memory budget replays the same steps under it; the cache gets
// the new budget minus what the run's plan gave everything else (the same model and options need
// the same static, session and I/O shares).
//
// Thread safety: a free function; it uses its own objects.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/trace_format.h"
#include "model/streaming_weights.h"

namespace weir::model {

struct StreamReplayOptions {
  std::string policy;          // "" = the recorded policy
  uint64_t memory_budget = 0;  // 0 = the recorded budget
};

struct StreamReplayCounts {
  uint64_t hits = 0, misses = 0, evictions = 0, bytes_read = 0;
  void Add(const format::CacheEvents& e) {
    hits += e.hits, misses += e.misses, evictions += e.evictions, bytes_read += e.bytes_read;
  }
  bool operator==(const StreamReplayCounts&) const = default;
};

struct StreamReplayStep {
  uint32_t n_tokens = 1;
  // [layer * n_kinds + kind] of the trace's header.
  std::vector<format::CacheEvents> recorded, replayed;
  uint64_t accessed_bytes = 0;  // bytes of the blocks the step used (StreamStats::accessed_bytes)
};

struct StreamReplayResult {
  format::TraceHeader header;  // the recorded trace's
  StreamingOptions options;    // as replayed (cache_budget = the replay's cache budget)
  uint64_t memory_budget = 0;  // as replayed
  bool as_recorded = true;     // same policy and budget as the run
  bool read_ahead = false;     // the run read ahead (then counts need not match exactly)
  std::vector<StreamReplayStep> steps;
  StreamReplayCounts recorded, replayed;  // totals over all steps
  uint64_t mismatched_events = 0;  // (step, layer, kind) whose replayed events differ
  uint64_t mismatched_masks = 0;   // ... whose replayed accesses differ from the recorded mask
  std::string first_mismatch;      // where the first difference is, for messages
};

// Replays the trace at `trace_path`, which must be a block trace recorded from the pack at
// `pack_path` (its size is checked against the recorded one).
Result<StreamReplayResult> ReplayStreamTrace(const std::string& trace_path,
                                             const std::string& pack_path,
                                             const StreamReplayOptions& options);

}  // namespace weir::model
