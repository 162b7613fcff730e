// Continuous batching (Session::DecodeBatch): one decode step of several sessions as one forward
// pass gives each session the logits its own Forward of the same token gives, at different
// positions and prompt lengths, on every architecture family (sliding-window rings that wrap,
// a mixture of experts), on quantized and tiled weights; and what it cannot take is refused
// before anything is computed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "format/synth_llama.h"
#include "model/model.h"
#include "model/session.h"
#include "sparsity/policy.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

std::unique_ptr<Model> TinyModel(const std::string& arch, DType type, bool tiled) {
  const std::string path =
      testing::TempDir() + "/batch_" + arch + "_" + DTypeName(type) + ".gguf";
  auto spec = format::SynthPreset("tiny", arch);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return nullptr;
  EXPECT_TRUE(format::WriteRandomLlamaGguf(*spec, type, 7, path, nullptr).ok());
  format::LoadOptions o;
  if (tiled) {
    o.placement = format::WeightPlacement::kMemory;
    o.tile_linear = true;
  }
  auto m = Model::Load(path, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<Session> NewSession(const Model& m, ThreadPool* pool,
                                    const sparsity::SparsityPolicy* policy = nullptr) {
  SessionOptions so;
  so.ctx = 64;
  so.n_batch = 8;
  so.sparsity = policy;
  auto s = Session::Create(m, pool, so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::vector<int32_t> Ids(int n, int salt, int vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 37 + salt * 11 + 3) % vocab);
  return ids;
}

double RelDiff(const float* a, const float* b, int n) {
  double max_abs = 0, max_diff = 0;
  for (int i = 0; i < n; ++i) {
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(b[i])));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return max_abs > 0 ? max_diff / max_abs : max_diff;
}

using Param = std::tuple<const char*, DType, bool>;  // arch, weight type, tiled in memory
class BatchDecodeTest : public ::testing::TestWithParam<Param> {};

TEST_P(BatchDecodeTest, EqualsEachSessionsOwnForward) {
  const auto [arch, type, tiled] = GetParam();
  std::unique_ptr<Model> m = TinyModel(arch, type, tiled);
  ASSERT_NE(m, nullptr);
  ThreadPool pool(2);
  const int vocab = m->config().vocab_size;
  // Three sequences with prompts of different lengths, so every token of a batch sits at its
  // own position (and, on sliding layers, at its own place in its ring).
  const std::vector<int> prompt_len = {5, 11, 2};
  const int n = static_cast<int>(prompt_len.size());
  std::vector<std::unique_ptr<Session>> batched, alone;
  for (int i = 0; i < n; ++i) {
    batched.push_back(NewSession(*m, &pool));
    alone.push_back(NewSession(*m, &pool));
    ASSERT_NE(batched.back(), nullptr);
    ASSERT_NE(alone.back(), nullptr);
    ASSERT_TRUE(batched.back()->Batchable());
    const std::vector<int32_t> p = Ids(prompt_len[static_cast<size_t>(i)], i, vocab);
    ASSERT_TRUE(batched.back()->Prefill(p).ok());
    ASSERT_TRUE(alone.back()->Prefill(p).ok());
  }
  // Quantized products of one token and of a batch may round differently (the batch's
  // activations are quantized the same way, but sums can run in another order).
  const double tol = type == DType::kF32 ? 1e-5 : 2e-3;
  std::vector<Session*> ptrs;
  for (auto& s : batched) ptrs.push_back(s.get());
  for (int step = 0; step < 9; ++step) {  // the tiny gemma3's window of 4 wraps its rings
    // Every other step leaves the second session out: batches of 3 and of 2.
    std::vector<Session*> now;
    std::vector<int> who;
    for (int i = 0; i < n; ++i) {
      if (i == 1 && step % 2 == 1) continue;
      now.push_back(ptrs[static_cast<size_t>(i)]);
      who.push_back(i);
    }
    std::vector<int32_t> tokens;
    for (int i : who) tokens.push_back((step * 29 + i * 5 + 1) % vocab);
    std::vector<const float*> logits(now.size());
    ASSERT_TRUE(Session::DecodeBatch(now, tokens, logits).ok());
    for (size_t j = 0; j < who.size(); ++j) {
      Session& ref = *alone[static_cast<size_t>(who[j])];
      auto want = ref.Forward(std::span<const int32_t>(&tokens[j], 1), LogitsFor::kLast);
      ASSERT_TRUE(want.ok());
      EXPECT_EQ(now[j]->pos(), ref.pos());
      EXPECT_LT(RelDiff(logits[j], *want, vocab), tol)
          << arch << " step " << step << " session " << who[j];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Archs, BatchDecodeTest,
    ::testing::Values(Param{"llama", DType::kF32, false}, Param{"llama", DType::kQ8_0, false},
                      Param{"llama", DType::kQ4_0, true}, Param{"gemma3", DType::kF32, false},
                      Param{"qwen3", DType::kQ8_0, false}, Param{"mixtral", DType::kF32, false}),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(std::get<0>(info.param)) + "_" + DTypeName(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_tiled" : "");
    });

TEST(BatchDecode, RefusesWhatItCannotTakeBeforeComputing) {
  std::unique_ptr<Model> m = TinyModel("llama", DType::kF32, false);
  ASSERT_NE(m, nullptr);
  ThreadPool pool(2);
  auto a = NewSession(*m, &pool), b = NewSession(*m, &pool);
  ASSERT_TRUE(a->Prefill(Ids(3, 0, m->config().vocab_size)).ok());
  const int32_t toks[2] = {1, 2};
  std::vector<const float*> logits(2);

  Session* same[2] = {a.get(), a.get()};  // one session twice
  EXPECT_FALSE(Session::DecodeBatch(same, toks, logits).ok());

  const int32_t bad[2] = {1, m->config().vocab_size};
  Session* two[2] = {a.get(), b.get()};
  EXPECT_FALSE(Session::DecodeBatch(two, bad, logits).ok());

  auto p = sparsity::ParseSparsity("dip:0.5", nullptr);
  ASSERT_TRUE(p.ok());
  auto sparse = NewSession(*m, &pool, p->get());
  EXPECT_FALSE(sparse->Batchable());
  Session* mixed[2] = {a.get(), sparse.get()};
  Status st = Session::DecodeBatch(mixed, toks, logits);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("sparsity"), std::string::npos) << st.ToString();

  std::unique_ptr<Model> other = TinyModel("qwen2", DType::kF32, false);
  ASSERT_NE(other, nullptr);
  auto c = NewSession(*other, &pool);
  Session* models[2] = {a.get(), c.get()};
  EXPECT_FALSE(Session::DecodeBatch(models, toks, logits).ok());

  std::vector<const float*> one(1);
  EXPECT_FALSE(Session::DecodeBatch(two, toks, one).ok());  // sizes differ
  // Nothing refused moved a position.
  EXPECT_EQ(a->pos(), 3);
  EXPECT_EQ(b->pos(), 0);
  EXPECT_EQ(sparse->pos(), 0);
  EXPECT_TRUE(Session::DecodeBatch(two, toks, logits).ok());
  EXPECT_EQ(a->pos(), 4);
  EXPECT_EQ(b->pos(), 1);
}

}  // namespace
}  // namespace weir::model
