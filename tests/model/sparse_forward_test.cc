// The sparse forward pass against the dense one: at density 1 every policy reproduces dense
// logits exactly; below it the weight traffic falls with the density and the logits stay close.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "format/synth_llama.h"
#include "model/model.h"
#include "model/session.h"
#include "sparsity/policy.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

struct ForwardRun {
  std::vector<float> logits;  // [n, vocab]
  WeightTraffic traffic;
};

ForwardRun Forward(const Model& m, const sparsity::SparsityPolicy* policy, const std::vector<int32_t>& ids,
            ThreadPool* pool) {
  SessionOptions so;
  so.ctx = 64;
  so.n_batch = 8;
  so.sparsity = policy;
  auto s = Session::Create(m, pool, so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  ForwardRun r;
  const int vocab = m.config().vocab_size;
  for (size_t i = 0; i < ids.size(); i += 8) {
    size_t n = std::min<size_t>(8, ids.size() - i);
    auto l = (*s)->Forward(std::span<const int32_t>(ids).subspan(i, n), LogitsFor::kAll);
    EXPECT_TRUE(l.ok());
    r.logits.insert(r.logits.end(), *l, *l + n * vocab);
  }
  r.traffic = (*s)->traffic();
  return r;
}

class SparseForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::TempDir() + "/tiny.gguf";
    auto spec = format::SynthPreset("tiny");
    ASSERT_TRUE(spec.ok());
    ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 7, path_, nullptr).ok());
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
    for (int i = 0; i < 20; ++i) ids_.push_back((i * 37 + 1) % model_->config().vocab_size);
  }
  std::string path_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> ids_;
};

TEST_F(SparseForwardTest, DensityOneEqualsDenseExactly) {
  ThreadPool pool(2);
  ForwardRun dense = Forward(*model_, nullptr, ids_, &pool);
  for (const char* spec : {"dense", "glu:1", "gate:1", "up:1", "topk-all:1", "dip:1", "dip-ca:1"}) {
    auto p = sparsity::ParseSparsity(spec, nullptr);
    ASSERT_TRUE(p.ok()) << spec << ": " << p.status().ToString();
    ForwardRun r = Forward(*model_, p->get(), ids_, &pool);
    ASSERT_EQ(r.logits.size(), dense.logits.size());
    for (size_t i = 0; i < r.logits.size(); ++i) ASSERT_EQ(r.logits[i], dense.logits[i]) << spec << " at " << i;
    EXPECT_DOUBLE_EQ(r.traffic.mlp_density(), 1.0) << spec;
  }
}

TEST_F(SparseForwardTest, TrafficFallsWithDensityAndLogitsStayClose) {
  ThreadPool pool(1);
  ForwardRun dense = Forward(*model_, nullptr, ids_, &pool);
  for (const char* method : {"dip", "topk-all", "glu"}) {
    double prev_density = 1.1;
    for (double d : {0.9, 0.7, 0.5}) {
      auto p = sparsity::ParseSparsity(std::string(method) + ":" + std::to_string(d), nullptr);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      ForwardRun r = Forward(*model_, p->get(), ids_, &pool);
      double achieved = r.traffic.mlp_density();
      EXPECT_LT(achieved, prev_density) << method << " " << d;
      EXPECT_NEAR(achieved, (*p)->info().target_mlp_density, 0.05) << method << " " << d;
      prev_density = achieved;
      // Random-weight logits move, but stay finite and of the dense magnitude.
      double max_abs = 0, max_diff = 0;
      for (size_t i = 0; i < r.logits.size(); ++i) {
        ASSERT_TRUE(std::isfinite(r.logits[i]));
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(dense.logits[i])));
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(r.logits[i] - dense.logits[i])));
      }
      EXPECT_LT(max_diff, max_abs) << method << " " << d;
    }
  }
}

// A policy that prunes nothing but the W_down inputs whose h is exactly zero gives the dense
// result: checks the gathered path against the dense kernels on explicitly zeroed inputs.
TEST_F(SparseForwardTest, GatheredPathMatchesDenseOnZeroedInputs) {
  ThreadPool pool(2);
  auto p = sparsity::ParseSparsity("dip:1,up=1,down=0.999", nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ForwardRun dense = Forward(*model_, nullptr, ids_, &pool);
  ForwardRun r = Forward(*model_, p->get(), ids_, &pool);
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < r.logits.size(); ++i) {
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(dense.logits[i])));
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(r.logits[i] - dense.logits[i])));
  }
  // Dropping the one smallest |h| of 192 per layer changes the logits very little.
  EXPECT_LT(max_diff, 0.05 * max_abs);
}

}  // namespace
}  // namespace weir::model
