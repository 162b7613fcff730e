// TraceRecorder: writes a sparsity/cache trace (format/trace_format.h) from a running Session, as
// an ActivationObserver (`weir run|ppl|bench --trace FILE`). Two kinds of trace:
//
//   Neuron masks (a model run resident; NeuronTraceHeader). One record per token, one kind,
//     "ffn_gate+ffn_up+ffn_down", with d_ff units per layer. Unit j of a layer is active when
//     column j of W_down was read for that token: the policy's down selection
//     (ActivationObserver::OnMlpUnits), every unit when the MLP ran dense. `weir sim` replays
//     these through its own cache model.
//
//   Routing (a mixture of experts run resident; ExpertTraceHeader). One record per token, one
//     kind, "ffn_experts", with n_expert units per layer: unit e is set when the router chose
//     expert e for that token in that layer (ActivationObserver::OnExperts). `weir sim` replays
//     these with whole experts as the cache and read unit.
//
//   Block accesses (a streamed weir pack; StreamTraceHeader). One record per forward step (the
//     step size is stored: a prompt batch goes through the streamed weights once), two kinds:
//     "attn_q+attn_k+attn_v+attn_output" (the blocks of a layer's attention extent, when
//     attention is streamed) and "ffn_bundles" (the blocks of the layer's group bundle tensor,
//     one unit per block of StreamingOptions::block_bytes; for a column-layout pack its down
//     columns, plus a third kind "ffn_gate_t+ffn_up_t" for its input columns). A block is active when the engine
//     accessed it for that layer (every block while the model is held resident). Cache events
//     per (layer, kind) are the engine's own counters over the part of the step in which that
//     kind of that layer ran: from OnLayerBegin to the MLP input (attention), and from there to
//     the next layer (bundles); the last layer's window closes when the next step's first layer
//     begins (so the next step's token-boundary evictions count there) or at Finish():
//       hits = StreamStats::block_hits, misses = accesses - hits, evictions =
//       CacheStats::evicted_entries, bytes_read = StreamStats::storage_bytes (read-ahead of later
//       blocks included: the I/O thread's reads are counted when they happen). A column pack's
//       MLP window covers both of its kinds; its events are stored on "ffn_bundles".
//     The header's metadata holds the engine settings a replay needs (StreamTraceMetadata).
//
// Observers cannot fail, so the first error (an I/O error writing the file, an access the
// recorder cannot place) is kept, recording stops, and status() / Finish() return it.
//
// Thread safety: none; it observes one Session on that session's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/model_file.h"
#include "format/trace_format.h"
#include "format/trace_writer.h"
#include "model/activation_observer.h"
#include "model/streaming_model.h"
#include "model/streaming_weights.h"

namespace weir::model {

// The kind names of block traces.
inline constexpr char kAttentionBlocksKind[] = "attn_q+attn_k+attn_v+attn_output";
inline constexpr char kBundleBlocksKind[] = "ffn_bundles";          // column packs: down^T
inline constexpr char kInputColumnBlocksKind[] = "ffn_gate_t+ffn_up_t";  // column packs only
// The kind of routing traces (the same name as sim::kExpertUnitsKind).
inline constexpr char kExpertsKind[] = "ffn_experts";

// One record as the recorder produced it: packed mask bits and events per (layer, kind), index
// layer * n_kinds + kind (empty masks where the kind has no units).
struct TraceStep {
  uint32_t n_tokens = 1;
  std::vector<std::vector<uint8_t>> masks;
  std::vector<format::CacheEvents> events;
};

// Header of a neuron-mask trace for `config`, with `metadata` (e.g. "sparsity=glu:0.5").
format::TraceHeader NeuronTraceHeader(const format::LlamaConfig& config,
                                      std::vector<std::pair<std::string, std::string>> metadata);

// Header of a routing trace of a mixture-of-experts `config` (n_expert > 0): n_expert units per
// layer, each covering one expert's gate, up and down (3 x d_model x d_ff weights), with
// trace.source=experts and moe.n_expert_used first in the metadata.
format::TraceHeader ExpertTraceHeader(const format::LlamaConfig& config,
                                      std::vector<std::pair<std::string, std::string>> metadata);

// Engine settings of a streamed run, as trace metadata: trace.source=streaming, the pack's file
// name and size, every StreamingOptions field that changes cache behaviour, the planned memory
// and cache budgets, and the device's name, size and preferred alignment.
std::vector<std::pair<std::string, std::string>> StreamTraceMetadata(StreamingModel& model);
// Header of a block trace of `streamed` (block counts per layer), with `metadata`.
Result<format::TraceHeader> StreamTraceHeader(
    const format::LlamaConfig& config, const StreamingWeights& streamed,
    std::vector<std::pair<std::string, std::string>> metadata);

class TraceRecorder : public ActivationObserver {
 public:
  using Sink = std::function<Status(const TraceStep&)>;

  // Records into `sink`. `streamed` (not owned; its StreamingOptions::record_trace must be on)
  // selects block traces, null neuron traces; `header` must be the matching one above.
  static Result<std::unique_ptr<TraceRecorder>> Create(const format::TraceHeader& header,
                                                       const format::LlamaConfig& config,
                                                       StreamingWeights* streamed, Sink sink);
  // Records into a trace file at `path` (format::TraceWriter).
  static Result<std::unique_ptr<TraceRecorder>> CreateFile(const std::string& path,
                                                           const format::TraceHeader& header,
                                                           const format::LlamaConfig& config,
                                                           StreamingWeights* streamed);
  ~TraceRecorder() override;

  void OnInput(int layer, sparsity::Site site, const float* x, int64_t dim) override;
  void OnLayerBegin(int layer, int n_tokens) override;
  void OnMlpUnits(int layer, const sparsity::IndexList& down) override;
  void OnExperts(int layer, const int32_t* experts, int k) override;

  // Writes the step in progress and closes the file (if any). Idempotent. Returns status().
  Status Finish();
  const Status& status() const { return status_; }
  uint64_t records() const { return records_; }

 private:
  TraceRecorder() = default;
  void Fail(Status st) {
    if (status_.ok()) status_ = std::move(st);
  }
  // Block traces: closes the window of (layer, kind), filling that kind's mask and events.
  void CloseWindow();
  void StartWindow(int layer, int kind);
  // Writes the step in progress (neuron traces: one record per token).
  void FlushStep();

  format::TraceHeader header_;
  format::TraceLayout layout_;
  int n_layers_ = 0;
  StreamingWeights* streamed_ = nullptr;
  Sink sink_;
  std::unique_ptr<format::TraceWriter> writer_;
  Status status_;
  bool finished_ = false;
  uint64_t records_ = 0;

  // The step in progress.
  bool in_step_ = false;
  int step_tokens_ = 0;
  std::vector<TraceStep> pending_;  // neuron traces: one per token of the step; blocks: one
  std::vector<int> units_seen_;     // neuron traces: OnMlpUnits (OnExperts) calls per layer
  bool routing_ = false;            // a routing trace (kExpertsKind)

  // Block traces: the open window.
  int window_layer_ = -1, window_kind_ = -1;
  StreamStats window_stats_;
  uint64_t window_evictions_ = 0;
  int attention_kind_ = -1, bundle_kind_ = -1, input_kind_ = -1;
  std::vector<StreamingWeights::LayerBlocks> blocks_;  // [n_layers]
};

}  // namespace weir::model
