#include "serve/metrics.h"

#include "base/status.h"

namespace weir::serve {

void Metrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::AddTtft(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_sum_ += seconds;
  ++ttft_count_;
}

void Metrics::AddPrefill(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  prefill_sum_ += seconds;
  ++prefill_count_;
}

void Metrics::AddDecode(double seconds, int tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  decode_sum_ += seconds;
  ++decode_count_;
  decode_tokens_ += static_cast<uint64_t>(tokens);
}

std::string Metrics::Render(const std::string& extra) const {
  std::string s;
  auto metric = [&](const char* name, const char* type, const char* help) {
    s += StrFormat("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  };
  std::lock_guard<std::mutex> lock(mu_);
  metric("weir_requests_total", "counter", "HTTP requests by endpoint and status");
  for (const auto& [key, n] : requests_) {
    s += StrFormat("weir_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", key.first.c_str(),
                   key.second, static_cast<unsigned long long>(n));
  }
  metric("weir_prompt_tokens_total", "counter", "prompt tokens prefilled");
  s += StrFormat("weir_prompt_tokens_total %llu\n",
                 static_cast<unsigned long long>(prompt_tokens.load()));
  metric("weir_completion_tokens_total", "counter", "tokens generated");
  s += StrFormat("weir_completion_tokens_total %llu\n",
                 static_cast<unsigned long long>(completion_tokens.load()));
  metric("weir_cancelled_total", "counter", "requests whose client went away before the end");
  s += StrFormat("weir_cancelled_total %llu\n", static_cast<unsigned long long>(cancelled.load()));
  metric("weir_time_to_first_token_seconds", "summary", "from a request's arrival to its first token");
  s += StrFormat("weir_time_to_first_token_seconds_sum %.6f\nweir_time_to_first_token_seconds_count %llu\n",
                 ttft_sum_, static_cast<unsigned long long>(ttft_count_));
  metric("weir_prefill_seconds", "summary", "time prefilling prompts");
  s += StrFormat("weir_prefill_seconds_sum %.6f\nweir_prefill_seconds_count %llu\n", prefill_sum_,
                 static_cast<unsigned long long>(prefill_count_));
  metric("weir_decode_step_seconds", "summary",
         "time per decode step (one token of every slot in the step's batch)");
  s += StrFormat("weir_decode_step_seconds_sum %.6f\nweir_decode_step_seconds_count %llu\n",
                 decode_sum_, static_cast<unsigned long long>(decode_count_));
  metric("weir_decode_batch_size", "gauge", "tokens per decode step so far (slots batched together)");
  s += StrFormat("weir_decode_batch_size %.3f\n",
                 decode_count_ > 0 ? static_cast<double>(decode_tokens_) / decode_count_ : 0.0);
  metric("weir_decode_tokens_per_second", "gauge", "tokens per second of decode steps so far");
  s += StrFormat("weir_decode_tokens_per_second %.3f\n",
                 decode_sum_ > 0 ? static_cast<double>(decode_tokens_) / decode_sum_ : 0.0);
  metric("weir_slots", "gauge", "slots (--parallel)");
  s += StrFormat("weir_slots %d\n", slots.load());
  metric("weir_slots_busy", "gauge", "slots generating");
  s += StrFormat("weir_slots_busy %d\n", busy.load());
  metric("weir_queue_depth", "gauge", "requests waiting for a slot");
  s += StrFormat("weir_queue_depth %d\n", queued.load());
  return s + extra;
}

}  // namespace weir::serve
