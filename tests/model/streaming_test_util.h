// Helpers shared by the streaming session tests: a small Llama shape, greedy generation through a
// Session (optionally streamed and sparse), bitwise comparison, a pack in memory, and the
// streaming options the tests start from.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "format/synth_llama.h"
#include "model/sampler.h"
#include "model/session.h"
#include "model/streaming_model.h"
#include "sparsity/policy.h"
#include "storage/memory_device.h"
#include "testing/testing.h"

namespace weir::model::streaming_test {

// d_model 64, 4 heads (2 kv), d_ff 160, vocabulary 300, context 64.
inline format::SynthSpec SmallLlama(int n_layers = 3) {
  format::SynthSpec s;
  s.d_model = 64;
  s.n_layers = n_layers;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.d_ff = 160;
  s.vocab_size = 300;
  s.ctx_len = 64;
  return s;
}

// Greedy generation: the logits of every step (a prompt of 5 tokens fed in two forward calls,
// then `steps` tokens) and the session's weight traffic.
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  WeightTraffic traffic;
};

// The session every streamed test decodes with: 64 positions, prompts in batches of 4.
inline SessionOptions SessionFor(StreamingWeights* streamed,
                                 const sparsity::SparsityPolicy* policy = nullptr) {
  SessionOptions so;
  so.ctx = 64;
  so.n_batch = 4;
  so.streamed = streamed;
  so.sparsity = policy;
  return so;
}

inline Result<Trace> Generate(const Model& model, StreamingWeights* mlp,
                              const sparsity::SparsityPolicy* policy, ThreadPool* pool,
                              int steps) {
  SessionOptions so = SessionFor(mlp, policy);
  WEIR_ASSIGN_OR_RETURN(auto s, Session::Create(model, pool, so));
  const int vocab = model.config().vocab_size;
  std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
  Trace t;
  WEIR_ASSIGN_OR_RETURN(const float* l, s->Prefill(prompt));
  for (int i = 0; i < steps; ++i) {
    t.logits.insert(t.logits.end(), l, l + vocab);
    const int32_t tok = Sampler::Argmax(l, vocab);
    t.tokens.push_back(tok);
    WEIR_ASSIGN_OR_RETURN(l, s->Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast));
  }
  t.logits.insert(t.logits.end(), l, l + vocab);
  t.traffic = s->traffic();
  return t;
}

inline bool Same(const Trace& a, const Trace& b) {
  return a.tokens == b.tokens && a.logits.size() == b.logits.size() &&
         std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0;
}

inline std::unique_ptr<storage::BlockDevice> Memory(const std::string& path) {
  return std::make_unique<storage::MemoryDevice>("pack", testing::ReadFile(path));
}

// 4 KiB blocks, lanes of 32 channels, a window of 2 tokens for the window policy.
inline StreamingConfig Config(uint64_t budget, const std::string& policy) {
  StreamingConfig c;
  c.memory_budget = budget;
  c.stream.policy = policy;
  c.stream.block_bytes = 4096;
  c.stream.lane_channels = 32;
  c.stream.policy_options.window_tokens = 2;
  return c;
}

// A sparsity policy from its spec ("" = none, dense).
inline std::unique_ptr<sparsity::SparsityPolicy> Policy(const std::string& spec) {
  if (spec.empty()) return nullptr;
  auto p = sparsity::ParseSparsity(spec, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

// A streamed run: its greedy trace, the memory plan it ran under and its streaming counters.
struct Run {
  Trace trace;
  MemoryPlan plan;
  StreamStats stats;
};

// Runs `pack` under `c` (opened over `device`) with the policy of `spec`, the plan fitted to a
// first session's bytes; checks that the cache stayed within its budget.
inline Result<Run> RunPack(const std::string& pack, std::unique_ptr<storage::BlockDevice> device,
                           const StreamingConfig& c, const std::string& spec, ThreadPool* pool,
                           int steps) {
  auto policy = Policy(spec);
  WEIR_ASSIGN_OR_RETURN(auto sm, StreamingModel::Open(pack, std::move(device), c));
  {
    SessionOptions so = SessionFor(&sm->streamer(), policy.get());
    WEIR_ASSIGN_OR_RETURN(auto probe, Session::Create(sm->model(), pool, so));
    WEIR_RETURN_IF_ERROR(sm->Fit(probe->allocated_bytes()));
  }
  Run r;
  r.plan = sm->plan();
  WEIR_ASSIGN_OR_RETURN(r.trace, Generate(sm->model(), &sm->streamer(), policy.get(), pool, steps));
  r.stats = sm->streamer().stats();
  const storage::CacheStats cs = sm->streamer().cache_stats();
  EXPECT_LE(cs.current_bytes, cs.budget_bytes);
  return r;
}

// The same, dense.
inline Result<Run> RunPack(const std::string& pack, std::unique_ptr<storage::BlockDevice> device,
                           const StreamingConfig& c, ThreadPool* pool, int steps) {
  return RunPack(pack, std::move(device), c, "", pool, steps);
}

// The GGUF itself, every weight in memory, with the policy of `spec`.
inline Result<Trace> RunGguf(const std::string& gguf, const std::string& spec, ThreadPool* pool,
                             int steps) {
  WEIR_ASSIGN_OR_RETURN(auto file, format::LoadModel(gguf));
  WEIR_ASSIGN_OR_RETURN(auto model, Model::FromFile(std::move(file)));
  auto policy = Policy(spec);
  return Generate(*model, nullptr, policy.get(), pool, steps);
}

}  // namespace weir::model::streaming_test
