// Engine: the generation side of `weir serve`. One worker thread owns every model session (one
// per slot, each with its own KV cache, all over one copy of the weights). Each round it prefills
// the requests that just got a slot, then makes one token for every busy slot: the slots'
// tokens go through the model as one batch (continuous batching, model::Session::DecodeBatch:
// the weights are read once for all of them), or one slot after the other where the sessions
// cannot be batched (a sparsity policy, a streamed pack, M2Cache) or batching is off. Further
// requests wait in a bounded queue (Submit refuses with 503 when it is full).
//
// A Job is one request's generation. The HTTP thread fills its inputs, submits it and then reads
// its output (text so far, done, finish reason) under the job's mutex, waking on its condition
// variable; setting `cancelled` (a client that went away) frees the slot at the next step.
// Stop strings are found here, on the decoded text: the job ends at the first one (the HTTP side
// cuts the text before it).
//
// Thread safety: Submit, Stop and the counters from any thread; everything else on the worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "model/sampler.h"
#include "model/session.h"
#include "serve/api.h"
#include "serve/metrics.h"

namespace weir::serve {

// What the tool provides about the model's text: decoding pieces and the stop tokens.
struct TextCodec {
  std::function<std::string(int32_t prev, int32_t token)> decode;
  std::function<bool(int32_t)> is_stop;  // EOS and the chat template's end-of-turn tokens
  int vocab_size = 0;
};

struct Job {
  // Inputs, set before Submit.
  std::vector<int32_t> prompt;
  int max_tokens = 256;
  model::SamplerOptions sampling;
  std::vector<std::string> stop;

  // Output, under mu.
  std::mutex mu;
  std::condition_variable cv;
  std::string text;           // the decoded reply so far (the HTTP side cuts stop strings)
  bool done = false;
  std::string finish_reason;  // "stop", "length", or "error" (then `error`)
  Status error;
  int completion_tokens = 0;
  double ttft_seconds = 0;    // submit to first token

  std::atomic<bool> cancelled{false};  // set by the HTTP side when its client is gone
  std::chrono::steady_clock::time_point submitted;
};

class Engine {
 public:
  // `sessions`: one per slot (their KV caches are the slots' contexts). queue_limit: requests
  // that may wait for a slot. `metrics` outlives the engine.
  // batch_decode: run the busy slots' decode steps as one batch where the sessions allow.
  Engine(TextCodec codec, std::vector<std::unique_ptr<model::Session>> sessions, int queue_limit,
         Metrics* metrics, bool batch_decode = true);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a job; 503 (with the queue size) when the queue is full, 400 when the prompt does not
  // leave room for one token in a slot's context.
  std::optional<ApiError> Submit(const std::shared_ptr<Job>& job);
  // Ends the worker: running and queued jobs finish with an error.
  void Stop();

  int slots() const { return static_cast<int>(slots_.size()); }
  int context() const { return ctx_; }

 private:
  struct Slot {
    std::unique_ptr<model::Session> session;
    std::unique_ptr<model::Sampler> sampler;
    std::shared_ptr<Job> job;
    const float* logits = nullptr;
    int32_t prev = 0;
    bool stepped = false;  // made its first token this round
  };
  void Loop();
  void Start(Slot& s);  // prefill the slot's new job
  void Step(Slot& s);   // one token of the slot's job: Emit, then Advance
  // Samples the slot's next token from its logits and appends its text to the job; nullopt when
  // the job has ended (stop token or string, length, cancelled).
  std::optional<int32_t> Emit(Slot& s);
  // Runs tokens[i] through slots[i]'s session (one batch where possible) and stores the logits.
  void Advance(std::span<Slot* const> slots, std::span<const int32_t> tokens);
  void Finish(Slot& s, const std::string& reason, Status error = Status::Ok());

  TextCodec codec_;
  std::vector<Slot> slots_;
  int queue_limit_;
  int ctx_ = 0;
  Metrics* metrics_;
  bool batch_decode_ = true;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int busy_ = 0;  // slots with a job
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace weir::serve
