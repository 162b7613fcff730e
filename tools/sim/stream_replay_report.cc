#include "sim/stream_replay_report.h"

#include <algorithm>
#include <cstdio>

#include "base/units.h"
#include "common/cli.h"
#include "format/trace_reader.h"
#include "format/weir_pack_reader.h"
#include "model/stream_replay.h"

namespace weir::tools {

Result<bool> IsStreamTrace(const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(auto reader, format::TraceReader::Open(path));
  const std::string* source = reader->header().FindMetadata("trace.source");
  return source != nullptr && *source == "streaming";
}

namespace {

nlohmann::json CountsJson(const model::StreamReplayCounts& c) {
  return {{"hits", c.hits},
          {"misses", c.misses},
          {"evictions", c.evictions},
          {"bytes_read", c.bytes_read}};
}

}  // namespace

int StreamReplayMain(const StreamReplayFlags& f, const sim::DeviceProfile& dev) {
  model::StreamReplayOptions o;
  o.policy = f.policy;
  o.memory_budget = f.memory_budget;
  auto r = model::ReplayStreamTrace(f.trace, f.pack, o);
  if (!r.ok()) return Fail("sim", r.status());
  auto pack = format::PackFile::Open(f.pack);
  if (!pack.ok()) return Fail("sim", pack.status());

  // Time per step on the profile. Storage: the replayed bytes read, at the profile's speed for
  // requests of one block (what an on-demand read is). Memory: the blocks used plus the static
  // tensors a token reads (output head, one embedding row, norms). Compute, when the profile
  // has a rate: 2 FLOPs per weight read, per token of the step. Read-ahead off (or a profile
  // without concurrent I/O): the compute waits for every read; otherwise they overlap.
  const format::LlamaConfig& c = pack->config();
  uint64_t static_bytes = 0;
  for (const format::PackTensor& t : pack->static_tensors()) {
    if (t.name == "token_embd.weight") {
      static_bytes += t.nbytes / static_cast<uint64_t>(std::max(1, c.vocab_size));
      if (pack->FindStatic("output.weight") == nullptr) static_bytes += t.nbytes;  // tied
    } else if (t.name.find("attn_") == std::string::npos || !r->options.stream_attention) {
      static_bytes += t.nbytes;  // output head, norms (and attention when it is not streamed)
    }
  }
  const format::PackGroup& g0 = pack->groups().front();
  const double bytes_per_weight =
      static_cast<double>(g0.row_bytes) / static_cast<double>(std::max(1, g0.d_model));
  const double storage_bw = dev.storage_read.At(static_cast<double>(r->options.block_bytes));
  const bool overlap = r->read_ahead && dev.concurrent_io;
  double decode_s = 0, prompt_s = 0;
  uint64_t decode_steps = 0, prompt_tokens = 0, seen_decode = 0;
  for (const model::StreamReplayStep& s : r->steps) {
    uint64_t read = 0;
    for (const format::CacheEvents& e : s.replayed) read += e.bytes_read;
    const double storage = static_cast<double>(read) / storage_bw;
    const double mem_bytes = static_cast<double>(s.accessed_bytes) +
                             static_cast<double>(static_bytes) * s.n_tokens;
    const double memory = mem_bytes / dev.memory_bandwidth;
    const double compute =
        dev.flops_per_s > 0
            ? 2.0 * (mem_bytes / bytes_per_weight) * s.n_tokens / dev.flops_per_s
            : 0.0;
    const double t = overlap ? std::max({storage, memory, compute})
                             : storage + std::max(memory, compute);
    if (s.n_tokens == 1) {
      if (seen_decode++ < static_cast<uint64_t>(f.warmup)) continue;
      decode_s += t;
      ++decode_steps;
    } else {
      prompt_s += t;
      prompt_tokens += s.n_tokens;
    }
  }
  const double decode_tok_s = decode_s > 0 ? decode_steps / decode_s : 0;
  const bool match = r->recorded == r->replayed && r->mismatched_events == 0 &&
                     r->mismatched_masks == 0;

  if (f.json) {
    PrintJson({{"trace", f.trace},
               {"pack", f.pack},
               {"device", dev.name},
               {"policy", r->options.policy},
               {"memory_budget", r->memory_budget},
               {"cache_budget", r->options.cache_budget},
               {"as_recorded", r->as_recorded},
               {"read_ahead", r->read_ahead},
               {"steps", r->steps.size()},
               {"recorded", CountsJson(r->recorded)},
               {"replayed", CountsJson(r->replayed)},
               {"exact_match", match},
               {"mismatched_events", r->mismatched_events},
               {"mismatched_masks", r->mismatched_masks},
               {"first_mismatch", r->first_mismatch},
               {"decode_steps", decode_steps},
               {"decode_seconds", decode_s},
               {"decode_tok_s", decode_tok_s},
               {"prompt_tokens", prompt_tokens},
               {"prompt_seconds", prompt_s}});
    return kExitOk;
  }
  std::printf("replay of %s (%zu steps) through the engine's cache: policy %s, memory budget %s "
              "(cache %s)%s\n\n",
              f.trace.c_str(), r->steps.size(), r->options.policy.c_str(),
              FormatBytes(r->memory_budget).c_str(), FormatBytes(r->options.cache_budget).c_str(),
              r->as_recorded ? ", as recorded" : "");
  std::printf("| counter | recorded | replayed |\n|---|---:|---:|\n");
  const model::StreamReplayCounts& a = r->recorded;
  const model::StreamReplayCounts& b = r->replayed;
  std::printf("| block hits | %llu | %llu |\n", static_cast<unsigned long long>(a.hits),
              static_cast<unsigned long long>(b.hits));
  std::printf("| block misses | %llu | %llu |\n", static_cast<unsigned long long>(a.misses),
              static_cast<unsigned long long>(b.misses));
  std::printf("| evictions | %llu | %llu |\n", static_cast<unsigned long long>(a.evictions),
              static_cast<unsigned long long>(b.evictions));
  std::printf("| bytes read | %llu | %llu |\n\n", static_cast<unsigned long long>(a.bytes_read),
              static_cast<unsigned long long>(b.bytes_read));
  if (match) {
    std::printf("every step, layer and kind matches exactly\n");
  } else {
    std::printf("%llu (step, layer, kind) differ in events, %llu in blocks used; first: %s%s\n",
                static_cast<unsigned long long>(r->mismatched_events),
                static_cast<unsigned long long>(r->mismatched_masks), r->first_mismatch.c_str(),
                r->read_ahead && r->as_recorded
                    ? " (the run read ahead: counts depend on timing; record with --prefetch -1 "
                      "for an exact replay)"
                    : "");
  }
  std::printf("\nestimate on %s: %llu decode steps in %.3f s = %.3f tok/s", dev.name.c_str(),
              static_cast<unsigned long long>(decode_steps), decode_s, decode_tok_s);
  if (prompt_tokens > 0) {
    std::printf("; prompt %llu tokens in %.3f s", static_cast<unsigned long long>(prompt_tokens),
                prompt_s);
  }
  std::printf("\n");
  return kExitOk;
}

}  // namespace weir::tools
