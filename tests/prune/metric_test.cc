// Wanda's metric and the outlier counts (Eq. 4 and Eq. 6) against a direct computation over
// whole dequantized matrices; projection binding errors.
#include "prune/metric.h"

#include <gtest/gtest.h>

#include <cmath>

#include "prune_test_util.h"
#include "tensor/quantize.h"

namespace weir::prune {
namespace {

TEST(MetricTest, WandaRow) {
  const float w[4] = {-2.0f, 0.5f, 0.0f, 3.0f}, norm[4] = {1.0f, 4.0f, 9.0f, 0.5f};
  float o[4];
  WandaRow(w, norm, 4, o);
  EXPECT_FLOAT_EQ(o[0], 2.0f);
  EXPECT_FLOAT_EQ(o[1], 2.0f);
  EXPECT_FLOAT_EQ(o[2], 0.0f);
  EXPECT_FLOAT_EQ(o[3], 1.5f);
}

// Reference: every omega of a layer in one vector per projection, means and counts in double.
void CheckAgainstReference(DType type, ThreadPool* pool, int64_t tolerance) {
  auto model = testutil::LoadOrDie(testutil::WriteTinyModel(type));
  ASSERT_TRUE(model);
  const ActivationNorms norms = testutil::RandomNorms(model->config());
  const double alpha = 5.0;
  auto stats = ComputeOutlierStats(model->file(), norms, alpha, pool);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_EQ(stats->n_layers(), 2);
  int64_t total_outliers = 0;
  for (int l = 0; l < 2; ++l) {
    std::vector<std::vector<float>> omega(kNumProjections);
    double layer_sum = 0;
    int64_t layer_n = 0;
    for (Projection p : kAllProjections) {
      const TensorView& w = *model->file().Find(ProjectionTensorName(format::LlamaArch(), l, p));
      const std::vector<float> norm = norms.Norms(l, ProjectionSite(p));
      std::vector<float> row(static_cast<size_t>(w.cols()));
      for (int64_t r = 0; r < w.rows(); ++r) {
        DequantizeRow(w, r, row.data());
        for (int64_t j = 0; j < w.cols(); ++j)
          omega[static_cast<size_t>(p)].push_back(norm[static_cast<size_t>(j)] *
                                                  std::fabs(row[static_cast<size_t>(j)]));
      }
      for (float o : omega[static_cast<size_t>(p)]) layer_sum += o;
      layer_n += w.shape.numel();
    }
    for (Projection p : kAllProjections) {
      const auto& om = omega[static_cast<size_t>(p)];
      double sum = 0;
      for (float o : om) sum += o;
      const double own = alpha * sum / static_cast<double>(om.size()),
                   lay = alpha * layer_sum / static_cast<double>(layer_n);
      int64_t a = 0, b = 0;
      for (float o : om) a += o > own, b += o > lay;
      const ProjectionOutliers& s = stats->at(l, p);
      EXPECT_EQ(s.params, static_cast<int64_t>(om.size()));
      EXPECT_NEAR(s.omega_sum, sum, 1e-9 * sum);
      EXPECT_NEAR(s.outliers, a, tolerance) << "layer " << l << " " << ProjectionName(p);
      EXPECT_NEAR(s.layer_outliers, b, tolerance) << "layer " << l << " " << ProjectionName(p);
      total_outliers += a;
    }
  }
  // The outlier channels of RandomNorms (x20) must produce outliers, or the test checks nothing.
  EXPECT_GT(total_outliers, 0);
}

TEST(MetricTest, OutlierCountsMatchReferenceF32) { CheckAgainstReference(DType::kF32, nullptr, 0); }
TEST(MetricTest, OutlierCountsMatchReferenceQ8Threaded) {
  ThreadPool pool(2);
  CheckAgainstReference(DType::kQ8_0, &pool, 2);
}

TEST(MetricTest, Errors) {
  auto model = testutil::LoadOrDie(testutil::WriteTinyModel());
  ASSERT_TRUE(model);
  const ActivationNorms norms = testutil::RandomNorms(model->config());
  EXPECT_FALSE(ComputeOutlierStats(model->file(), norms, 0.0, nullptr).ok());
  EXPECT_FALSE(ComputeOutlierStats(model->file(), norms, std::nan(""), nullptr).ok());
  // Norms of another shape.
  format::LlamaConfig other = model->config();
  other.d_model = 32;
  auto bad = ComputeOutlierStats(model->file(), ActivationNorms::ForConfig(other), 5.0, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("channels"), std::string::npos) << bad.status().ToString();
  // A model without one of the projections.
  format::ModelFile f = model->file();
  f.tensors.erase("blk.1.ffn_gate.weight");
  auto missing = ComputeOutlierStats(f, norms, 5.0, nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("blk.1.ffn_gate.weight"), std::string::npos)
      << missing.status().ToString();
  // A projection of the wrong shape.
  format::ModelFile g = model->file();
  g.tensors["blk.0.attn_k.weight"] = g.tensors["blk.0.attn_q.weight"];
  auto shape = BindProjections(g);
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("attn_k"), std::string::npos)
      << shape.status().ToString();
}

TEST(ActivationNormsTest, AccumulateAndErrors) {
  auto model = testutil::LoadOrDie(testutil::WriteTinyModel());
  ASSERT_TRUE(model);
  ActivationNorms n = ActivationNorms::ForConfig(model->config());
  EXPECT_EQ(n.width(0, sparsity::Site::kAttnOut), 64);
  EXPECT_EQ(n.width(1, sparsity::Site::kMlpDown), 192);
  std::vector<float> x(64, 0.0f);
  x[3] = 3.0f;
  ASSERT_TRUE(n.Accumulate(1, sparsity::Site::kAttnIn, x.data(), 64).ok());
  x[3] = 4.0f;
  ASSERT_TRUE(n.Accumulate(1, sparsity::Site::kAttnIn, x.data(), 64).ok());
  EXPECT_FLOAT_EQ(n.Norms(1, sparsity::Site::kAttnIn)[3], 5.0f);
  EXPECT_EQ(n.tokens(1, sparsity::Site::kAttnIn), 2);
  EXPECT_FALSE(n.Accumulate(1, sparsity::Site::kMlpDown, x.data(), 64).ok());
  EXPECT_FALSE(n.Accumulate(2, sparsity::Site::kAttnIn, x.data(), 64).ok());
  EXPECT_FALSE(n.SetSumSquares(0, sparsity::Site::kAttnIn, std::vector<double>(64, -1.0)).ok());
  NormObserver obs(&n);
  obs.OnInput(0, sparsity::Site::kMlpDown, x.data(), 64);  // wrong width: remembered
  EXPECT_FALSE(obs.status().ok());
}

}  // namespace
}  // namespace weir::prune
