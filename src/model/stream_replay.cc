#include "model/stream_replay.h"

#include <cerrno>
#include <cstdlib>
#include <algorithm>

#include "base/units.h"
#include "format/trace_reader.h"
#include "format/weir_pack_reader.h"
#include "model/trace_recorder.h"
#include "storage/null_device.h"

namespace weir::model {

namespace {

Result<std::string> Meta(const format::TraceHeader& h, const std::string& key,
                         const std::string& path) {
  const std::string* v = h.FindMetadata(key);
  if (v == nullptr) {
    return Status::InvalidArgument(StrFormat(
        "%s: the trace has no '%s' metadata (not a trace of a streamed weir run?)", path.c_str(),
        key.c_str()));
  }
  return *v;
}

Result<int64_t> MetaInt(const format::TraceHeader& h, const std::string& key,
                        const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(std::string text, Meta(h, key, path));
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) {
    return Status::Corrupt(StrFormat("%s: metadata %s='%s' is not an integer", path.c_str(),
                                     key.c_str(), text.c_str()));
  }
  return static_cast<int64_t>(v);
}

Result<uint64_t> MetaU64(const format::TraceHeader& h, const std::string& key,
                         const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(std::string text, Meta(h, key, path));
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || *end != '\0' || errno != 0) {
    return Status::Corrupt(StrFormat("%s: metadata %s='%s' is not a byte count", path.c_str(),
                                     key.c_str(), text.c_str()));
  }
  return static_cast<uint64_t>(v);
}

std::string Describe(const format::CacheEvents& e) {
  return StrFormat("hits %u, misses %u, evictions %u, bytes read %llu", e.hits, e.misses,
                   e.evictions, static_cast<unsigned long long>(e.bytes_read));
}

}  // namespace

Result<StreamReplayResult> ReplayStreamTrace(const std::string& trace_path,
                                             const std::string& pack_path,
                                             const StreamReplayOptions& options) {
  WEIR_ASSIGN_OR_RETURN(auto reader, format::TraceReader::Open(trace_path));
  const format::TraceHeader& h = reader->header();
  WEIR_ASSIGN_OR_RETURN(std::string source, Meta(h, "trace.source", trace_path));
  if (source != "streaming" || !h.has_cache_events || !h.has_step_tokens) {
    return Status::InvalidArgument(
        StrFormat("%s: a trace of '%s' is not a block trace of a streamed pack", trace_path.c_str(),
                  source.c_str()));
  }
  if (const std::string* sp = h.FindMetadata("sparsity"); sp != nullptr && *sp != "dense") {
    return Status::Unsupported(StrFormat(
        "%s: a sparse streamed run (%s) chose its blocks from the activations, which a replay "
        "does not compute; only dense streamed runs replay",
        trace_path.c_str(), sp->c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(format::PackFile pack, format::PackFile::Open(pack_path));
  WEIR_ASSIGN_OR_RETURN(uint64_t pack_bytes, MetaU64(h, "pack.bytes", trace_path));
  if (pack.file_size() != pack_bytes) {
    WEIR_ASSIGN_OR_RETURN(std::string file, Meta(h, "pack.file", trace_path));
    return Status::InvalidArgument(StrFormat(
        "%s was recorded from a pack of %llu bytes (%s); %s has %llu", trace_path.c_str(),
        static_cast<unsigned long long>(pack_bytes), file.c_str(), pack_path.c_str(),
        static_cast<unsigned long long>(pack.file_size())));
  }
  if (static_cast<int>(h.n_layers) != pack.config().n_layers) {
    return Status::InvalidArgument(StrFormat("%s has %u layers, the pack %s has %d",
                                             trace_path.c_str(), h.n_layers, pack_path.c_str(),
                                             pack.config().n_layers));
  }

  StreamReplayResult r;
  r.header = h;
  StreamingOptions& o = r.options;
  WEIR_ASSIGN_OR_RETURN(o.policy, Meta(h, "stream.policy", trace_path));
  WEIR_ASSIGN_OR_RETURN(int64_t window, MetaInt(h, "stream.window_tokens", trace_path));
  WEIR_ASSIGN_OR_RETURN(o.partitions, Meta(h, "stream.partitions", trace_path));
  WEIR_ASSIGN_OR_RETURN(uint64_t block, MetaU64(h, "stream.block_bytes", trace_path));
  WEIR_ASSIGN_OR_RETURN(int64_t lanes, MetaInt(h, "stream.lane_channels", trace_path));
  WEIR_ASSIGN_OR_RETURN(int64_t prefetch, MetaInt(h, "stream.prefetch_layers", trace_path));
  WEIR_ASSIGN_OR_RETURN(uint64_t io_batch, MetaU64(h, "stream.io_batch", trace_path));
  WEIR_ASSIGN_OR_RETURN(o.staging_bytes, MetaU64(h, "stream.staging_bytes", trace_path));
  WEIR_ASSIGN_OR_RETURN(int64_t attention, MetaInt(h, "stream.stream_attention", trace_path));
  WEIR_ASSIGN_OR_RETURN(uint64_t budget, MetaU64(h, "memory.budget", trace_path));
  WEIR_ASSIGN_OR_RETURN(uint64_t cache_bytes, MetaU64(h, "memory.cache_bytes", trace_path));
  WEIR_ASSIGN_OR_RETURN(uint64_t alignment, MetaU64(h, "device.preferred_alignment", trace_path));
  if (window < 1 || window > UINT32_MAX || lanes < 0 || lanes > INT32_MAX || prefetch < -1 ||
      prefetch > 1 << 20 || block == 0 || block > (uint64_t{1} << 40) || io_batch == 0 ||
      alignment == 0 || alignment > (1u << 30) || (alignment & (alignment - 1)) != 0 ||
      cache_bytes > budget) {
    return Status::Corrupt(StrFormat("%s: impossible engine settings in the metadata",
                                     trace_path.c_str()));
  }
  o.policy_options.window_tokens = static_cast<uint32_t>(window);
  o.block_bytes = static_cast<size_t>(block);
  o.lane_channels = static_cast<int>(lanes);
  o.prefetch_layers = static_cast<int>(prefetch);
  o.io_batch = static_cast<size_t>(io_batch);
  o.stream_attention = attention != 0;
  o.record_trace = true;
  o.compute = false;
  o.cache_budget = 0;  // as StreamingModel creates it; the budget is set below, as Fit does
  r.read_ahead = prefetch >= 0;
  r.memory_budget = budget;
  uint64_t cache = cache_bytes;
  if (!options.policy.empty() && options.policy != o.policy) {
    o.policy = options.policy;
    r.as_recorded = false;
  }
  if (options.memory_budget != 0 && options.memory_budget != budget) {
    const uint64_t others = budget - cache_bytes;
    if (options.memory_budget <= others) {
      return Status::InvalidArgument(StrFormat(
          "memory budget %s is below what the run's plan gave everything but the cache (%s)",
          FormatBytes(options.memory_budget).c_str(), FormatBytes(others).c_str()));
    }
    cache = options.memory_budget - others;
    r.memory_budget = options.memory_budget;
    r.as_recorded = false;
  }
  if (o.policy == "belady") {
    return Status::InvalidArgument("belady needs the access trace of the run it replays; use "
                                   "lru, lfu, atu, window or mru");
  }

  storage::NullDevice device(pack_path, pack.file_size(), static_cast<size_t>(alignment));
  WEIR_ASSIGN_OR_RETURN(auto streamed, StreamingWeights::Create(pack, &device, o));
  WEIR_RETURN_IF_ERROR(streamed->SetCacheBudget(cache));
  o.cache_budget = cache;

  // The recorder fills the replayed events; the sink pairs each step with the recorded one.
  format::TraceHeader replay_header = h;
  replay_header.metadata.clear();
  const format::TraceLayout& layout = reader->layout();
  format::TraceToken recorded;
  uint64_t step_index = 0;
  auto sink = [&](const TraceStep& step) -> Status {
    WEIR_ASSIGN_OR_RETURN(bool more, reader->Next(&recorded));
    if (!more) return Status::Internal("replay produced more steps than the trace holds");
    StreamReplayStep s;
    s.n_tokens = step.n_tokens;
    s.replayed = step.events;
    s.recorded.resize(step.events.size());
    for (uint32_t l = 0; l < layout.n_layers; ++l) {
      for (uint32_t k = 0; k < layout.n_kinds; ++k) {
        const size_t i = layout.Index(l, k);
        if (layout.units[i] == 0) continue;
        s.recorded[i] = recorded.events(l, k);
        r.recorded.Add(s.recorded[i]);
        r.replayed.Add(s.replayed[i]);
        const uint8_t* m = recorded.mask(l, k);
        const bool same_mask =
            std::equal(step.masks[i].begin(), step.masks[i].end(), m, m + step.masks[i].size());
        const bool same_events = s.recorded[i] == s.replayed[i];
        r.mismatched_masks += same_mask ? 0 : 1;
        r.mismatched_events += same_events ? 0 : 1;
        if ((!same_mask || !same_events) && r.first_mismatch.empty()) {
          r.first_mismatch = StrFormat(
              "step %llu, layer %u, %s: %srecorded %s; replayed %s",
              static_cast<unsigned long long>(step_index), l, h.kinds[k].name.c_str(),
              same_mask ? "" : "the blocks used differ; ", Describe(s.recorded[i]).c_str(),
              Describe(s.replayed[i]).c_str());
        }
      }
    }
    r.steps.push_back(std::move(s));
    ++step_index;
    return Status::Ok();
  };
  WEIR_ASSIGN_OR_RETURN(auto recorder, TraceRecorder::Create(replay_header, pack.config(),
                                                             streamed.get(), sink));

  // Session::Forward's order: BeginToken, then per layer the attention (pinned while it is
  // computed) and the MLP. The step sizes come from a second reader over the same file (the
  // first one is the sink's, a step behind).
  WEIR_ASSIGN_OR_RETURN(auto steps_reader, format::TraceReader::Open(trace_path));
  const int d_model = pack.config().d_model;
  std::vector<float> x, out;
  std::vector<uint64_t> accessed;  // per step
  format::TraceToken token;
  while (true) {
    WEIR_ASSIGN_OR_RETURN(bool more, steps_reader->Next(&token));
    if (!more) break;
    const int n = static_cast<int>(token.n_tokens());
    x.assign(static_cast<size_t>(n) * d_model, 0.0f);
    out.resize(x.size());
    const uint64_t accessed0 = streamed->stats().accessed_bytes;
    streamed->BeginToken();
    for (int l = 0; l < pack.config().n_layers; ++l) {
      recorder->OnLayerBegin(l, n);
      WEIR_RETURN_IF_ERROR(streamed->AcquireAttention(l));
      streamed->ReleaseAttention();
      recorder->OnInput(l, sparsity::Site::kMlpIn, x.data(), d_model);
      WEIR_RETURN_IF_ERROR(streamed->Forward(l, x.data(), n, out.data(), nullptr));
      WEIR_RETURN_IF_ERROR(recorder->status());
    }
    accessed.push_back(streamed->stats().accessed_bytes - accessed0);
  }
  WEIR_RETURN_IF_ERROR(recorder->Finish());
  if (r.steps.size() != reader->n_tokens()) {
    return Status::Internal(StrFormat("replay produced %zu steps, the trace holds %llu",
                                      r.steps.size(),
                                      static_cast<unsigned long long>(reader->n_tokens())));
  }
  for (size_t i = 0; i < r.steps.size(); ++i) r.steps[i].accessed_bytes = accessed[i];
  return r;
}

}  // namespace weir::model
