// Speculative decoding gives the target's output: greedy, the same tokens as plain decoding for
// every draft kind (n-gram, self under a sparsity policy, a separate model that always agrees,
// one that mostly does not, and chains of them), on a generated tiny model of each architecture
// family (sliding-window rings, QK-norm, a mixture of experts), with penalties, across context
// shifts, resident and streamed from a pack; sampled, the same distribution of tokens (a
// two-sample chi-square that a broken acceptance rule fails); and the draft's proposals are what
// each kind promises.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "format/synth_llama.h"
#include "format/weir_pack_writer.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/session.h"
#include "model/streaming_model.h"
#include "speculative/draft_spec.h"
#include "speculative/model_draft.h"
#include "speculative/ngram_draft.h"
#include "speculative/speculative.h"
#include "storage/memory_device.h"
#include "testing/testing.h"

namespace weir::speculative {
namespace {

std::string TinyGguf(const std::string& arch, DType type, uint64_t seed) {
  const std::string path = testing::TempDir() + "/spec_" + arch + ".gguf";
  auto spec = format::SynthPreset("tiny", arch);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(format::WriteRandomLlamaGguf(*spec, type, seed, path, nullptr).ok());
  return path;
}

std::unique_ptr<model::Model> Load(const std::string& path) {
  auto m = model::Model::Load(path, {});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// A prompt that repeats itself, so that n-gram lookup finds continuations.
std::vector<int32_t> Prompt(int vocab) {
  std::vector<int32_t> p;
  for (int rep = 0; rep < 3; ++rep) {
    for (int i = 0; i < 6; ++i) p.push_back((i * 41 + 7) % vocab);
  }
  return p;
}

struct Output {
  std::vector<int32_t> tokens;
  model::GenerateStats stats;
  SpeculativeStats spec;
};

model::SessionOptions Options(int ctx = 96) {
  model::SessionOptions so;
  so.ctx = ctx;
  so.n_batch = 12;
  return so;
}

Output Plain(const model::Model& m, const model::SessionOptions& so, int n,
             const model::SamplerOptions& sopt, const model::ContextShift& shift = {}) {
  ThreadPool pool(2);
  Output o;
  auto s = model::Session::Create(m, &pool, so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  model::Sampler sampler(m.config().vocab_size, sopt);
  auto st = model::Generate(**s, sampler, Prompt(m.config().vocab_size), n, -1,
                            [&](int32_t t) { o.tokens.push_back(t); return true; }, shift);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (st.ok()) o.stats = *st;
  return o;
}

Output Speculative(const model::Model& m, const model::SessionOptions& so, Draft& draft, int n,
                   const model::SamplerOptions& sopt, const SpeculativeOptions& opt,
                   const model::ContextShift& shift = {}) {
  ThreadPool pool(2);
  Output o;
  auto s = model::Session::Create(m, &pool, so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  model::Sampler sampler(m.config().vocab_size, sopt);
  auto st = GenerateSpeculative(**s, draft, sampler, Prompt(m.config().vocab_size), n, -1,
                                [&](int32_t t) { o.tokens.push_back(t); return true; }, shift, opt,
                                &o.spec);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (st.ok()) o.stats = *st;
  // Every emitted token came from a pass; the passes are fewer than the tokens when drafts hit.
  EXPECT_EQ(o.spec.emitted + 1 + static_cast<uint64_t>(o.stats.context_shifts), o.tokens.size());
  EXPECT_LE(o.spec.accepted, o.spec.drafted);
  return o;
}

model::SamplerOptions Greedy(float presence = 0) {
  model::SamplerOptions s;
  s.temp = 0;
  s.presence_penalty = presence;
  return s;
}

std::unique_ptr<Draft> Make(const std::vector<std::string>& specs, const model::Model& target,
                            const model::SessionOptions& so, ThreadPool* pool) {
  std::vector<DraftSpec> parsed;
  for (const std::string& s : specs) {
    auto d = ParseDraftSpec(s);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    parsed.push_back(*d);
  }
  DraftTarget t{&target, so, pool, nullptr, {}};
  auto d = MakeDraft(parsed, t);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(d).value() : nullptr;
}

class SpeculativeArchTest : public ::testing::TestWithParam<const char*> {};

// Greedy: every draft kind gives the plain run's tokens, at a fixed and an adaptive length.
TEST_P(SpeculativeArchTest, GreedyOutputIsThePlainRunsForEveryDraft) {
  const std::string arch = GetParam();
  const std::string path = TinyGguf(arch, DType::kQ8_0, 5);
  auto m = Load(path);
  ASSERT_NE(m, nullptr);
  // The same file as a draft model agrees always; another seed's model, rarely.
  const std::string other = testing::TempDir() + "/other.gguf";
  {
    auto spec = format::SynthPreset("tiny", arch);
    ASSERT_TRUE(spec.ok());
    ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kQ8_0, 99, other, nullptr).ok());
  }
  const model::SessionOptions so = Options();
  const Output plain = Plain(*m, so, 40, Greedy());
  ASSERT_EQ(plain.tokens.size(), 40u);
  ThreadPool pool(2);
  std::vector<std::vector<std::string>> kinds = {{"ngram:2"}, {"ngram:1"}, {path}, {other},
                                                 {"ngram", path}};
  const bool moe = m->config().n_expert > 0;
  if (!moe) kinds.push_back({"self:dip:0.5"});
  for (const auto& kind : kinds) {
    for (bool adaptive : {true, false}) {
      SCOPED_TRACE(kind.back() + (adaptive ? " adaptive" : " fixed"));
      auto draft = Make(kind, *m, so, &pool);
      ASSERT_NE(draft, nullptr);
      SpeculativeOptions opt;
      opt.draft_max = 6;
      opt.adaptive = adaptive;
      const Output spec = Speculative(*m, so, *draft, 40, Greedy(), opt);
      EXPECT_EQ(spec.tokens, plain.tokens);
      if (kind.size() == 1 && kind[0] == path) {
        // The target as its own draft: every proposal is accepted, K + 1 tokens per pass.
        EXPECT_EQ(spec.spec.accepted, spec.spec.drafted);
        EXPECT_GT(spec.spec.tokens_per_pass(), 4.0);
      }
    }
  }
}

// Penalties change the target's choices with every token; the verify pass must apply them as
// if the tokens had been decoded one by one.
TEST_P(SpeculativeArchTest, GreedyWithPenaltiesAndContextShifts) {
  const std::string arch = GetParam();
  const std::string path = TinyGguf(arch, DType::kF32, 6);
  auto m = Load(path);
  ASSERT_NE(m, nullptr);
  ThreadPool pool(2);
  model::ContextShift shift;
  shift.enabled = true;
  shift.keep = 4;
  const model::SessionOptions so = Options(40);  // the 18-token prompt and 60 tokens shift twice
  const Output plain = Plain(*m, so, 60, Greedy(0.7f), shift);
  ASSERT_GT(plain.stats.context_shifts, 0);
  for (const std::string& kind : {std::string("ngram:3"), path}) {
    SCOPED_TRACE(kind);
    auto draft = Make({kind}, *m, so, &pool);
    ASSERT_NE(draft, nullptr);
    const Output spec = Speculative(*m, so, *draft, 60, Greedy(0.7f), SpeculativeOptions{}, shift);
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_EQ(spec.stats.context_shifts, plain.stats.context_shifts);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, SpeculativeArchTest,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3",
                                           "qwen3moe"),
                         [](const auto& info) { return std::string(info.param); });

// Streamed: the target's MLP read from a pack under a budget of a quarter of what it streams;
// the verify pass reads each block once for all its positions, and the tokens are the plain run's.
TEST(SpeculativeStreamedTest, GreedyFromAPackUnderABudget) {
  for (const char* arch : {"llama", "gemma3"}) {
    SCOPED_TRACE(arch);
    const std::string gguf = TinyGguf(arch, DType::kQ8_0, 8);
    auto src = format::LoadModel(gguf);
    ASSERT_TRUE(src.ok());
    for (format::PackLayout layout : {format::PackLayout::kBundles, format::PackLayout::kColumns}) {
      const std::string pack = testing::TempDir() + "/spec.weir";
      format::PackOptions po;
      po.layout = layout;
      ASSERT_TRUE(format::WritePack(*src, pack, po).ok());
      auto run = [&](bool speculative, std::vector<int32_t>* tokens, SpeculativeStats* sp) {
        model::StreamingConfig c;
        c.memory_budget = UINT64_MAX;
        c.stream.block_bytes = 4096;
        auto probe = model::StreamingModel::Open(
            pack, std::make_unique<storage::MemoryDevice>("pack", testing::ReadFile(pack)), c);
        ASSERT_TRUE(probe.ok()) << probe.status().ToString();
        c.memory_budget = (*probe)->plan().minimum() + (*probe)->plan().streamed_bytes / 4 + (1 << 20);
        auto sm = model::StreamingModel::Open(
            pack, std::make_unique<storage::MemoryDevice>("pack", testing::ReadFile(pack)), c);
        ASSERT_TRUE(sm.ok()) << sm.status().ToString();
        ThreadPool pool(2);
        model::SessionOptions so = Options();
        so.streamed = &(*sm)->streamer();
        auto s = model::Session::Create((*sm)->model(), &pool, so);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        ASSERT_TRUE((*sm)->Fit((*s)->allocated_bytes()).ok());
        model::Sampler sampler((*sm)->model().config().vocab_size, Greedy());
        auto on = [&](int32_t t) { tokens->push_back(t); return true; };
        const auto prompt = Prompt((*sm)->model().config().vocab_size);
        if (!speculative) {
          ASSERT_TRUE(model::Generate(**s, sampler, prompt, 32, -1, on).ok());
          return;
        }
        NgramDraft draft(2);
        auto st = GenerateSpeculative(**s, draft, sampler, prompt, 32, -1, on, {}, {}, sp);
        ASSERT_TRUE(st.ok()) << st.status().ToString();
      };
      std::vector<int32_t> plain, spec;
      SpeculativeStats sp;
      run(false, &plain, nullptr);
      run(true, &spec, &sp);
      EXPECT_EQ(spec, plain) << format::PackLayoutName(layout);
      EXPECT_GT(sp.drafted, 0u);
    }
  }
}

// Sampling: the pairs of tokens (t1, t2) that speculative decoding samples after a fixed
// prompt follow the plain sampler's distribution. t2 goes through Sampler::Verify against a
// draft model of another seed (mostly rejected: the rejection branch) and against the target
// itself (always accepted). Two-sample chi-square over 6,000 seeded runs of each, below the
// 0.1 % critical value (normal approximation, df + 3.09 sqrt(2 df)).
TEST(SpeculativeSamplingTest, TokenPairsFollowThePlainDistribution) {
  format::SynthSpec spec = *format::SynthPreset("tiny", "llama");
  const std::string path = testing::TempDir() + "/sample.gguf", other = testing::TempDir() + "/sample2.gguf";
  ASSERT_TRUE(format::WriteRandomLlamaGguf(spec, DType::kF32, 31, path, nullptr).ok());
  ASSERT_TRUE(format::WriteRandomLlamaGguf(spec, DType::kF32, 32, other, nullptr).ok());
  auto m = Load(path);
  ASSERT_NE(m, nullptr);
  ThreadPool pool(1);
  const model::SessionOptions so = Options(32);
  auto s = model::Session::Create(*m, &pool, so);
  ASSERT_TRUE(s.ok());
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
  const int vocab = m->config().vocab_size;
  constexpr int kRuns = 6000;
  auto sopt = [](uint64_t seed) {
    model::SamplerOptions o;
    o.temp = 0.7f;
    o.top_k = 6;
    o.top_p = 1.0f;
    o.seed = seed;
    return o;
  };
  auto histogram = [&](Draft* draft) {
    std::vector<int> count(static_cast<size_t>(vocab) * vocab, 0);
    for (int run = 0; run < kRuns; ++run) {
      (*s)->Reset();
      model::Sampler sampler(vocab, sopt(1000003ull * run + (draft ? 7 : 0)));
      std::vector<int32_t> out;
      auto on = [&](int32_t t) { out.push_back(t); return true; };
      SpeculativeOptions opt;
      opt.draft_max = 1;
      opt.adaptive = false;
      auto st = draft ? GenerateSpeculative(**s, *draft, sampler, prompt, 2, -1, on, {}, opt, nullptr)
                      : model::Generate(**s, sampler, prompt, 2, -1, on);
      EXPECT_TRUE(st.ok());
      if (out.size() == 2) ++count[static_cast<size_t>(out[0]) * vocab + out[1]];
    }
    return count;
  };
  const std::vector<int> plain = histogram(nullptr);
  for (const std::string& d : {other, path}) {
    SCOPED_TRACE(d);
    auto draft = Make({d}, *m, so, &pool);
    ASSERT_NE(draft, nullptr);
    const std::vector<int> spec_count = histogram(draft.get());
    double chi = 0;
    int cells = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      const double a = plain[i], b = spec_count[i];
      if (a + b == 0) continue;
      chi += (a - b) * (a - b) / (a + b);
      ++cells;
    }
    const int dof = cells - 1;
    ASSERT_GT(dof, 10);
    EXPECT_LT(chi, dof + 3.09 * std::sqrt(2.0 * dof)) << "cells " << cells;
  }
}

TEST(NgramDraftTest, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  NgramDraft d(3);
  std::vector<int32_t> out;
  // "1 2 3 9 | 5 1 2 3 7 8 | 1 2 3": the latest earlier "1 2 3" is followed by 7 8 1 2 3.
  const std::vector<int32_t> seq = {1, 2, 3, 9, 5, 1, 2, 3, 7, 8, 1, 2, 3};
  ASSERT_TRUE(d.Propose(seq, 4, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 1, 2}));
  // A shorter n-gram when the longest has no earlier occurrence: "... 4 3" has none, "3" has.
  ASSERT_TRUE(d.Propose(std::vector<int32_t>{3, 6, 4, 3}, 3, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{6, 4, 3}));
  // Past the end the continuation repeats with the period it found: "5 5" -> 5 5 5 ...
  ASSERT_TRUE(d.Propose(std::vector<int32_t>{8, 5, 5}, 5, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{5, 5, 5, 5, 5}));
  ASSERT_TRUE(d.Propose(std::vector<int32_t>{1, 2, 1, 2}, 5, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 1, 2, 1}));
  // Nothing repeats: no proposal.
  ASSERT_TRUE(d.Propose(std::vector<int32_t>{1, 2, 3, 4}, 4, &out).ok());
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(d.Propose(std::vector<int32_t>{7}, 4, &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(DraftSpecTest, ParsesKindsAndRefusesBadOnes) {
  auto n = ParseDraftSpec("ngram:5");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->kind, DraftSpec::Kind::kNgram);
  EXPECT_EQ(n->ngram, 5);
  EXPECT_EQ(ParseDraftSpec("ngram")->ngram, 3);
  auto s = ParseDraftSpec("self:dip:0.75");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kind, DraftSpec::Kind::kSelf);
  EXPECT_EQ(s->policy, "dip:0.75");
  EXPECT_EQ(ParseDraftSpec("some/model.gguf")->kind, DraftSpec::Kind::kModel);
  for (const char* bad : {"", "ngram:0", "ngram:17", "ngram:x", "self:"}) {
    EXPECT_EQ(ParseDraftSpec(bad).status().code(), Status::Code::kInvalidArgument) << bad;
  }
  auto mtp = ParseDraftSpec("mtp");
  EXPECT_EQ(mtp.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(mtp.status().message().find("multi-token"), std::string::npos);
}

TEST(DraftSpecTest, RefusesADraftModelWithAnotherVocabulary) {
  const std::string target_path = TinyGguf("llama", DType::kF32, 3);
  auto target = Load(target_path);
  ASSERT_NE(target, nullptr);
  auto spec = format::SynthPreset("tiny", "llama");
  ASSERT_TRUE(spec.ok());
  spec->vocab_size += 7;
  const std::string other = testing::TempDir() + "/vocab.gguf";
  ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 3, other, nullptr).ok());
  ThreadPool pool(1);
  DraftTarget t{target.get(), Options(), &pool, nullptr, {}};
  auto d = MakeDraft({*ParseDraftSpec(other)}, t);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(d.status().message().find(std::to_string(spec->vocab_size)), std::string::npos);
  EXPECT_NE(d.status().message().find(std::to_string(target->config().vocab_size)), std::string::npos);
}

TEST(SpeculativeTest, RefusesAZeroDraftLength) {
  const std::string path = TinyGguf("llama", DType::kF32, 3);
  auto m = Load(path);
  ASSERT_NE(m, nullptr);
  ThreadPool pool(1);
  auto s = model::Session::Create(*m, &pool, Options());
  ASSERT_TRUE(s.ok());
  model::Sampler sampler(m->config().vocab_size, Greedy());
  NgramDraft d(3);
  SpeculativeOptions opt;
  opt.draft_max = 0;
  auto st = GenerateSpeculative(**s, d, sampler, Prompt(m->config().vocab_size), 4, -1, nullptr, {}, opt, nullptr);
  EXPECT_EQ(st.status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace weir::speculative
