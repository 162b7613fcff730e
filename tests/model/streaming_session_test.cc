// A weir pack run through Session with its MLP streamed (StreamingModel): generated tokens and
// logits are bit for bit those of the same pack with everything resident, for every policy,
// budget from the minimum to above the model, and device; close to the source GGUF's (stated
// tolerances); an impossible budget is refused with the minimum; read failures are clean errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/units.h"
#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_reader.h"
#include "format/weir_pack_writer.h"
#include "model/sampler.h"
#include "model/session.h"
#include "model/streaming_model.h"
#include "storage/fault_injecting_device.h"
#include "storage/memory_device.h"
#include "storage/open_device.h"
#include "model/streaming_test_util.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

using streaming_test::Config;
using streaming_test::Generate;
using streaming_test::Memory;
using streaming_test::Same;
using streaming_test::Trace;

struct Files {
  std::string gguf, pack;
};

Files MakeFiles(DType type, int group, int n_layers = 3) {
  Files f;
  const std::string dir = testing::TempDir();
  const format::SynthSpec s = streaming_test::SmallLlama(n_layers);
  f.gguf = dir + "/m.gguf";
  EXPECT_TRUE(format::WriteRandomLlamaGguf(s, type, 5, f.gguf, nullptr).ok());
  auto m = format::LoadModel(f.gguf).value();
  format::PackOptions o;
  o.group_size = group;
  f.pack = dir + "/m.weir";
  EXPECT_TRUE(format::WritePack(m, f.pack, o).ok());
  return f;
}

// Runs the pack under `c` (opened over `device`), planning with the session's bytes.
Result<Trace> RunPack(const std::string& pack, std::unique_ptr<storage::BlockDevice> device,
                      const StreamingConfig& c, ThreadPool* pool, int steps,
                      MemoryPlan* plan = nullptr) {
  WEIR_ASSIGN_OR_RETURN(auto sm, StreamingModel::Open(pack, std::move(device), c));
  // The plan needs the session's allocations; a first session measures them.
  {
    SessionOptions so = streaming_test::SessionFor(&sm->streamer());
    WEIR_ASSIGN_OR_RETURN(auto probe, Session::Create(sm->model(), pool, so));
    WEIR_RETURN_IF_ERROR(sm->Fit(probe->allocated_bytes()));
  }
  if (plan) *plan = sm->plan();
  auto t = Generate(sm->model(), &sm->streamer(), nullptr, pool, steps);
  const storage::CacheStats cs = sm->streamer().cache_stats();
  EXPECT_LE(cs.current_bytes, cs.budget_bytes);
  return t;
}

TEST(StreamingSessionTest, EveryPolicyBudgetAndDeviceMatchesResident) {
  const Files f = MakeFiles(DType::kQ8_0, 1);
  ThreadPool pool(2);
  const int steps = 6;
  auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, steps);
  ASSERT_TRUE(resident.ok()) << resident.status().ToString();
  // The minimum, from the refusal of a budget of 1 byte.
  auto refused = StreamingModel::Open(f.pack, Memory(f.pack), Config(1, "lru"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kOutOfMemory);
  EXPECT_NE(refused.status().message().find("is below the minimum"), std::string::npos)
      << refused.status().ToString();
  MemoryPlan plan;
  ASSERT_TRUE(RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, 1, &plan).ok());
  const uint64_t minimum = plan.minimum(), model_bytes = plan.streamed_bytes + plan.static_bytes;
  // Below the minimum (with the session counted) is refused by Fit, naming the minimum.
  auto below = RunPack(f.pack, Memory(f.pack), Config(minimum - 1, "lru"), &pool, 1);
  ASSERT_FALSE(below.ok());
  EXPECT_NE(below.status().message().find(StrFormat("minimum %s", FormatBytes(minimum).c_str())),
            std::string::npos)
      << below.status().ToString();
  for (const char* policy : {"lru", "lfu", "atu", "window", "mru"}) {
    for (uint64_t budget : {minimum, minimum + model_bytes / 8, minimum + model_bytes / 2,
                            minimum + 2 * model_bytes}) {
      SCOPED_TRACE(std::string(policy) + " budget " + std::to_string(budget));
      auto got = RunPack(f.pack, Memory(f.pack), Config(budget, policy), &pool, steps);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_TRUE(Same(*got, *resident));
    }
  }
  for (const char* kind : {"pread", "direct", "io_uring", "io_uring+direct", "mmap"}) {
    SCOPED_TRACE(kind);
    StreamingConfig c = Config(UINT64_MAX, "lfu");
    c.device.kind = kind;
    auto dev = storage::OpenDevice(f.pack, c.device);
    if (!dev.ok() && dev.status().code() == Status::Code::kUnsupported) continue;  // no io_uring
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    MemoryPlan kind_plan;  // the minimum depends on the device's buffers
    ASSERT_TRUE(RunPack(f.pack, std::move(dev).value(), c, &pool, 1, &kind_plan).ok());
    c.memory_budget = kind_plan.minimum() + model_bytes / 4;
    auto got = RunPack(f.pack, storage::OpenDevice(f.pack, c.device).value(), c, &pool, steps);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(Same(*got, *resident));
  }
}

TEST(StreamingSessionTest, BudgetChangesWhileGenerating) {
  const Files f = MakeFiles(DType::kQ8_0, 1);
  ThreadPool pool(2);
  const int steps = 8;
  auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, steps);
  ASSERT_TRUE(resident.ok());
  auto sm = StreamingModel::Open(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"));
  ASSERT_TRUE(sm.ok()) << sm.status().ToString();
  SessionOptions so = streaming_test::SessionFor(&(*sm)->streamer());
  auto s = Session::Create((*sm)->model(), &pool, so);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*sm)->Fit((*s)->allocated_bytes()).ok());
  const uint64_t minimum = (*sm)->plan().minimum(), streamed = (*sm)->plan().streamed_bytes;
  const uint64_t budgets[] = {minimum + streamed / 2, minimum, minimum + 2 * streamed,
                              minimum + streamed / 5};
  const int vocab = (*sm)->model().config().vocab_size;
  std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
  auto l = (*s)->Prefill(prompt);
  ASSERT_TRUE(l.ok());
  Trace t;
  for (int i = 0; i < steps; ++i) {
    // A new budget every other token; below the minimum is refused and changes nothing.
    if (i % 2 == 0) {
      ASSERT_TRUE((*sm)->SetMemoryBudget(budgets[i / 2]).ok());
      EXPECT_EQ((*sm)->plan().budget, budgets[i / 2]);
      const storage::CacheStats cs = (*sm)->streamer().cache_stats();
      EXPECT_LE(cs.current_bytes, (*sm)->plan().cache_bytes);
      Status below = (*sm)->SetMemoryBudget(minimum - 1);
      EXPECT_EQ(below.code(), Status::Code::kOutOfMemory);
      EXPECT_EQ((*sm)->plan().budget, budgets[i / 2]);
    }
    t.logits.insert(t.logits.end(), *l, *l + vocab);
    const int32_t tok = Sampler::Argmax(*l, vocab);
    t.tokens.push_back(tok);
    l = (*s)->Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
  }
  t.logits.insert(t.logits.end(), *l, *l + vocab);
  EXPECT_TRUE(Same(t, *resident));
}

// Several sessions over one streamer (`weir serve --parallel N` with a pack): their steps
// interleave, each on its own KV cache, and each sequence gets bit for bit the logits it gets
// alone, under a budget that holds both sessions and little cache, for every policy.
TEST(StreamingSessionTest, SessionsTakingTurnsOnOneStreamerEachGetTheirOwnResult) {
  const Files f = MakeFiles(DType::kQ8_0, 1);
  ThreadPool pool(2);
  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 250, 3, 99}, {5, 8, 13}};
  const int steps = 6;
  // Greedy logits of each prompt run alone, every block resident.
  auto run = [&](const StreamingConfig& c, bool together) -> std::vector<std::vector<float>> {
    std::vector<std::vector<float>> out(prompts.size());
    auto sm = StreamingModel::Open(f.pack, Memory(f.pack), c);
    EXPECT_TRUE(sm.ok()) << sm.status().ToString();
    if (!sm.ok()) return {};
    SessionOptions so = streaming_test::SessionFor(&(*sm)->streamer());
    std::vector<std::unique_ptr<Session>> ss;
    uint64_t bytes = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto s = Session::Create((*sm)->model(), &pool, so);
      EXPECT_TRUE(s.ok());
      if (!s.ok()) return {};
      EXPECT_FALSE((*s)->Batchable());  // a streamed MLP follows one token at a time
      bytes += (*s)->allocated_bytes();
      ss.push_back(std::move(s).value());
    }
    Status fit = (*sm)->Fit(bytes);
    EXPECT_TRUE(fit.ok()) << fit.ToString();
    const int vocab = (*sm)->model().config().vocab_size;
    std::vector<const float*> l(prompts.size());
    auto step = [&](size_t i) {
      const int32_t tok = Sampler::Argmax(l[i], vocab);
      out[i].insert(out[i].end(), l[i], l[i] + vocab);
      auto next = ss[i]->Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast);
      EXPECT_TRUE(next.ok()) << next.status().ToString();
      l[i] = next.ok() ? *next : l[i];
    };
    if (together) {  // prefill both, then alternate their steps
      for (size_t i = 0; i < prompts.size(); ++i) l[i] = ss[i]->Prefill(prompts[i]).value();
      for (int t = 0; t < steps; ++t) {
        for (size_t i = 0; i < prompts.size(); ++i) step(i);
      }
    } else {  // one sequence after the other
      for (size_t i = 0; i < prompts.size(); ++i) {
        l[i] = ss[i]->Prefill(prompts[i]).value();
        for (int t = 0; t < steps; ++t) step(i);
      }
    }
    return out;
  };
  const auto alone = run(Config(UINT64_MAX, "lru"), false);
  ASSERT_EQ(alone.size(), prompts.size());
  MemoryPlan plan;
  ASSERT_TRUE(RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, 1, &plan).ok());
  // Room for the second session and an eighth of the streamed weights in the cache.
  const uint64_t small = plan.minimum() + plan.session_bytes + plan.streamed_bytes / 8;
  for (const char* policy : {"lru", "lfu", "atu", "window"}) {
    SCOPED_TRACE(policy);
    const auto together = run(Config(small, policy), true);
    ASSERT_EQ(together.size(), alone.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      ASSERT_EQ(together[i].size(), alone[i].size());
      EXPECT_EQ(std::memcmp(together[i].data(), alone[i].data(), alone[i].size() * sizeof(float)), 0)
          << "sequence " << i;
    }
  }
}

TEST(StreamingSessionTest, AttentionStreamedOrStatic) {
  const Files f = MakeFiles(DType::kQ4_0, 2, 4);
  ThreadPool pool(2);
  auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, 5);
  ASSERT_TRUE(resident.ok()) << resident.status().ToString();
  MemoryPlan streamed, fixed;
  StreamingConfig c = Config(UINT64_MAX, "lru");
  ASSERT_TRUE(RunPack(f.pack, Memory(f.pack), c, &pool, 1, &streamed).ok());
  c.stream.stream_attention = false;
  ASSERT_TRUE(RunPack(f.pack, Memory(f.pack), c, &pool, 1, &fixed).ok());
  // Streaming attention moves its bytes from the static share to the streamed one.
  EXPECT_LT(streamed.static_bytes, fixed.static_bytes);
  EXPECT_GT(streamed.streamed_bytes, fixed.streamed_bytes);
  for (bool attention : {true, false}) {
    const MemoryPlan& plan = attention ? streamed : fixed;
    for (uint64_t extra : {uint64_t{0}, plan.streamed_bytes / 3}) {
      SCOPED_TRACE(std::to_string(attention) + " " + std::to_string(extra));
      StreamingConfig b = Config(plan.minimum() + extra, "lfu");
      b.stream.stream_attention = attention;
      auto got = RunPack(f.pack, Memory(f.pack), b, &pool, 5);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_TRUE(Same(*got, *resident));
    }
  }
}

// With an output head of its own, the embedding table is read a row per token instead of held:
// the static share shrinks by the table, the tokens and logits stay those of the resident run at
// any budget.
TEST(StreamingSessionTest, EmbeddingReadARowAtATime) {
  const Files f = MakeFiles(DType::kQ4_0, 2, 4);
  ThreadPool pool(2);
  auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, 5);
  ASSERT_TRUE(resident.ok()) << resident.status().ToString();
  const format::PackFile pack = format::PackFile::Open(f.pack).value();
  const format::PackTensor* table = pack.FindStatic("token_embd.weight");
  ASSERT_NE(table, nullptr);
  ASSERT_NE(pack.FindStatic("output.weight"), nullptr);  // untied
  MemoryPlan rows, held;
  StreamingConfig c = Config(UINT64_MAX, "lru");
  ASSERT_TRUE(RunPack(f.pack, Memory(f.pack), c, &pool, 1, &rows).ok());
  c.stream.stream_embedding = false;
  ASSERT_TRUE(RunPack(f.pack, Memory(f.pack), c, &pool, 1, &held).ok());
  const uint64_t page = 4096;
  EXPECT_EQ(held.static_bytes - rows.static_bytes, (table->nbytes + page - 1) / page * page);
  for (bool stream : {true, false}) {
    const MemoryPlan& plan = stream ? rows : held;
    for (uint64_t extra : {uint64_t{0}, plan.streamed_bytes / 3}) {
      SCOPED_TRACE(std::to_string(stream) + " " + std::to_string(extra));
      StreamingConfig b = Config(plan.minimum() + extra, "mru");
      b.stream.stream_embedding = stream;
      auto got = RunPack(f.pack, Memory(f.pack), b, &pool, 5);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_TRUE(Same(*got, *resident));
    }
  }
  // A prompt longer than one batch of rows (StreamPlan::kEmbeddingBatchRows) in one call: every
  // position's logits equal those from the held table.
  auto logits_of = [&](bool stream) -> std::vector<float> {
    StreamingConfig b = Config(UINT64_MAX, "lru");
    b.stream.stream_embedding = stream;
    auto m = StreamingModel::Open(f.pack, Memory(f.pack), b);
    EXPECT_TRUE(m.ok());
    if (!m.ok()) return {};
    EXPECT_EQ((*m)->streamer().embedding_streamed(), stream);
    SessionOptions so;
    so.ctx = 64;
    so.n_batch = 48;
    so.streamed = &(*m)->streamer();
    auto session = Session::Create((*m)->model(), &pool, so);
    EXPECT_TRUE(session.ok());
    if (!session.ok()) return {};
    std::vector<int32_t> prompt(45);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % 200);
    auto l = (*session)->Forward(prompt, LogitsFor::kAll);
    EXPECT_TRUE(l.ok());
    if (!l.ok()) return {};
    const size_t n = prompt.size() * static_cast<size_t>((*m)->model().config().vocab_size);
    return std::vector<float>(*l, *l + n);
  };
  const std::vector<float> from_rows = logits_of(true), from_table = logits_of(false);
  ASSERT_FALSE(from_rows.empty());
  EXPECT_EQ(0, std::memcmp(from_rows.data(), from_table.data(), from_rows.size() * sizeof(float)));
  // Attention kept static keeps the table too (nothing is streamed but the MLP).
  StreamingConfig a = Config(UINT64_MAX, "lru");
  a.stream.stream_attention = false;
  auto sm = StreamingModel::Open(f.pack, Memory(f.pack), a);
  ASSERT_TRUE(sm.ok());
  EXPECT_FALSE((*sm)->streamer().embedding_streamed());
}

// Tiled bundles (the default for Q8_0 / Q4_0) and the untiled layout of older packs read the same
// bytes in another order: the same integer block sums, f32 additions in another order.
TEST(StreamingSessionTest, TiledAndUntiledBundlesAgree) {
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(DTypeName(type));
    const Files f = MakeFiles(type, 2);
    auto m = format::LoadModel(f.gguf).value();
    format::PackOptions o;
    o.group_size = 2;
    o.tile_bundles = false;
    const std::string untiled = testing::TempDir() + "/untiled.weir";
    ASSERT_TRUE(format::WritePack(m, untiled, o).ok());
    auto tiled_pack = format::PackFile::Open(f.pack);
    auto untiled_pack = format::PackFile::Open(untiled);
    ASSERT_TRUE(tiled_pack.ok() && untiled_pack.ok());
    ASSERT_TRUE(tiled_pack->groups()[0].tiled);
    ASSERT_FALSE(untiled_pack->groups()[0].tiled);
    ThreadPool pool(2);
    MemoryPlan plan;
    ASSERT_TRUE(RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, 1, &plan).ok());
    // Resident, and the smallest budget (both layouts have the same blocks, so the same plan).
    for (uint64_t budget : {UINT64_MAX, plan.minimum()}) {
      auto a = RunPack(f.pack, Memory(f.pack), Config(budget, "lru"), &pool, 6);
      auto b = RunPack(untiled, Memory(untiled), Config(budget, "lru"), &pool, 6);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << " " << b.status().ToString();
      ASSERT_EQ(a->logits.size(), b->logits.size());
      double err = 0, norm = 0;
      for (size_t i = 0; i < a->logits.size(); ++i) {
        err += (a->logits[i] - b->logits[i]) * (a->logits[i] - b->logits[i]);
        norm += b->logits[i] * b->logits[i];
      }
      EXPECT_LT(std::sqrt(err / norm), 1e-4) << "budget " << budget;
    }
  }
}

TEST(StreamingSessionTest, CloseToTheSourceModel) {
  // The pack's arithmetic differs from the GGUF path only in W_down (column form over W_down^T,
  // requantized for Q8_0/Q4_0): F32 agrees to float rounding (same greedy tokens), quantized
  // types within their quantization noise.
  for (DType type : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(DTypeName(type));
    const Files f = MakeFiles(type, 2);
    ThreadPool pool(2);
    auto gguf = Model::Load(f.gguf);
    ASSERT_TRUE(gguf.ok());
    auto want = Generate(**gguf, nullptr, nullptr, &pool, 6);
    ASSERT_TRUE(want.ok());
    auto got = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, 6);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    double err = 0, norm = 0;
    const size_t first = 300;  // the prompt's logits: same inputs on both sides
    for (size_t i = 0; i < first; ++i) {
      err += (got->logits[i] - want->logits[i]) * (got->logits[i] - want->logits[i]);
      norm += want->logits[i] * want->logits[i];
    }
    const double rel = std::sqrt(err / norm);
    EXPECT_LT(rel, type == DType::kF32 ? 1e-5 : (type == DType::kQ8_0 ? 0.02 : 0.1)) << rel;
    if (type == DType::kF32) {
      EXPECT_EQ(got->tokens, want->tokens);
    }
  }
}

TEST(StreamingSessionTest, ReadFailureIsAnErrorNotWrongTokens) {
  const Files f = MakeFiles(DType::kQ4_0, 1);
  ThreadPool pool(2);
  auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, 6);
  ASSERT_TRUE(resident.ok());
  MemoryPlan plan;
  ASSERT_TRUE(RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, 1, &plan).ok());
  for (uint64_t after : {0, 5, 40, 80, 120}) {
    SCOPED_TRACE(after);
    storage::FaultOptions fo;
    fo.fail_after_reads = after;
    auto dev = std::make_unique<storage::FaultInjectingDevice>(Memory(f.pack), fo);
    auto got = RunPack(f.pack, std::move(dev), Config(plan.minimum() + 20000, "lru"), &pool, 6);
    if (got.ok()) {
      EXPECT_TRUE(Same(*got, *resident));  // the failures came too late to matter
    } else {
      EXPECT_EQ(got.status().code(), Status::Code::kIoError) << got.status().ToString();
    }
  }
}

class RealModels : public ::testing::TestWithParam<const char*> {};

// stories260K (GGUF, adjacent-pair RoPE) and TinyStories-656K as safetensors (rotate-half RoPE:
// the pack permutes q and k rows as the GGUF writer does) give the same greedy tokens packed.
TEST_P(RealModels, GenerateTheSameText) {
  const std::string path = testing::SharedPath(GetParam());
  if (!testing::FileExists(path)) GTEST_SKIP() << path << " absent";
  auto src = format::LoadModel(path);
  ASSERT_TRUE(src.ok());
  const std::string pack = testing::TempDir() + "/s.weir";
  ASSERT_TRUE(format::WritePack(*src, pack, format::PackOptions{}).ok());
  ThreadPool pool(2);
  auto source = Model::Load(path);  // as the source file runs (GGUF or safetensors)
  ASSERT_TRUE(source.ok());
  auto want = Generate(**source, nullptr, nullptr, &pool, 20);
  ASSERT_TRUE(want.ok());
  MemoryPlan plan;
  ASSERT_TRUE(RunPack(pack, Memory(pack), Config(UINT64_MAX, "lru"), &pool, 1, &plan).ok());
  auto got = RunPack(pack, Memory(pack), Config(plan.minimum() + plan.streamed_bytes / 3, "lfu"),
                     &pool, 20);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->tokens, want->tokens);
}

INSTANTIATE_TEST_SUITE_P(Shared, RealModels,
                         ::testing::Values("models/stories260K/stories260K-F32.gguf",
                                           "models/tinystories-656k"));

}  // namespace
}  // namespace weir::model
