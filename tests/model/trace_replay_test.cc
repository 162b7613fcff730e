// --trace and its replay: a streamed run records per step and layer the blocks it used and its
// cache counters; ReplayStreamTrace drives the engine's own cache through the same steps and,
// with read-ahead off, reproduces every counter exactly, for every policy and budget; the
// recorded totals are the engine's own totals. Neuron traces of a resident run record the MLP
// units the sparsity policy chose.
#include <gtest/gtest.h>

#include <vector>

#include "format/synth_llama.h"
#include "format/trace_reader.h"
#include "format/weir_pack_writer.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/session.h"
#include "model/stream_replay.h"
#include "model/streaming_model.h"
#include "model/streaming_test_util.h"
#include "model/trace_recorder.h"
#include "sparsity/policy.h"
#include "storage/memory_device.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

struct Files {
  std::string gguf, pack, dir;
};

Files MakeFiles(int group) {
  Files f;
  f.dir = testing::TempDir();
  format::SynthSpec s;
  s.d_model = 64;
  s.n_layers = 3;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.d_ff = 160;
  s.vocab_size = 300;
  s.ctx_len = 64;
  f.gguf = f.dir + "/m.gguf";
  EXPECT_TRUE(format::WriteRandomLlamaGguf(s, DType::kQ8_0, 5, f.gguf, nullptr).ok());
  auto m = format::LoadModel(f.gguf).value();
  format::PackOptions o;
  o.group_size = group;
  f.pack = f.dir + "/m.weir";
  EXPECT_TRUE(format::WritePack(m, f.pack, o).ok());
  return f;
}

// The shared streaming test config, recording a trace.
StreamingConfig Config(uint64_t budget, const std::string& policy, int prefetch) {
  StreamingConfig c = streaming_test::Config(budget, policy);
  c.stream.prefetch_layers = prefetch;
  c.stream.record_trace = true;
  return c;
}

// Opens the pack under `c`, records a trace of a prompt of 5 tokens (two forward steps) and
// `steps` greedy tokens into `trace`, and returns the engine's own totals.
Result<StreamStats> RecordRun(const std::string& pack, const StreamingConfig& c,
                              const std::string& trace, int steps, MemoryPlan* plan = nullptr) {
  ThreadPool pool(2);
  auto device = std::make_unique<storage::MemoryDevice>("pack", testing::ReadFile(pack));
  WEIR_ASSIGN_OR_RETURN(auto sm, StreamingModel::Open(pack, std::move(device), c));
  SessionOptions so;
  so.ctx = 64;
  so.n_batch = 4;
  so.streamed = &sm->streamer();
  WEIR_ASSIGN_OR_RETURN(auto s, Session::Create(sm->model(), &pool, so));
  WEIR_RETURN_IF_ERROR(sm->Fit(s->allocated_bytes()));
  if (plan) *plan = sm->plan();
  const format::LlamaConfig& config = sm->model().config();
  WEIR_ASSIGN_OR_RETURN(format::TraceHeader h,
                        StreamTraceHeader(config, sm->streamer(), StreamTraceMetadata(*sm)));
  WEIR_ASSIGN_OR_RETURN(auto rec, TraceRecorder::CreateFile(trace, h, config, &sm->streamer()));
  s->set_observer(rec.get());
  const int vocab = config.vocab_size;
  std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
  WEIR_ASSIGN_OR_RETURN(const float* l, s->Prefill(prompt));
  for (int i = 0; i < steps; ++i) {
    const int32_t tok = Sampler::Argmax(l, vocab);
    WEIR_ASSIGN_OR_RETURN(l, s->Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast));
  }
  WEIR_RETURN_IF_ERROR(rec->Finish());
  EXPECT_EQ(rec->records(), static_cast<uint64_t>(2 + steps));
  return sm->streamer().stats();
}

TEST(TraceReplayTest, ReplayWithoutReadAheadIsExactForEveryPolicyAndBudget) {
  int partial = 0;
  for (int group : {1, 2}) {
    const Files f = MakeFiles(group);
    MemoryPlan plan;
    const std::string probe_trace = f.dir + "/probe.wtrace";
    ASSERT_TRUE(RecordRun(f.pack, Config(UINT64_MAX, "lru", -1), probe_trace, 1, &plan).ok());
    const uint64_t minimum = plan.minimum();
    const uint64_t all = plan.streamed_bytes + minimum + (64 << 10);
    for (const char* policy : {"lru", "lfu", "mru", "atu", "window"}) {
      for (uint64_t budget : {minimum + (24 << 10), minimum + (80 << 10), minimum + (200 << 10),
                              all * 2}) {
        SCOPED_TRACE(StrFormat("group %d, policy %s, budget %llu", group, policy,
                               static_cast<unsigned long long>(budget)));
        const std::string trace = f.dir + "/run.wtrace";
        auto totals = RecordRun(f.pack, Config(budget, policy, -1), trace, 6);
        ASSERT_TRUE(totals.ok()) << totals.status().ToString();
        auto r = ReplayStreamTrace(trace, f.pack, {});
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_TRUE(r->as_recorded);
        EXPECT_FALSE(r->read_ahead);
        ASSERT_EQ(r->steps.size(), 8u);
        EXPECT_EQ(r->steps[0].n_tokens, 4u);
        EXPECT_EQ(r->steps[1].n_tokens, 1u);
        EXPECT_EQ(r->mismatched_events, 0u) << r->first_mismatch;
        EXPECT_EQ(r->mismatched_masks, 0u) << r->first_mismatch;
        EXPECT_EQ(r->replayed, r->recorded);
        // The trace's counters add up to what the engine itself counted over the run.
        EXPECT_EQ(r->recorded.hits, totals->block_hits);
        EXPECT_EQ(r->recorded.hits + r->recorded.misses, totals->block_accesses);
        EXPECT_EQ(r->recorded.bytes_read, totals->storage_bytes);
        EXPECT_GT(r->recorded.hits + r->recorded.misses, 0u);
        if (r->recorded.hits > 0 && r->recorded.misses > 0 && r->recorded.evictions > 0) {
          ++partial;
        }
      }
    }
  }
  // Several runs cache part of the model: hits, misses and evictions all happen.
  EXPECT_GE(partial, 5);
}

TEST(TraceReplayTest, WhatIfBudgetChangesTheCounts) {
  const Files f = MakeFiles(1);
  MemoryPlan plan;
  const std::string trace = f.dir + "/small.wtrace";
  ASSERT_TRUE(RecordRun(f.pack, Config(UINT64_MAX, "lru", -1), f.dir + "/p.wtrace", 1, &plan)
                  .ok());
  const uint64_t small = plan.minimum() + (40 << 10);
  ASSERT_TRUE(RecordRun(f.pack, Config(small, "mru", -1), trace, 6).ok());
  // Replaying at a budget that holds the model reads each block once: fewer bytes, more hits.
  StreamReplayOptions o;
  o.memory_budget = small + plan.streamed_bytes * 2;
  auto big = ReplayStreamTrace(trace, f.pack, o);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_FALSE(big->as_recorded);
  EXPECT_LT(big->replayed.bytes_read, big->recorded.bytes_read);
  EXPECT_GT(big->replayed.hits, big->recorded.hits);
  EXPECT_GT(big->mismatched_events, 0u);
  // The same run under another policy: the replay follows that policy.
  StreamReplayOptions lru;
  lru.policy = "lru";
  auto other = ReplayStreamTrace(trace, f.pack, lru);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->options.policy, "lru");
  EXPECT_NE(other->replayed, other->recorded);
  // A budget below what the plan gives everything but the cache is refused.
  StreamReplayOptions tiny;
  tiny.memory_budget = 1000;
  auto refused = ReplayStreamTrace(trace, f.pack, tiny);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("below"), std::string::npos);
}

TEST(TraceReplayTest, RefusesTracesItCannotReplay) {
  const Files f = MakeFiles(1);
  const Files other = MakeFiles(2);  // same dims, other pack layout (its own file)
  const std::string trace = f.dir + "/t.wtrace";
  ASSERT_TRUE(RecordRun(f.pack, Config(UINT64_MAX, "lru", -1), trace, 2).ok());
  // A neuron trace is not a block trace.
  auto model = Model::Load(f.gguf);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::string neurons = f.dir + "/n.wtrace";
  {
    auto rec = TraceRecorder::CreateFile(neurons, NeuronTraceHeader((*model)->config(), {}),
                                         (*model)->config(), nullptr);
    ASSERT_TRUE(rec.ok());
    ASSERT_TRUE((*rec)->Finish().ok());
  }
  auto r = ReplayStreamTrace(neurons, f.pack, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a block trace"), std::string::npos);
  EXPECT_FALSE(ReplayStreamTrace(f.dir + "/missing.wtrace", f.pack, {}).ok());
  EXPECT_FALSE(ReplayStreamTrace(trace, f.gguf, {}).ok());  // not a pack
}

TEST(TraceReplayTest, NeuronTraceRecordsThePolicysUnits) {
  const Files f = MakeFiles(1);
  auto model = Model::Load(f.gguf);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const format::LlamaConfig& config = (*model)->config();
  ThreadPool pool(2);
  for (const char* spec : {"dense", "glu:0.5"}) {
    SCOPED_TRACE(spec);
    auto policy = sparsity::ParseSparsity(spec, nullptr);
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    SessionOptions so;
    so.ctx = 64;
    so.n_batch = 4;
    so.sparsity = policy->get();
    auto s = Session::Create(**model, &pool, so);
    ASSERT_TRUE(s.ok());
    const std::string path = f.dir + "/neurons.wtrace";
    auto rec = TraceRecorder::CreateFile(path, NeuronTraceHeader(config, {{"sparsity", spec}}),
                                         config, nullptr);
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    (*s)->set_observer(rec->get());
    std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
    ASSERT_TRUE((*s)->Prefill(prompt).ok());
    const int32_t tok = 5;
    ASSERT_TRUE((*s)->Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast).ok());
    ASSERT_TRUE((*rec)->Finish().ok());
    auto reader = format::TraceReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ((*reader)->n_tokens(), 6u);  // one record per token
    EXPECT_EQ(*(*reader)->header().FindMetadata("sparsity"), spec);
    format::TraceToken t;
    uint64_t active = 0, units = 0;
    while (*(*reader)->Next(&t)) {
      for (uint32_t l = 0; l < 3; ++l) {
        active += t.CountActive(l, 0);
        units += static_cast<uint64_t>(config.d_ff);
      }
    }
    if (std::string(spec) == "dense") {
      EXPECT_EQ(active, units);
    } else {
      EXPECT_GT(active, units / 4);
      EXPECT_LT(active, units * 3 / 4);
    }
  }
}

}  // namespace
}  // namespace weir::model
