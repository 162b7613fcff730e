// Targets: the OWL spread (weighted mean exactly P, monotone in the outlier ratio, bounded by
// lambda, clamped), and ComputeTargets for every method on a real tiny model's statistics:
// targets average to P (weighted by parameters, or plainly with kUniform) within 0.5%.
#include "prune/targets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "prune/metric.h"
#include "prune_test_util.h"

namespace weir::prune {
namespace {

double WeightedMean(const std::vector<double>& v, const std::vector<double>& w) {
  double n = 0, d = 0;
  for (size_t i = 0; i < v.size(); ++i) n += v[i] * w[i], d += w[i];
  return n / d;
}

TEST(SpreadTest, WeightedMeanIsPMonotoneAndWithinLambda) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> ratio(0.0, 0.05), weight(1.0, 100.0);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t n = 2 + rng() % 60;
    std::vector<double> r(n), w(n);
    for (size_t i = 0; i < n; ++i) r[i] = ratio(rng), w[i] = weight(rng);
    for (double p : {0.1, 0.2, 0.4, 0.6, 0.8}) {
      const double lambda = 0.08;
      auto s = SpreadByOutlierRatio(r, w, p, lambda, 0.99);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_NEAR(WeightedMean(*s, w), p, 1e-9);
      const auto [mn, mx] = std::minmax_element(s->begin(), s->end());
      EXPECT_LE(*mx - *mn, 2 * lambda + 1e-12);
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j) {
          if (r[i] > r[j]) {
            EXPECT_LE((*s)[i], (*s)[j] + 1e-12) << "more outliers must not mean more pruning";
          }
        }
      }
      // Unclamped, the most and least outlier-rich entries are exactly 2*lambda apart.
      EXPECT_NEAR(*mx - *mn, 2 * lambda, 1e-9);
    }
  }
}

TEST(SpreadTest, ZeroEqualRatiosAndClamping) {
  const std::vector<double> r = {0.01, 0.02, 0.03, 0.04}, w = {1, 2, 3, 4};
  auto zero = SpreadByOutlierRatio(r, w, 0.0, 0.08, 0.99);
  ASSERT_TRUE(zero.ok());
  for (double s : *zero) EXPECT_EQ(s, 0.0);
  const std::vector<double> same = {0.02, 0.02, 0.02, 0.02};
  auto flat = SpreadByOutlierRatio(same, w, 0.37, 0.08, 0.99);
  ASSERT_TRUE(flat.ok());
  for (double s : *flat) EXPECT_NEAR(s, 0.37, 1e-12);
  // P = 0.05 with lambda 0.2: the outlier-rich entries would need negative sparsity; they clamp
  // at 0 and the others absorb the difference.
  auto low = SpreadByOutlierRatio(r, w, 0.05, 0.2, 0.99);
  ASSERT_TRUE(low.ok());
  EXPECT_NEAR(WeightedMean(*low, w), 0.05, 1e-9);
  for (double s : *low) EXPECT_GE(s, 0.0);
  EXPECT_EQ(low->back(), 0.0);
  // P = 0.95 with lambda 0.2: capped at max_sparsity 0.97.
  auto high = SpreadByOutlierRatio(r, w, 0.95, 0.2, 0.97);
  ASSERT_TRUE(high.ok());
  EXPECT_NEAR(WeightedMean(*high, w), 0.95, 1e-9);
  for (double s : *high) EXPECT_LE(s, 0.97 + 1e-12);
  EXPECT_NEAR(high->front(), 0.97, 1e-9);
}

TEST(SpreadTest, BadArguments) {
  const std::vector<double> r = {0.01, 0.02}, w = {1, 1};
  for (double p : {-0.1, 1.0, 1.5, std::nan("")}) {
    auto s = SpreadByOutlierRatio(r, w, p, 0.08, 0.99);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("outside [0, 1)"), std::string::npos)
        << s.status().ToString();
  }
  EXPECT_FALSE(SpreadByOutlierRatio(r, w, 0.5, -0.1, 0.99).ok());
  EXPECT_FALSE(SpreadByOutlierRatio(r, std::vector<double>{1}, 0.5, 0.08, 0.99).ok());
  EXPECT_FALSE(SpreadByOutlierRatio(r, std::vector<double>{1, 0}, 0.5, 0.08, 0.99).ok());
  EXPECT_FALSE(SpreadByOutlierRatio(r, w, 0.995, 0.08, 0.99).ok());
  EXPECT_FALSE(CheckTargetFraction(1.0).ok());
  EXPECT_TRUE(CheckTargetFraction(0.0).ok());
}

TEST(SpreadTest, ParseNames) {
  EXPECT_EQ(*ParseTargetMethod("layer"), TargetMethod::kLayer);
  EXPECT_EQ(*ParseTargetMethod("projection"), TargetMethod::kProjection);
  EXPECT_FALSE(ParseTargetMethod("owl").ok());
  EXPECT_EQ(*ParseTargetAverage("uniform"), TargetAverage::kUniform);
  EXPECT_FALSE(ParseTargetAverage("mean").ok());
}

class ComputeTargetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testutil::LoadOrDie(testutil::WriteTinyModel());
    ASSERT_TRUE(model_);
    auto layers = BindProjections(model_->file());
    ASSERT_TRUE(layers.ok());
    layers_ = *layers;
    norms_ = testutil::RandomNorms(model_->config());
    auto stats = ComputeOutlierStats(model_->file(), norms_, 5.0, nullptr);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    stats_ = *stats;
  }
  std::unique_ptr<model::Model> model_;
  std::vector<LayerProjections> layers_;
  ActivationNorms norms_;
  OutlierStats stats_;
};

TEST_F(ComputeTargetsTest, TargetsAverageToPWeightedByParameters) {
  for (TargetMethod m : {TargetMethod::kGlobal, TargetMethod::kLayer, TargetMethod::kProjection}) {
    for (double p : {0.0, 0.2, 0.4, 0.6, 0.8}) {
      auto t = ComputeTargets(m, p, layers_, &stats_, TargetOptions{});
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      // Weighted by parameter count: the fraction of projection parameters pruned is P.
      double pruned = 0, total = 0;
      for (int l = 0; l < t->n_layers(); ++l) {
        for (Projection pr : kAllProjections) {
          pruned += t->at(l, pr) * static_cast<double>(layers_[static_cast<size_t>(l)].params(pr));
          total += static_cast<double>(layers_[static_cast<size_t>(l)].params(pr));
        }
      }
      EXPECT_NEAR(pruned / total, p, 0.005) << TargetMethodName(m) << " P=" << p;
      EXPECT_NEAR(t->Mean(TargetAverage::kParams), p, 1e-9);
    }
  }
}

TEST_F(ComputeTargetsTest, UniformAverageFollowsEq1And2Literally) {
  TargetOptions o;
  o.average = TargetAverage::kUniform;
  auto t = ComputeTargets(TargetMethod::kProjection, 0.5, layers_, &stats_, o);
  ASSERT_TRUE(t.ok());
  // Eq. 2 per layer, then Eq. 1 over layers.
  double mean_of_layers = 0;
  for (int l = 0; l < t->n_layers(); ++l) {
    double pn = 0;
    for (Projection pr : kAllProjections) pn += t->at(l, pr) / kNumProjections;
    mean_of_layers += pn / t->n_layers();
  }
  EXPECT_NEAR(mean_of_layers, 0.5, 0.005);
  // k and v are half the size of q here, so the parameter-weighted mean differs from the plain
  // one unless every target happens to be equal.
  EXPECT_GT(std::fabs(t->Mean(TargetAverage::kParams) - 0.5), 1e-6);
}

TEST_F(ComputeTargetsTest, MethodsShapeTheTargets) {
  auto g = ComputeTargets(TargetMethod::kGlobal, 0.4, layers_, nullptr, TargetOptions{});
  ASSERT_TRUE(g.ok());
  for (int l = 0; l < g->n_layers(); ++l) {
    for (Projection pr : kAllProjections) EXPECT_EQ(g->at(l, pr), 0.4);
  }
  auto lay = ComputeTargets(TargetMethod::kLayer, 0.4, layers_, &stats_, TargetOptions{});
  ASSERT_TRUE(lay.ok());
  for (int l = 0; l < lay->n_layers(); ++l) {
    for (Projection pr : kAllProjections) EXPECT_EQ(lay->at(l, pr), lay->at(l, Projection::kQ));
  }
  // The layer with more layer outliers is pruned less.
  const bool first_richer = stats_.LayerRatio(0) > stats_.LayerRatio(1);
  if (stats_.LayerRatio(0) != stats_.LayerRatio(1)) {
    EXPECT_EQ(lay->at(0, Projection::kQ) < lay->at(1, Projection::kQ), first_richer);
  }
  auto proj = ComputeTargets(TargetMethod::kProjection, 0.4, layers_, &stats_, TargetOptions{});
  ASSERT_TRUE(proj.ok());
  for (int l = 0; l < 2; ++l) {
    for (Projection a : kAllProjections) {
      for (Projection b : kAllProjections) {
        if (stats_.ProjectionRatio(l, a) > stats_.ProjectionRatio(l, b)) {
          EXPECT_LE(proj->at(l, a), proj->at(l, b) + 1e-12);
        }
      }
    }
  }
  // Layer and projection methods need statistics.
  EXPECT_FALSE(ComputeTargets(TargetMethod::kLayer, 0.4, layers_, nullptr, TargetOptions{}).ok());
  EXPECT_FALSE(ComputeTargets(TargetMethod::kGlobal, 1.0, layers_, nullptr, TargetOptions{}).ok());
}

}  // namespace
}  // namespace weir::prune
