#include "common/streaming_flags.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "base/memory_info.h"
#include "base/units.h"
#include "format/gguf_reader.h"
#include "format/weir_pack_reader.h"
#include "storage/eviction_policy.h"
#include "storage/open_device.h"

namespace weir::tools {

void AddStreamingFlags(CLI::App& app, StreamingFlags* f) {
  app.add_option(
      "--memory", f->memory,
      "memory budget of the whole process when running a weir pack (e.g. 300MiB, 1.5GiB; "
      "default: inside a memory cgroup its limit less a headroom of 5 % (at least 8 MiB), "
      "else no limit); docs/streaming.md");
  app.add_option("--memory-scope", f->memory_scope,
                 "what --memory bounds: process (default: code, libraries and metadata too, their "
                 "resident set counted when the pack is opened) or weights (only what weir "
                 "allocates for the model: statics, KV cache, cache, buffers)")
      ->check(CLI::IsMember({"process", "weights"}));
  app.add_option("--storage", f->storage,
                 "how a pack is read: auto, pread, direct (O_DIRECT), io_uring, "
                 "io_uring+direct, mmap (default auto: the first of io_uring+direct, direct, "
                 "pread that opens; reads that bypass the page cache, which a memory limit "
                 "counts)");
  app.add_option(
      "--profile", f->profile,
      "throttle reads to a storage profile: a18-flash, ufs4, ufs3.1, ufs2.2, nvme-pcie3");
  app.add_option("--policy", f->policy,
                 "DRAM cache eviction policy: lru, lfu, belady, atu, window, mru, hot (default "
                 "auto: hot for bundle and column packs, where each token sweeps the layers in "
                 "order and LRU and LFU evict what is needed next and hit nothing: hot keeps the "
                 "leading blocks of every extent (the hottest columns of a pack ordered with "
                 "--calib), so every layer reads only its rest, in one run; mru keeps whatever "
                 "came first; lfu counted within the sequence for the experts of a mixture of "
                 "experts)");
  app.add_flag("--static-attention", f->static_attention,
               "keep the attention projections in memory (read once) instead of streaming them "
               "with the MLP; they count in the static share of the budget");
  app.add_option("--prefetch", f->prefetch,
                 "layers read ahead by the I/O thread (default 1, for a mixture of experts 0; 0 = "
                 "the current layer only; -1 = no read-ahead, every block read on demand: "
                 "deterministic cache counts)")
      ->check(CLI::Range(-1, 64));
  app.add_option("--partitions", f->partitions,
                 "cache split: shared (one pool), uniform (per layer group), proportional "
                 "(default shared: per-group shares smaller than a block cache nothing)");
  app.add_option("--block", f->block,
                 "cached unit of the streamed tensors, a multiple of 4 KiB (default 2MiB; for a "
                 "column pack 2MiB for W_down and attention when each of those extents holds two, "
                 "else 64KiB, and 64KiB under a profile whose reads are as fast at 64 KiB, "
                 "a18-flash; a column pack's input columns 64KiB, 4KiB when grouped)");
  app.add_option("--expert-bias", f->expert_bias,
                 "a mixture of experts: before each top-k choice, scale the router probabilities "
                 "of the experts not in the cache by GAMMA in (0, 1] (DIP-CA's bias, applied to "
                 "routing; the chosen experts' weights stay the unbiased ones). Default 1: off. "
                 "Changes the output; acts only on a streamed pack, where experts can be uncached "
                 "(docs/moe.md)")
      ->check(
          [](const std::string& v) {
            char* end = nullptr;
            const double g = std::strtod(v.c_str(), &end);
            const bool number = end != v.c_str() && *end == '\0';
            return number && g > 0 && g <= 1 ? std::string()
                                             : "GAMMA must be a number in (0, 1], not " + v;
          },
          "GAMMA in (0, 1]");
  app.add_option("--queue-depth", f->queue_depth, "io_uring reads in flight (default 32)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--span-ahead", f->span_ahead,
                 "span selection (dip span=N on a pack written with --group N): which of the next "
                 "group's records to read while this group computes: token (what the group kept "
                 "for the previous token), layer (what this layer's input predicts), both (the "
                 "union), off (default: on the 1.1B of docs/streaming.md 3.6 each guess read more "
                 "than it hid)")
      ->check(CLI::IsMember({"off", "token", "layer", "both"}));
}

bool IsPackFile(const std::string& path) {
  auto g = format::GgufFile::Open(path);
  return g.ok() && format::PackFile::IsPack(*g);
}

void RunModel::Configure(model::SessionOptions* options) const {
  if (streaming) options->streamed = &streaming->streamer();
  options->expert_bias = expert_bias;
}

Status RunModel::Fit(const model::Session& session, uint64_t extra_bytes) const {
  if (!streaming) return Status::Ok();
  Status st = streaming->Fit(session.allocated_bytes() + extra_bytes);
  if (st.code() != Status::Code::kOutOfMemory) return st;
  // Say what the context costs, and what a smaller cache type would.
  const format::LlamaConfig& c = session.model().config();
  std::string hint = StrFormat("; of that, the KV cache of %d tokens in %s takes %s", session.ctx(),
                               model::KvTypesName(session.kv_types()).c_str(),
                               FormatBytes(session.kv_bytes()).c_str());
  if (Traits(session.kv_types().k).block_bytes * 8 / Traits(session.kv_types().k).block_size > 8) {
    const model::KvTypes q8{DType::kQ8_0, DType::kQ8_0};
    hint += StrFormat(" (q8_0: %s; -ctk q8_0 -ctv q8_0, or a smaller -c)",
                      FormatBytes(model::KVCache::BytesFor(c, session.ctx(), session.n_batch(), q8)).c_str());
  }
  return Status::OutOfMemory(st.message() + hint);
}

namespace {

// "MODEL.weir" in the working directory (the model's own folder may be read-only), for the
// command a refusal suggests.
std::string PackPathFor(const std::string& model) {
  const size_t slash = model.find_last_of('/');
  std::string name = slash == std::string::npos ? model : model.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name + ".weir";
}

// A model copied into memory must fit in what the machine (or its cgroup) has left: refused
// before anything is loaded otherwise, with the commands that stream it instead.
Status CheckFitsInMemory(const ModelFlags& mf) {
  if (mf.mmap) return Status::Ok();  // asked for: the page cache holds what it can
  std::error_code ec;
  const uintmax_t file_bytes = std::filesystem::file_size(mf.model, ec);
  if (ec) return Status::Ok();  // the loader reports an unreadable file
  // The cgroup's limit less this process (not less its usage, which counts page cache the
  // kernel would reclaim), and the machine's MemAvailable.
  std::optional<uint64_t> room = AvailableMemoryBytes();
  const std::optional<uint64_t> limit = CgroupMemoryLimit();
  if (limit) {
    const uint64_t rss = ResidentBytes().value_or(0);
    const uint64_t r = *limit > rss ? *limit - rss : 0;
    room = room ? std::min(*room, r) : r;
  }
  if (!room || file_bytes <= *room) return Status::Ok();
  const uint64_t budget = limit.value_or(*room);
  const std::string pack = PackPathFor(mf.model);
  return Status::OutOfMemory(StrFormat(
      "%s: the model needs about %s in memory (its file) but %s is available%s; stream it from "
      "storage instead: `weir pack -m %s -o %s` then `weir run -m %s --memory %s` (or --mmap to "
      "let the page cache hold what it can, slowly)",
      mf.model.c_str(), FormatBytes(file_bytes).c_str(), FormatBytes(*room).c_str(),
      limit ? " under this memory cgroup's limit" : "", mf.model.c_str(), pack.c_str(),
      pack.c_str(),
      StrFormat("%lluMiB",
                static_cast<unsigned long long>((budget - CgroupHeadroomBytes(budget)) >> 20))
          .c_str()));
}

}  // namespace

uint64_t CgroupHeadroomBytes(uint64_t limit) {
  return std::min(limit, std::max<uint64_t>(uint64_t{8} << 20, limit / 20));
}

std::string MemoryLine(const RunModel& m) {
  if (!m.streaming) return "";
  const model::MemoryPlan& p = m.streaming->plan();
  const std::string& dev = m.streaming->device().name();
  return StrFormat("memory budget %s (%s), storage %s",
                   p.budget == UINT64_MAX ? "unlimited" : FormatBytes(p.budget).c_str(),
                   m.memory_source.c_str(), dev.substr(0, dev.find(':')).c_str());
}

namespace {

// The cache types a user would pick between, and the tokens of context each fits in what the
// session's KV cache and the weight cache have between them (the weight cache at its floor):
// only for a pack under a budget.
std::vector<std::pair<std::string, int64_t>> MaxContexts(const RunModel& m, const model::Session& s) {
  std::vector<std::pair<std::string, int64_t>> out;
  if (!m.streaming || m.streaming->plan().budget == UINT64_MAX) return out;
  const format::LlamaConfig& c = s.model().config();
  const uint64_t fixed_now = model::KVCache::BytesFor(c, s.ctx(), s.n_batch(), s.kv_types()) -
                             model::KVCache::BytesPerPosition(c, s.kv_types()) * static_cast<uint64_t>(s.ctx());
  const uint64_t room = m.streaming->plan().cache_bytes + s.kv_bytes() - fixed_now;
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    if (!model::CheckKvType(t, c.head_dim).ok()) continue;
    const model::KvTypes types{t, t};
    const uint64_t per = model::KVCache::BytesPerPosition(c, types);
    const uint64_t fixed = model::KVCache::BytesFor(c, s.ctx(), s.n_batch(), types) -
                           per * static_cast<uint64_t>(s.ctx());
    if (per == 0) continue;  // sliding layers only: the context does not grow the cache
    out.emplace_back(model::KvTypesName(types),
                     room > fixed ? static_cast<int64_t>((room - fixed) / per) : 0);
  }
  return out;
}

}  // namespace

std::string KvLine(const RunModel& m, const model::Session& s) {
  std::string line = StrFormat("KV cache %s, %d tokens, %s", model::KvTypesName(s.kv_types()).c_str(), s.ctx(),
                               FormatBytes(s.kv_bytes()).c_str());
  const auto max = MaxContexts(m, s);
  if (!max.empty()) {
    line += "; the budget holds up to";
    for (size_t i = 0; i < max.size(); ++i) {
      line += StrFormat("%s %lld tokens in %s", i ? "," : "", static_cast<long long>(max[i].second),
                        max[i].first.c_str());
    }
  }
  return line;
}

nlohmann::json KvJson(const RunModel& m, const model::Session& s) {
  nlohmann::json max = nlohmann::json::object();
  for (const auto& [name, tokens] : MaxContexts(m, s)) max[name] = tokens;
  return {{"types", model::KvTypesName(s.kv_types())},
          {"ctx", s.ctx()},
          {"bytes", s.kv_bytes()},
          {"bytes_per_token", model::KVCache::BytesPerPosition(s.model().config(), s.kv_types())},
          {"max_ctx", max.empty() ? nlohmann::json() : max}};
}

nlohmann::json MemoryJson(const RunModel& m) {
  if (!m.streaming) return nullptr;
  const model::MemoryPlan& p = m.streaming->plan();
  const std::string& dev = m.streaming->device().name();
  return {{"budget", p.budget == UINT64_MAX ? nlohmann::json(nullptr) : nlohmann::json(p.budget)},
          {"source", m.memory_source},
          {"storage", dev.substr(0, dev.find(':'))}};
}

Result<RunModel> LoadRunModel(const ModelFlags& mf, const StreamingFlags& f) {
  RunModel r;
  r.expert_bias = static_cast<float>(f.expert_bias);
  if (!IsPackFile(mf.model)) {
    if (!f.memory.empty()) {
      return Status::InvalidArgument(
          StrFormat("--memory needs a weir pack; %s is not one (make one with `weir pack -m %s -o "
                    "%s`)",
                    mf.model.c_str(), mf.model.c_str(), PackPathFor(mf.model).c_str()));
    }
    WEIR_RETURN_IF_ERROR(CheckFitsInMemory(mf));
    WEIR_ASSIGN_OR_RETURN(r.resident, LoadModel(mf));
    return r;
  }
  model::StreamingConfig c;
  if (!f.memory.empty()) {
    auto b = ParseBytes(f.memory);
    if (!b.ok()) return b.status().WithContext("--memory");
    c.memory_budget = *b;
    r.memory_source = "--memory";
  } else if (std::optional<uint64_t> limit = CgroupMemoryLimit()) {
    const uint64_t headroom = CgroupHeadroomBytes(*limit);
    c.memory_budget = *limit - headroom;
    r.memory_source = StrFormat("cgroup limit %s less %s headroom", FormatBytes(*limit).c_str(),
                                FormatBytes(headroom).c_str());
  } else {
    r.memory_source = "none: no --memory and no cgroup limit";
  }
  c.device.kind = f.storage;
  c.device.profile = f.profile;
  c.device.queue_depth = static_cast<uint32_t>(f.queue_depth);
  c.stream.policy = f.policy;
  c.count_process = f.memory_scope == "process";  // streaming_model.h
  c.stream.prefetch_layers = f.prefetch;
  c.stream.record_trace = f.record_trace;
  c.stream.partitions = f.partitions;
  c.stream.stream_attention = !f.static_attention;
  const std::optional<model::SpanAhead> ahead = model::ParseSpanAhead(f.span_ahead);
  if (!ahead) {
    return Status::InvalidArgument("--span-ahead " + f.span_ahead +
                                   ": expected off, token, layer or both");
  }
  c.stream.span_read_ahead = *ahead;
  c.stream.block_bytes = 0;  // auto: by the pack's layout (StreamingModel::Open)
  if (!f.block.empty()) {
    auto block = ParseBytes(f.block);
    if (!block.ok()) return block.status().WithContext("--block");
    if (*block == 0) return Status::InvalidArgument("--block 0: the cached unit must be 4 KiB or more");
    c.stream.block_bytes = static_cast<size_t>(*block);
  }
  if (f.policy == "belady") {
    return Status::InvalidArgument(
        "--policy belady replays a recorded trace of block accesses; it is available to the "
        "library and tests (StreamingOptions::policy_options), not from the command line");
  }
  WEIR_ASSIGN_OR_RETURN(r.streaming, model::StreamingModel::Open(mf.model, c));
  return r;
}

std::string FormatStreamStats(const model::StreamStats& s) {
  // The stall split by what was waited for, when there was a wait.
  const std::string split =
      s.stall_seconds > 0
          ? StrFormat(" (attention %.2f, mlp %.2f, input columns %.2f, span records %.2f)",
                      s.stall_attention_seconds * 1e3, s.stall_mlp_seconds * 1e3,
                      s.stall_input_seconds * 1e3, s.stall_records_seconds * 1e3)
          : std::string();
  std::string out =
      StrFormat("storage %s (ahead %s), cache %s, hit %.1f%%, stall %.2f ms%s, overlap %.0f%%",
                FormatBytes(s.storage_bytes).c_str(), FormatBytes(s.prefetched_bytes).c_str(),
                FormatBytes(s.cache_bytes).c_str(), 100.0 * s.hit_rate(), s.stall_seconds * 1e3,
                split.c_str(), 100.0 * s.overlap());
  if (s.embedding_reads > 0) out += ", embedding rows " + FormatBytes(s.embedding_bytes);
  if (s.records_ahead > 0) {
    out += StrFormat(", span records %llu read, %llu ahead (%.1f%% of those kept)",
                     static_cast<unsigned long long>(s.records_read),
                     static_cast<unsigned long long>(s.records_ahead),
                     100.0 * static_cast<double>(s.records_ahead_used) /
                         static_cast<double>(s.records_ahead));
  }
  if (s.expert_uses > 0) {
    out += StrFormat(", experts %llu used, %.1f%% cached or read ahead",
                     static_cast<unsigned long long>(s.expert_uses),
                     100.0 * static_cast<double>(s.expert_hits) / static_cast<double>(s.expert_uses));
    if (s.down_uses > 0) {
      out += StrFormat(", W_down cached for %.1f%% of them",
                       100.0 * static_cast<double>(s.down_hits) / static_cast<double>(s.down_uses));
    }
    if (s.experts_chosen_predicted > 0) {
      out += StrFormat(", prediction recall %.1f%%",
                       100.0 * static_cast<double>(s.experts_predicted_used) /
                           static_cast<double>(s.experts_chosen_predicted));
    }
  }
  return out;
}

nlohmann::json StreamStatsJson(const model::StreamStats& s, uint64_t tokens) {
  const double n = tokens > 0 ? static_cast<double>(tokens) : 1.0;
  return {{"tokens", tokens},
          {"storage_bytes_per_token", s.storage_bytes / n},
          {"storage_reads_per_token", s.storage_reads / n},
          {"mean_read_bytes", s.storage_reads ? static_cast<double>(s.storage_bytes) / s.storage_reads : 0.0},
          {"prefetched_bytes_per_token", s.prefetched_bytes / n},
          {"transient_bytes_per_token", s.transient_bytes / n},
          {"embedding_bytes_per_token", s.embedding_bytes / n},
          {"cache_bytes_per_token", s.cache_bytes / n},
          {"accessed_bytes_per_token", s.accessed_bytes / n},
          {"hit_rate", s.hit_rate()},
          {"stall_seconds_per_token", s.stall_seconds / n},
          {"stall_split_seconds_per_token",
           {{"attention", s.stall_attention_seconds / n},
            {"mlp", s.stall_mlp_seconds / n},
            {"input_columns", s.stall_input_seconds / n},
            {"span_records", s.stall_records_seconds / n}}},
          {"io_seconds_per_token", s.io_seconds / n},
          // The device reads split by kind: compact record reads (span records, experts'
          // channel records), the rest (cache blocks: read-ahead, demand, transient).
          {"io_split_per_token",
           {{"records",
             {{"bytes", s.record_bytes / n},
              {"reads", s.record_reads / n},
              {"seconds", s.record_io_seconds / n}}},
            {"blocks",
             {{"bytes", (s.storage_bytes - s.record_bytes) / n},
              {"reads", (s.storage_reads - s.record_reads) / n},
              {"seconds", (s.io_seconds - s.record_io_seconds) / n}}}}},
          {"overlap", s.overlap()},
          {"span",
           {{"records_read_per_token", s.records_read / n},
            {"records_ahead_per_token", s.records_ahead / n},
            {"ahead_used", s.records_ahead ? static_cast<double>(s.records_ahead_used) /
                                                 s.records_ahead
                                           : 0.0}}},
          {"experts",
           {{"used_per_token", s.expert_uses / n},
            {"hit_rate", s.expert_uses ? static_cast<double>(s.expert_hits) / s.expert_uses : 0.0},
            // Channel records under a sparsity policy: uses whose W_down was cached.
            {"w_down_hit_rate",
             s.down_uses ? static_cast<double>(s.down_hits) / s.down_uses : 0.0},
            {"w_down_hits_per_token", s.down_hits / n},
            {"predicted_per_token", s.experts_predicted / n},
            {"preloaded_per_token", s.experts_preloaded / n},
            {"prediction_recall", s.experts_chosen_predicted
                                      ? static_cast<double>(s.experts_predicted_used) /
                                            s.experts_chosen_predicted
                                      : 0.0}}}};
}

nlohmann::json StreamTotalsJson(const model::StreamStats& s) {
  return {{"tokens", s.tokens},
          {"block_accesses", s.block_accesses},
          {"block_hits", s.block_hits},
          {"accessed_bytes", s.accessed_bytes},
          {"storage_bytes", s.storage_bytes},
          {"prefetched_bytes", s.prefetched_bytes},
          {"transient_bytes", s.transient_bytes}};
}

nlohmann::json MemoryPlanJson(const model::MemoryPlan& p) {
  return {{"budget", p.budget},
          {"minimum", p.minimum()},
          {"static", p.static_bytes},
          {"session", p.session_bytes},
          {"streamer", p.streamer_bytes},
          {"io", p.io_bytes},
          {"policy", p.policy_bytes},
          {"cache", p.cache_bytes},
          {"cache_staging", p.staging_bytes},
          {"w_down_copy", p.down_copy_bytes},
          {"w_down_copies_fit", p.down_copies_fit},
          {"w_down_copies", p.down_copies_total},
          {"streamed", p.streamed_bytes},
          {"process", p.process_bytes},
          {"span_read_ahead", p.record_ahead_bytes},
          {"reserve_lent", p.reserve_lent_bytes}};
}

uint64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream is(line.substr(6));
      uint64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

}  // namespace weir::tools
