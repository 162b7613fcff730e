// A model whose weights were copied into memory at load computes exactly what the mapped one
// does: prefill and one-token decode logits are bitwise equal for every weight type.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "format/synth_llama.h"
#include "model/model.h"
#include "model/session.h"
#include "sparsity/policy.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

// Logits of a 6-token prefill followed by 4 one-token steps.
std::vector<float> Logits(const Model& m, ThreadPool* pool) {
  SessionOptions so;
  so.ctx = 32;
  so.n_batch = 8;
  auto s = Session::Create(m, pool, so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  const int vocab = m.config().vocab_size;
  std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250};
  std::vector<float> out;
  auto l = (*s)->Forward(prompt, LogitsFor::kAll);
  EXPECT_TRUE(l.ok());
  out.insert(out.end(), *l, *l + prompt.size() * vocab);
  for (int32_t tok : {5, 77, 123, 8}) {
    l = (*s)->Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast);
    EXPECT_TRUE(l.ok());
    out.insert(out.end(), *l, *l + vocab);
  }
  return out;
}

TEST(WeightsPlacementTest, CopiedWeightsGiveTheSameLogits) {
  const std::string path = testing::TempDir() + "/tiny.gguf";
  auto spec = format::SynthPreset("tiny");
  ASSERT_TRUE(spec.ok());
  ThreadPool pool(2);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(DTypeName(t));
    ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, t, 11, path, nullptr).ok());
    auto mapped = Model::Load(path);
    ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
    format::LoadOptions o;
    o.placement = format::WeightPlacement::kMemory;
    auto copied = Model::Load(path, o);
    ASSERT_TRUE(copied.ok()) << copied.status().ToString();
    ASSERT_TRUE((*copied)->file().weights_in_memory);
    ASSERT_FALSE((*mapped)->file().weights_in_memory);
    const std::vector<float> a = Logits(**mapped, &pool), b = Logits(**copied, &pool);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
  }
}

// Tiled weights change only the order of the f32 additions: logits stay within a small relative
// distance of the row-major model's, and greedy decoding picks the same tokens. A sparsity policy
// on a tiled model is refused with an error, not run over misread rows.
TEST(WeightsPlacementTest, TiledWeightsAgreeAndRefuseSparsity) {
  const std::string path = testing::TempDir() + "/tiny.gguf";
  auto spec = format::SynthPreset("tiny");
  ASSERT_TRUE(spec.ok());
  ThreadPool pool(2);
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(DTypeName(t));
    ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, t, 13, path, nullptr).ok());
    format::LoadOptions o;
    o.placement = format::WeightPlacement::kMemory;
    auto rows = Model::Load(path, o);
    o.tile_linear = true;
    auto tiled = Model::Load(path, o);
    ASSERT_TRUE(rows.ok() && tiled.ok());
    if ((*tiled)->file().TiledTensorCount() == 0) GTEST_SKIP() << "no fast tiled product on this CPU";
    const std::vector<float> a = Logits(**rows, &pool), b = Logits(**tiled, &pool);
    ASSERT_EQ(a.size(), b.size());
    const int vocab = (*rows)->config().vocab_size;
    for (size_t s = 0; s < a.size() / vocab; ++s) {
      double diff = 0, norm = 0;
      size_t best_a = 0, best_b = 0;
      for (size_t i = s * vocab; i < (s + 1) * vocab; ++i) {
        diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
        norm = std::max(norm, std::fabs(static_cast<double>(a[i])));
        if (a[i] > a[best_a + s * vocab]) best_a = i - s * vocab;
        if (b[i] > b[best_b + s * vocab]) best_b = i - s * vocab;
      }
      EXPECT_LE(diff, 1e-4 * norm) << "step " << s;
      EXPECT_EQ(best_a, best_b) << "step " << s;
    }
    auto policy = sparsity::ParseSparsity("glu:0.5", nullptr);
    ASSERT_TRUE(policy.ok());
    SessionOptions so;
    so.ctx = 32;
    so.sparsity = policy->get();
    auto s = Session::Create(**tiled, &pool, so);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("tiled"), std::string::npos) << s.status().ToString();
    EXPECT_TRUE(Session::Create(**rows, &pool, so).ok());
  }
}

}  // namespace
}  // namespace weir::model
