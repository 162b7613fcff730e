#include "serve/engine.h"

#include <algorithm>
#include <chrono>

namespace weir::serve {

using Clock = std::chrono::steady_clock;

Engine::Engine(TextCodec codec, std::vector<std::unique_ptr<model::Session>> sessions,
               int queue_limit, Metrics* metrics, bool batch_decode)
    : codec_(std::move(codec)), queue_limit_(queue_limit), metrics_(metrics), batch_decode_(batch_decode) {
  for (auto& s : sessions) {
    ctx_ = ctx_ == 0 ? s->ctx() : std::min(ctx_, s->ctx());
    Slot slot;
    slot.session = std::move(s);
    slots_.push_back(std::move(slot));
  }
  metrics_->slots.store(static_cast<int>(slots_.size()));
  worker_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Stop(); }

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !worker_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::optional<ApiError> Engine::Submit(const std::shared_ptr<Job>& job) {
  if (static_cast<int>(job->prompt.size()) + 1 > ctx_) {
    ApiError e;
    e.param = "messages";
    e.message = "the prompt has " + std::to_string(job->prompt.size()) +
                " tokens; the context of a slot holds " + std::to_string(ctx_) + " (-c)";
    return e;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      return ApiError{503, "server_error", "the server is shutting down", ""};
    }
    // Waiting room: the free slots (taken at the worker's next turn) plus the queue.
    const int free_slots = static_cast<int>(slots_.size()) - busy_;
    if (static_cast<int>(queue_.size()) >= queue_limit_ + free_slots) {
      return ApiError{503, "server_error",
                      "all " + std::to_string(slots_.size()) + " slots are busy and " +
                          std::to_string(queue_.size()) + " requests are waiting; retry later",
                      ""};
    }
    job->submitted = Clock::now();
    queue_.push_back(job);
    metrics_->queued.store(static_cast<int>(queue_.size()));
  }
  cv_.notify_all();
  return std::nullopt;
}

void Engine::Finish(Slot& s, const std::string& reason, Status error) {
  std::shared_ptr<Job> job = std::move(s.job);
  s.job.reset();
  s.logits = nullptr;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    job->done = true;
    job->finish_reason = reason;
    job->error = std::move(error);
  }
  job->cv.notify_all();
  metrics_->busy.fetch_sub(1);
  std::lock_guard<std::mutex> lock(mu_);
  --busy_;
}

void Engine::Start(Slot& s) {
  Job& job = *s.job;
  s.sampler = std::make_unique<model::Sampler>(codec_.vocab_size, job.sampling);
  s.session->Reset();
  const Clock::time_point t0 = Clock::now();
  auto logits = s.session->Prefill(job.prompt);
  if (!logits.ok()) {
    s.session->Reset();
    Finish(s, "error", logits.status());
    return;
  }
  metrics_->prompt_tokens.fetch_add(job.prompt.size());
  metrics_->AddPrefill(std::chrono::duration<double>(Clock::now() - t0).count());
  s.logits = *logits;
  s.prev = job.prompt.back();
}

std::optional<int32_t> Engine::Emit(Slot& s) {
  Job& job = *s.job;
  if (job.cancelled.load()) {
    metrics_->cancelled.fetch_add(1);
    Finish(s, "cancelled");
    return std::nullopt;
  }
  const int32_t tok = s.sampler->Sample(s.logits);
  if (codec_.is_stop(tok)) {
    Finish(s, "stop");
    return std::nullopt;
  }
  const std::string piece = codec_.decode(s.prev, tok);
  s.prev = tok;
  bool stop_hit = false;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(job.mu);
    // Only the new piece and the bytes before it that a stop string could span are searched.
    size_t longest = 0;
    for (const std::string& st : job.stop) longest = std::max(longest, st.size());
    const size_t from = job.text.size() > longest ? job.text.size() - longest : 0;
    job.text += piece;
    for (const std::string& st : job.stop) {
      if (job.text.find(st, from) != std::string::npos) stop_hit = true;
    }
    first = job.completion_tokens == 0;
    ++job.completion_tokens;
    if (first) {
      job.ttft_seconds = std::chrono::duration<double>(Clock::now() - job.submitted).count();
    }
  }
  job.cv.notify_all();
  metrics_->completion_tokens.fetch_add(1);
  if (first) metrics_->AddTtft(job.ttft_seconds);
  if (stop_hit) {
    Finish(s, "stop");
    return std::nullopt;
  }
  if (job.completion_tokens >= job.max_tokens || s.session->pos() >= s.session->ctx()) {
    Finish(s, "length");
    return std::nullopt;
  }
  return tok;
}

void Engine::Advance(std::span<Slot* const> slots, std::span<const int32_t> tokens) {
  bool batchable = batch_decode_ && slots.size() > 1;
  for (Slot* s : slots) batchable = batchable && s->session->Batchable();
  size_t done = 0;
  // Batches of at most the first session's n_batch tokens (its buffers hold that many).
  while (batchable && done < slots.size()) {
    const size_t n = std::min(slots.size() - done, static_cast<size_t>(slots[done]->session->n_batch()));
    std::vector<model::Session*> batch;
    for (size_t i = done; i < done + n; ++i) batch.push_back(slots[i]->session.get());
    std::vector<const float*> logits(n);
    const Clock::time_point t0 = Clock::now();
    // DecodeBatch checks everything before it computes: a refusal leaves every cache as it was,
    // and the slots left run one at a time below.
    if (!model::Session::DecodeBatch(batch, tokens.subspan(done, n), logits).ok()) break;
    for (size_t i = 0; i < n; ++i) slots[done + i]->logits = logits[i];
    metrics_->AddDecode(std::chrono::duration<double>(Clock::now() - t0).count(), static_cast<int>(n));
    done += n;
  }
  for (size_t i = done; i < slots.size(); ++i) {
    Slot& s = *slots[i];
    const Clock::time_point t1 = Clock::now();
    auto next = s.session->Forward(tokens.subspan(i, 1), model::LogitsFor::kLast);
    if (!next.ok()) {
      s.session->Reset();
      Finish(s, "error", next.status());
      continue;
    }
    s.logits = *next;
    metrics_->AddDecode(std::chrono::duration<double>(Clock::now() - t1).count());
  }
}

void Engine::Step(Slot& s) {
  const std::optional<int32_t> tok = Emit(s);
  if (!tok) return;
  Slot* one = &s;
  Advance(std::span<Slot* const>(&one, 1), std::span<const int32_t>(&*tok, 1));
}

void Engine::Loop() {
  while (true) {
    std::vector<Slot*> starting;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto idle = [&] {
        for (const Slot& s : slots_) {
          if (s.job) return false;
        }
        return true;
      };
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !idle(); });
      if (stop_) break;
      for (Slot& s : slots_) {
        if (s.job || queue_.empty()) continue;
        s.job = std::move(queue_.front());
        queue_.pop_front();
        metrics_->busy.fetch_add(1);
        ++busy_;
        starting.push_back(&s);
      }
      metrics_->queued.store(static_cast<int>(queue_.size()));
    }
    for (Slot* s : starting) {
      if (s->job->cancelled.load()) {
        metrics_->cancelled.fetch_add(1);
        Finish(*s, "cancelled");
        continue;
      }
      // Prefill, then at once its first token: a request that arrives with others gets its first
      // token after its own prefill, not after every prefill of the batch.
      Start(*s);
      if (s->job && s->logits != nullptr) Step(*s);
      s->stepped = true;
    }
    // One decode step for every busy slot (a slot that has just made its first token waits for
    // the next round): each samples its token, then the tokens run as one batch.
    std::vector<Slot*> stepping;
    std::vector<int32_t> tokens;
    for (Slot& s : slots_) {
      if (s.job && s.logits != nullptr && !s.stepped) {
        if (const std::optional<int32_t> tok = Emit(s)) {
          stepping.push_back(&s);
          tokens.push_back(*tok);
        }
      }
      s.stepped = false;
    }
    if (!stepping.empty()) Advance(stepping, tokens);
  }
  // Shutting down: nothing more is computed.
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
  }
  for (Slot& s : slots_) {
    if (s.job) Finish(s, "error", Status::Internal("the server is shutting down"));
  }
  for (auto& job : left) {
    {
      std::lock_guard<std::mutex> lock(job->mu);
      job->done = true;
      job->finish_reason = "error";
      job->error = Status::Internal("the server is shutting down");
    }
    job->cv.notify_all();
  }
}

}  // namespace weir::serve
