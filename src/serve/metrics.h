// Metrics: the counters `weir serve` exposes at GET /metrics in Prometheus' text format
// (version 0.0.4): requests by endpoint and status, tokens in and out, time to first token,
// prefill and decode time, slots busy and queue depth. Anything else the tool knows (a streamed
// pack's storage bytes, cache hit rate, resident set against the budget) comes as extra text.
//
// Thread safety: every member is atomic or under the mutex; any thread may update and render.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace weir::serve {

struct Metrics {
  std::atomic<int> slots{0}, busy{0}, queued{0};
  std::atomic<uint64_t> prompt_tokens{0}, completion_tokens{0}, cancelled{0};

  void CountRequest(const std::string& endpoint, int status);
  void AddTtft(double seconds);
  void AddPrefill(double seconds);
  // One decode step that made `tokens` tokens (one per slot in the batch) in `seconds`.
  void AddDecode(double seconds, int tokens = 1);
  // The text of every metric, then `extra` (already in the format).
  std::string Render(const std::string& extra) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  double ttft_sum_ = 0, prefill_sum_ = 0, decode_sum_ = 0;
  uint64_t ttft_count_ = 0, prefill_count_ = 0, decode_count_ = 0, decode_tokens_ = 0;
};

}  // namespace weir::serve
