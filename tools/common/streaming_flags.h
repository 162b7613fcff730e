// Flags of the commands that can run a weir pack under a memory budget (--memory, --storage,
// --profile, --policy, --prefetch, ...), declared once, and the loading they share: a model
// file is loaded resident as before; a weir pack is opened for streaming (model/streaming_model.h)
// and its budget is planned once the session exists.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "common/model_flags.h"
#include "model/model.h"
#include "model/session.h"
#include "model/streaming_model.h"

namespace weir::tools {

struct StreamingFlags {
  std::string memory;             // --memory BYTES; "" = no limit
  std::string memory_scope = "process";  // --memory-scope process|weights
  std::string storage = "auto";   // --storage: auto, pread, direct, io_uring, io_uring+direct, mmap
  std::string profile;            // --profile: throttle to a storage profile
  // --policy; "auto": mru for dense packs (lru and lfu thrash on a sweep, docs/streaming.md 3.2),
  // lfu for the experts of a mixture (counted within the sequence, ActiveFlow's contextual LFU).
  std::string policy = "auto";
  // --prefetch: layers read ahead (-1: none); the default (model::kPrefetchAuto) is 1 for dense
  // packs and 0 for experts (docs/moe.md: reading the next layer ahead cost them 30 %).
  int prefetch = model::kPrefetchAuto;
  std::string partitions = "shared";  // measured: docs/streaming.md, 3.2
  std::string block;  // --block; "" = 2 MiB for bundle packs, 64 KiB for column packs
  int queue_depth = 32;
  bool static_attention = false;  // --static-attention
  std::string span_ahead = "off";  // --span-ahead: off, token, layer, both (docs/streaming.md 3.6)
  // --expert-bias GAMMA: a mixture of experts routes toward cached experts (docs/moe.md); 1 = off.
  double expert_bias = 1.0;
  bool record_trace = false;  // set by --trace (common/trace_flags.h), not a flag of its own
};
void AddStreamingFlags(CLI::App& app, StreamingFlags* flags);

// True when `path` is a GGUF file with weir.pack.* metadata.
bool IsPackFile(const std::string& path);

// A model ready for sessions: resident, or a pack being streamed.
struct RunModel {
  std::unique_ptr<model::Model> resident;
  std::unique_ptr<model::StreamingModel> streaming;
  const model::Model& model() const { return streaming ? streaming->model() : *resident; }
  // Streaming: where the budget in force came from ("--memory", "cgroup limit ... less ...
  // headroom", "none: no --memory and no cgroup limit"), for the start line and --json.
  std::string memory_source;
  float expert_bias = 1.0f;  // --expert-bias, for SessionOptions
  // Points the session options at the streamed MLP, if any.
  void Configure(model::SessionOptions* options) const;
  // Streaming: plans the budget with the session's allocations (refusing one below the minimum).
  // `extra_bytes`: what else the run holds beside the session (a speculative draft model or
  // session), counted inside the budget.
  Status Fit(const model::Session& session, uint64_t extra_bytes = 0) const;
};
// A pack when the file is one (with the streaming flags), else the model resident; --memory
// with a file that is not a pack is an error that says how to make one.
Result<RunModel> LoadRunModel(const ModelFlags& model_flags, const StreamingFlags& flags);

// Streaming: "memory budget 76.00 MiB (cgroup limit 80.00 MiB less 4.00 MiB headroom), storage
// io_uring+direct", the line run/bench/ppl print at start; {"budget", "source", "storage"} in JSON.
std::string MemoryLine(const RunModel& m);
nlohmann::json MemoryJson(const RunModel& m);
// "KV cache q8_0, 8192 tokens, 102.00 MiB" and, for a pack under a budget, how many tokens of
// context the budget would hold at each cache type (the weight cache then at its floor);
// {"types", "ctx", "bytes", "bytes_per_token", "max_ctx": {type: tokens}} in JSON.
std::string KvLine(const RunModel& m, const model::Session& session);
nlohmann::json KvJson(const RunModel& m, const model::Session& session);
// The headroom left under a cgroup's limit when --memory is not given: the limit counts the
// kernel's memory for the process and the page cache of the program's own files, outside weir's
// plan.
uint64_t CgroupHeadroomBytes(uint64_t limit);

// "storage 1.2 MiB, cache 3.4 MiB, hit 82.1%, stall 1.20 ms, overlap 64%" for a per-token delta.
std::string FormatStreamStats(const model::StreamStats& s);
// The same as JSON, per token (`tokens` divides the byte and time counters).
nlohmann::json StreamStatsJson(const model::StreamStats& s, uint64_t tokens);
// Exact counters since the streamer was created (block accesses and hits, bytes read).
nlohmann::json StreamTotalsJson(const model::StreamStats& s);
nlohmann::json MemoryPlanJson(const model::MemoryPlan& p);
// Peak resident set size of this process so far (VmHWM), in bytes; 0 if unknown.
uint64_t PeakRssBytes();

}  // namespace weir::tools
