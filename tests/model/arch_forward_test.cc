// The forward pass on the architectures other than Llama (generated tiny models): results do not
// depend on how a prompt is split into forward calls (the sliding layers' KV rings wrap many
// times over 48 tokens), the rings hold window + n_batch - 1 rows, sparsity policies that only
// select columns give the dense logits at density 1 (GeGLU in the sparse MLP), and the
// combinations that would compute the wrong thing are refused. Agreement with an independent
// forward pass is tests/integration/oracle_test.cc's job.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "format/synth_llama.h"
#include "format/weir_pack_writer.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/session.h"
#include "sparsity/policy.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

std::unique_ptr<Model> TinyModel(const std::string& arch, DType type = DType::kF32) {
  const std::string path = testing::TempDir() + "/tiny_" + arch + ".gguf";
  auto spec = format::SynthPreset("tiny", arch);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(format::WriteRandomLlamaGguf(*spec, type, 11, path, nullptr).ok());
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<int32_t> Ids(int n, int vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 53 + 7) % vocab);
  return ids;
}

// Logits [ids, vocab] of every position, fed in calls of `step` tokens.
std::vector<float> AllLogits(const Model& m, const std::vector<int32_t>& ids, int n_batch, int step,
                             ThreadPool* pool, const sparsity::SparsityPolicy* policy = nullptr) {
  SessionOptions so;
  so.ctx = 64;
  so.n_batch = n_batch;
  so.sparsity = policy;
  auto s = Session::Create(m, pool, so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return {};
  std::vector<float> out;
  const int vocab = m.config().vocab_size;
  for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(step)) {
    const size_t n = std::min(ids.size() - i, static_cast<size_t>(step));
    auto l = (*s)->Forward(std::span<const int32_t>(ids).subspan(i, n), LogitsFor::kAll);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) return {};
    out.insert(out.end(), *l, *l + n * vocab);
  }
  return out;
}

using testing::MaxRelDiff;

class ArchForwardTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchForwardTest, SplittingThePromptDoesNotChangeLogits) {
  std::unique_ptr<Model> m = TinyModel(GetParam());
  ASSERT_NE(m, nullptr);
  ThreadPool pool(2);
  const std::vector<int32_t> ids = Ids(48, m->config().vocab_size);  // 12 windows of 4
  const std::vector<float> one = AllLogits(*m, ids, 1, 1, &pool);
  for (auto [n_batch, step] : {std::pair{8, 8}, {8, 3}, {16, 16}, {5, 5}}) {
    const double d = MaxRelDiff(AllLogits(*m, ids, n_batch, step, &pool), one);
    EXPECT_LT(d, 1e-5) << GetParam() << " n_batch " << n_batch << " step " << step;
  }
}

TEST_P(ArchForwardTest, ColumnPoliciesAtDensityOneEqualDense) {
  std::unique_ptr<Model> m = TinyModel(GetParam());
  ASSERT_NE(m, nullptr);
  ThreadPool pool(2);
  const std::vector<int32_t> ids = Ids(20, m->config().vocab_size);
  const std::vector<float> dense = AllLogits(*m, ids, 8, 8, &pool);
  for (const char* spec : {"glu:1", "up:1", "topk-all:1", "dip:1", "dip-ca:1"}) {
    auto p = sparsity::ParseSparsity(spec, nullptr);
    ASSERT_TRUE(p.ok()) << spec << ": " << p.status().ToString();
    const std::vector<float> got = AllLogits(*m, ids, 8, 8, &pool, p->get());
    ASSERT_EQ(got.size(), dense.size()) << spec;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], dense[i]) << spec << " at " << i;
  }
  // Below density 1 the sparse MLP runs (with the architecture's activation) and stays close.
  auto p = sparsity::ParseSparsity("dip:0.7", nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_LT(MaxRelDiff(AllLogits(*m, ids, 8, 8, &pool, p->get()), dense), 0.5) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchForwardTest,
                         ::testing::Values("gemma3", "qwen2", "qwen3", "gemma2", "phi3"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST(SlidingWindowTest, RingsHoldTheWindowPlusABatch) {
  auto spec = format::SynthPreset("tiny", "gemma3");
  ASSERT_TRUE(spec.ok());
  const format::LlamaConfig c = format::SynthConfig(*spec);  // window 4, layers 0-4 sliding
  const uint64_t row = 2ull * c.n_head_kv * c.head_dim * sizeof(float);  // K and V
  // Rings of window + batch - 1 = 11 rows, rounded up to 16 (blocks of 16 positions).
  EXPECT_EQ(KVCache::BytesFor(c, 64, 8), row * (5 * 16 + 64));
  EXPECT_EQ(KVCache::BytesFor(c, 6, 8), row * 6 * 16);  // at most the context, rounded up
  EXPECT_EQ(KVCache::BytesFor(c, 64, 8, KvTypes{DType::kF16, DType::kF16}), row / 2 * (5 * 16 + 64));
  EXPECT_EQ(KVCache::BytesPerPosition(c), row);  // only the global layer grows with the context
  KVCache kv;
  ASSERT_TRUE(kv.Init(c, 64, 8).ok());
  EXPECT_EQ(kv.rows(0), 16);
  EXPECT_EQ(kv.rows(5), 64);
  EXPECT_EQ(kv.keys(0).ring, 16);  // position 16 reuses row 0
  EXPECT_EQ(kv.bytes(), KVCache::BytesFor(c, 64, 8));
}

// gemma2 tiny: layers 0 and 2 slide (window 4), 1 and 3 are global.
TEST(SlidingWindowTest, Gemma2RingsOnEvenLayers) {
  auto spec = format::SynthPreset("tiny", "gemma2");
  ASSERT_TRUE(spec.ok());
  const format::LlamaConfig c = format::SynthConfig(*spec);
  KVCache kv;
  ASSERT_TRUE(kv.Init(c, 64, 8).ok());
  EXPECT_EQ(kv.rows(0), 16);  // 4 + 8 - 1, rounded up to 16
  EXPECT_EQ(kv.rows(1), 64);
  EXPECT_EQ(kv.rows(2), 16);
  EXPECT_EQ(kv.rows(3), 64);
}

// Writes gemma2 tiny with `edit` applied to its spec (same seed, so the same weights).
std::unique_ptr<Model> Gemma2Variant(const std::string& name,
                                     const std::function<void(format::SynthSpec*)>& edit) {
  const std::string path = testing::TempDir() + "/gemma2_" + name + ".gguf";
  auto spec = format::SynthPreset("tiny", "gemma2");
  EXPECT_TRUE(spec.ok());
  edit(&*spec);
  EXPECT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 11, path, nullptr).ok());
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Each of gemma2's switches changes the tiny model's logits well beyond float32 noise (so that
// the oracle test, tests/integration/oracle_test.cc, would see one left out), and the window
// changes only the positions it hides keys from: positions 0-3 see every key either way.
TEST(SlidingWindowTest, Gemma2SoftCapsAndWindowChangeTheLogits) {
  ThreadPool pool(2);
  std::unique_ptr<Model> base = Gemma2Variant("base", [](format::SynthSpec*) {});
  std::unique_ptr<Model> no_attn_cap =
      Gemma2Variant("no_attn_cap", [](format::SynthSpec* s) { s->attn_softcap = 0; });
  std::unique_ptr<Model> no_final_cap =
      Gemma2Variant("no_final_cap", [](format::SynthSpec* s) { s->final_softcap = 0; });
  std::unique_ptr<Model> wide =
      Gemma2Variant("wide", [](format::SynthSpec* s) { s->sliding_window = 512; });
  ASSERT_TRUE(base && no_attn_cap && no_final_cap && wide);
  const int vocab = base->config().vocab_size;
  const std::vector<int32_t> ids = Ids(20, vocab);
  const std::vector<float> want = AllLogits(*base, ids, 8, 8, &pool);
  const double attn_cap = MaxRelDiff(AllLogits(*no_attn_cap, ids, 8, 8, &pool), want);
  const double final_cap = MaxRelDiff(AllLogits(*no_final_cap, ids, 8, 8, &pool), want);
  const std::vector<float> w = AllLogits(*wide, ids, 8, 8, &pool);
  const size_t first4 = 4 * static_cast<size_t>(vocab);
  EXPECT_EQ(std::vector<float>(w.begin(), w.begin() + first4),
            std::vector<float>(want.begin(), want.begin() + first4));
  const double window = MaxRelDiff(std::vector<float>(w.begin() + first4, w.end()),
                                   std::vector<float>(want.begin() + first4, want.end()));
  std::printf("[gemma2] without attention cap %.3g, without final cap %.3g, window 512 %.3g\n",
              attn_cap, final_cap, window);
  // Measured (seed 11): 1.2e-2, 0.42, 1.2; float32 rounding moves them by ~1e-6.
  EXPECT_GT(attn_cap, 3e-3);
  EXPECT_GT(final_cap, 1e-1);
  EXPECT_GT(window, 1e-1);
}

TEST(SlidingWindowTest, RewindKeepsOnlyWhatTheRingsStillHold) {
  // gemma3 tiny: window 4; with n_batch 4 a sliding layer's ring has 4 + 4 - 1 = 7 rows, rounded
  // up to 16. After 20 positions, going back to p needs positions p-3 .. p-1 intact:
  // p - 3 + 16 >= 20, so p >= 7.
  std::unique_ptr<Model> m = TinyModel("gemma3");
  ASSERT_NE(m, nullptr);
  ThreadPool pool(2);
  const int vocab = m->config().vocab_size;
  std::vector<int32_t> a = Ids(20, vocab);
  for (int p : {19, 18, 10, 8, 7, 6, 3}) {
    SCOPED_TRACE(p);
    SessionOptions so;
    so.ctx = 64;
    so.n_batch = 4;
    auto s = Session::Create(*m, &pool, so);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Prefill(a).ok());
    const bool ok = (*s)->Rewind(p);
    EXPECT_EQ(ok, p >= 7);
    if (!ok) {
      EXPECT_EQ((*s)->pos(), 20);  // unchanged
      continue;
    }
    EXPECT_EQ((*s)->pos(), p);
    // A sequence sharing the first p tokens: the rest prefilled after the rewind gives the logits
    // a fresh session computes for the whole of it.
    std::vector<int32_t> b(a.begin(), a.begin() + p);
    for (int i = 0; i < 9; ++i) b.push_back((i * 31 + 5) % vocab);
    auto got = (*s)->Prefill(std::span<const int32_t>(b).subspan(static_cast<size_t>(p)));
    ASSERT_TRUE(got.ok());
    std::vector<float> got_v(*got, *got + vocab);
    auto fresh = Session::Create(*m, &pool, so);
    ASSERT_TRUE(fresh.ok());
    auto want = (*fresh)->Prefill(b);
    ASSERT_TRUE(want.ok());
    std::vector<float> want_v(*want, *want + vocab);
    EXPECT_LT(MaxRelDiff(got_v, want_v), 1e-4);
  }
  // Without sliding layers every cached position stays: any rewind works.
  std::unique_ptr<Model> llama = TinyModel("qwen3");
  ASSERT_NE(llama, nullptr);
  SessionOptions so;
  so.ctx = 64;
  so.n_batch = 4;
  auto s = Session::Create(*llama, &pool, so);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Prefill(Ids(20, llama->config().vocab_size)).ok());
  EXPECT_TRUE((*s)->Rewind(3));
  EXPECT_FALSE((*s)->Rewind(4));  // past the current position
}

TEST(SlidingWindowTest, GatePredictorIsRefusedOnGeglu) {
  std::unique_ptr<Model> m = TinyModel("gemma3");
  ASSERT_NE(m, nullptr);
  auto p = sparsity::ParseSparsity("gate:0.5", nullptr);
  ASSERT_TRUE(p.ok());
  SessionOptions so;
  so.ctx = 32;
  so.sparsity = p->get();
  auto s = Session::Create(*m, nullptr, so);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(s.status().message().find("|silu(gate)|"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("gelu-tanh"), std::string::npos) << s.status().message();
}

// Phi-3's q, k, v and gate, up are views into its fused tensors; copied into memory (each part
// its own copy) and tiled for the dense kernels (each part tiled on its own), they give the
// mapped file's logits.
TEST(FusedTensorForwardTest, Phi3PartsCopiedAndTiledGiveTheMappedLogits) {
  const std::string path = testing::TempDir() + "/phi3_q8.gguf";
  auto spec = format::SynthPreset("tiny", "phi3");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kQ8_0, 17, path, nullptr).ok());
  auto mapped = Model::Load(path);
  format::LoadOptions o;
  o.placement = format::WeightPlacement::kMemory;
  auto copied = Model::Load(path, o);
  o.tile_linear = true;
  auto tiled = Model::Load(path, o);
  ASSERT_TRUE(mapped.ok() && copied.ok() && tiled.ok());
  ASSERT_TRUE((*copied)->file().weights_in_memory);
  // The copy gives each part its own place: q's view is no longer the mapped file's.
  EXPECT_NE((*copied)->file().Find("blk.0.attn_q.weight")->data,
            (*mapped)->file().Find("blk.0.attn_q.weight")->data);
  ThreadPool pool(2);
  const std::vector<int32_t> ids = Ids(12, (*mapped)->config().vocab_size);
  const std::vector<float> want = AllLogits(**mapped, ids, 4, 4, &pool);
  EXPECT_EQ(AllLogits(**copied, ids, 4, 4, &pool), want);
  if ((*tiled)->file().TiledTensorCount() == 0) GTEST_SKIP() << "no fast tiled product on this CPU";
  EXPECT_EQ((*tiled)->file().Find("blk.1.ffn_gate.weight")->layout, Layout::kTiled16);
  EXPECT_LT(MaxRelDiff(AllLogits(**tiled, ids, 4, 4, &pool), want), 1e-4);
}

}  // namespace
}  // namespace weir::model
