// M2Cache's MLP inside a session: with every neuron at F32 it is the dense model; with fewer it
// reads fewer bytes and the ATU units change nothing in the numbers; UQEst on known logits.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "format/synth_llama.h"
#include "m2cache/file_source.h"
#include "m2cache/mix_config.h"
#include "m2cache/store_file.h"
#include "storage/open_device.h"
#include "model/m2cache_weights.h"
#include "model/model.h"
#include "model/session.h"
#include "model/uncertainty.h"
#include "sparsity/policy.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

class M2CacheSessionTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    path_ = testing::TempDir() + "/m2_" + GetParam() + ".gguf";
    auto spec = format::SynthPreset("tiny", GetParam());
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 5, path_, nullptr).ok());
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
    for (int i = 0; i < 24; ++i) ids_.push_back((i * 53 + 3) % model_->config().vocab_size);
  }

  std::vector<float> Logits(const m2cache::M2Weights* w, const std::string& spec, WeightTraffic* traffic,
                            std::string* error = nullptr, m2cache::LayerSource* source = nullptr) {
    SessionOptions so;
    so.m2cache_source = source;
    so.ctx = 64;
    so.n_batch = 8;
    if (w != nullptr) {
      auto c = m2cache::ParseMixConfig(spec);
      EXPECT_TRUE(c.ok());
      so.m2cache = w;
      so.m2cache_config = *c;
    }
    auto s = Session::Create(*model_, &pool_, so);
    if (!s.ok()) {
      if (error) *error = s.status().ToString();
      return {};
    }
    std::vector<float> out;
    const int vocab = model_->config().vocab_size;
    for (size_t i = 0; i < ids_.size(); i += 8) {
      auto l = (*s)->Forward(std::span<const int32_t>(ids_).subspan(i, 8), LogitsFor::kAll);
      EXPECT_TRUE(l.ok());
      out.insert(out.end(), *l, *l + 8 * vocab);
    }
    if (traffic) *traffic = (*s)->traffic();
    return out;
  }

  std::string path_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> ids_;
  ThreadPool pool_{2};
};

TEST_P(M2CacheSessionTest, AllNeuronsAtF32IsTheDenseModel) {
  auto c = m2cache::ParseMixConfig("high=1,low=0,hi=f32,lo=f16,predictor=oracle");
  ASSERT_TRUE(c.ok());
  auto w = BuildM2Weights(*model_, *c, &pool_);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  WeightTraffic dense_t, m2_t;
  const auto dense = Logits(nullptr, "", &dense_t);
  const auto m2 = Logits(w->get(), "high=1,low=0,hi=f32,lo=f16,predictor=oracle", &m2_t);
  ASSERT_EQ(dense.size(), m2.size());
  for (size_t i = 0; i < dense.size(); ++i) ASSERT_NEAR(m2[i], dense[i], 2e-3f * (1 + std::fabs(dense[i]))) << i;
}

// The SSD tier: the store written to a file and streamed under a budget that holds only the
// preload window gives the same logits as the store in DRAM, bit for bit.
TEST_P(M2CacheSessionTest, TheStoreStreamedFromAFileGivesTheSameLogits) {
  auto c = m2cache::ParseMixConfig("high=0.2,low=0.3,rank=8");
  ASSERT_TRUE(c.ok());
  auto w = BuildM2Weights(*model_, *c, &pool_);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::string store = testing::TempDir() + "/m2.m2s";
  ASSERT_TRUE(m2cache::WriteStoreFile(**w, store).ok());
  auto dev = storage::OpenDevice(store, {});
  ASSERT_TRUE(dev.ok());
  auto opened = m2cache::OpenStoreFile(store, dev->get());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto src = m2cache::FileSource::Create(opened->index, dev->get(), {2 * opened->index.max_extent_bytes(), 1});
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const auto resident = Logits(w->get(), "high=0.2,low=0.3,rank=8", nullptr);
  std::string error;
  const auto streamed = Logits(opened->weights.get(), "high=0.2,low=0.3,rank=8", nullptr, &error, src->get());
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(resident.size(), streamed.size());
  for (size_t i = 0; i < resident.size(); ++i) ASSERT_EQ(resident[i], streamed[i]) << i;
  if ((*src)->fixed_layers() < model_->config().n_layers) {
    EXPECT_GT((*src)->stats().reads, 0u);
  }
  // Without a source the weights from a file have no rows to compute from.
  EXPECT_TRUE(Logits(opened->weights.get(), "high=0.2,low=0.3,rank=8", nullptr, &error).empty());
}

TEST_P(M2CacheSessionTest, FewerNeuronsReadFewerBytesAndUnitsChangeNothing) {
  auto c = m2cache::ParseMixConfig("rank=16");
  ASSERT_TRUE(c.ok());
  auto w = BuildM2Weights(*model_, *c, &pool_);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  WeightTraffic a, b, full;
  const auto with_units = Logits(w->get(), "high=0.1,low=0.3,rank=16", &a);
  const auto without = Logits(w->get(), "high=0.1,low=0.3,rank=16,units=off", &b);
  ASSERT_FALSE(with_units.empty());
  EXPECT_EQ(with_units, without);
  const auto all = Logits(w->get(), "high=0.5,low=0.5,rank=16", &full);
  EXPECT_LT(a.mlp_used, full.mlp_used);
  EXPECT_EQ(a.tokens, ids_.size());
}

TEST_P(M2CacheSessionTest, RefusesWhatItCannotRun) {
  auto c = m2cache::ParseMixConfig("rank=8");
  ASSERT_TRUE(c.ok());
  auto w = BuildM2Weights(*model_, *c, &pool_);
  ASSERT_TRUE(w.ok());
  auto policy = sparsity::ParseSparsity("dip:0.5", nullptr);
  ASSERT_TRUE(policy.ok());
  SessionOptions so;
  so.ctx = 32;
  so.m2cache = w->get();
  so.sparsity = policy->get();
  auto s = Session::Create(*model_, &pool_, so);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--sparsity"), std::string::npos) << s.status().ToString();
  std::string error;
  Logits(w->get(), "tier=cuda,rank=8", nullptr, &error);
#ifndef WEIR_HAVE_CUDA
  EXPECT_NE(error.find("without CUDA"), std::string::npos) << error;
#endif
}

INSTANTIATE_TEST_SUITE_P(Archs, M2CacheSessionTest, ::testing::Values("llama", "gemma3", "phi3"));

TEST(UncertaintyTest, IsTheEntropyOfTheGeneratedTokensDistributions) {
  const std::string path = testing::TempDir() + "/uq_tiny.gguf";
  auto spec = format::SynthPreset("tiny");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 9, path, nullptr).ok());
  auto m = Model::Load(path);
  ASSERT_TRUE(m.ok());
  ThreadPool pool(1);
  SessionOptions so;
  so.ctx = 64;
  auto s = Session::Create(**m, &pool, so);
  ASSERT_TRUE(s.ok());
  std::vector<int32_t> text;
  for (int i = 0; i < 40; ++i) text.push_back((i * 7 + 1) % (*m)->config().vocab_size);
  UncertaintyOptions o;
  o.prompts = 2;
  o.prompt_len = 10;
  o.generate = 5;
  auto r = Uncertainty(**s, text, 1, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->scored, 10);
  // The same by hand: prefill BOS + prompt, entropy of softmax, greedy next token.
  double want = 0;
  const int vocab = (*m)->config().vocab_size;
  for (int p = 0; p < 2; ++p) {
    (*s)->Reset();
    std::vector<int32_t> prompt{1};
    prompt.insert(prompt.end(), text.begin() + p * 10, text.begin() + (p + 1) * 10);
    auto logits = (*s)->Prefill(prompt);
    ASSERT_TRUE(logits.ok());
    const float* l = *logits;
    for (int g = 0; g < 5; ++g) {
      double mx = l[0];
      int arg = 0;
      for (int i = 1; i < vocab; ++i) {
        if (l[i] > mx) mx = l[i], arg = i;
      }
      double z = 0;
      for (int i = 0; i < vocab; ++i) z += std::exp(l[i] - mx);
      for (int i = 0; i < vocab; ++i) {
        const double pi = std::exp(l[i] - mx) / z;
        if (pi > 0) want -= pi * std::log(pi);
      }
      if (g == 4) break;
      const int32_t one[1] = {arg};
      auto next = (*s)->Forward(one, LogitsFor::kLast);
      ASSERT_TRUE(next.ok());
      l = *next;
    }
  }
  EXPECT_NEAR(r->sum, want, 1e-6 * want);
  EXPECT_NEAR(r->mean, want / 10, 1e-6 * want);
  o.prompts = 5;  // 50 tokens > 40
  EXPECT_FALSE(Uncertainty(**s, text, 1, o).ok());
  o.prompts = 1;
  o.generate = 60;  // does not fit a context of 64
  EXPECT_FALSE(Uncertainty(**s, text, 1, o).ok());
}

}  // namespace
}  // namespace weir::model
