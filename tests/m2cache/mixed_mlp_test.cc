// The low-rank predictor against known singular values, and the mixed-precision MLP against a
// plain reference computed from the dequantized neuron rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "random_mlp.h"
#include "kernels/ops.h"
#include "m2cache/low_rank_predictor.h"
#include "m2cache/mixed_mlp.h"
#include "m2cache/precision_split.h"
#include "tensor/quantize.h"

namespace weir::m2cache {
namespace {

// Columns of a random [n, k] matrix with orthonormal columns (Gram-Schmidt on Gaussians).
std::vector<double> Orthonormal(int n, int k, std::mt19937* rng) {
  std::normal_distribution<double> g;
  std::vector<double> q(static_cast<size_t>(n * k));
  for (double& v : q) v = g(*rng);
  for (int j = 0; j < k; ++j) {
    for (int i = 0; i < j; ++i) {
      double dot = 0;
      for (int r = 0; r < n; ++r) dot += q[r * k + i] * q[r * k + j];
      for (int r = 0; r < n; ++r) q[r * k + j] -= dot * q[r * k + i];
    }
    double norm = 0;
    for (int r = 0; r < n; ++r) norm += q[r * k + j] * q[r * k + j];
    for (int r = 0; r < n; ++r) q[r * k + j] /= std::sqrt(norm);
  }
  return q;
}

// W = Q1 diag(sigma) Q2ᵀ, [m, n], sigma decaying.
std::vector<float> KnownSpectrum(int m, int n, const std::vector<double>& sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  const int k = static_cast<int>(sigma.size());
  auto q1 = Orthonormal(m, k, &rng), q2 = Orthonormal(n, k, &rng);
  std::vector<float> w(static_cast<size_t>(m * n));
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int t = 0; t < k; ++t) s += q1[i * k + t] * sigma[t] * q2[j * k + t];
      w[static_cast<size_t>(i * n + j)] = static_cast<float>(s);
    }
  }
  return w;
}

// ||W - U A||_F² measured through the predictor on the unit vectors.
double ResidualSquared(const LowRankPredictor& p, const std::vector<float>& w, int m, int n) {
  std::vector<float> e(static_cast<size_t>(n)), t(static_cast<size_t>(p.rank())), g(static_cast<size_t>(m));
  double r = 0;
  for (int j = 0; j < n; ++j) {
    std::fill(e.begin(), e.end(), 0.0f);
    e[static_cast<size_t>(j)] = 1.0f;
    p.PredictGate(e.data(), t.data(), g.data(), nullptr);
    for (int i = 0; i < m; ++i) {
      const double d = g[static_cast<size_t>(i)] - w[static_cast<size_t>(i * n + j)];
      r += d * d;
    }
  }
  return r;
}

TEST(LowRankPredictorTest, ReachesTheTruncatedSvdError) {
  const int m = 96, n = 64;
  std::vector<double> sigma;
  for (int i = 0; i < 64; ++i) sigma.push_back(10.0 * std::pow(0.85, i));
  const auto w = KnownSpectrum(m, n, sigma, 3);
  const TensorView view{DType::kF32, Shape{m, n}, w.data()};
  double total = 0;
  for (double s : sigma) total += s * s;
  for (int rank : {4, 8, 16, 32}) {
    auto p = LowRankPredictor::Fit(view, rank, 1, nullptr);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->rank(), rank);
    double optimal = 0;  // Eckart-Young: the sum of the discarded squared singular values
    for (int i = rank; i < 64; ++i) optimal += sigma[static_cast<size_t>(i)] * sigma[static_cast<size_t>(i)];
    const double got = ResidualSquared(*p, w, m, n);
    // Within 2 % of the optimum, plus the F16 rounding of the factors.
    EXPECT_LE(got, optimal * 1.02 + 1e-5 * total) << "rank " << rank;
    EXPECT_GE(got, optimal * 0.98 - 1e-5 * total) << "rank " << rank;
  }
  // A rank of min(m, n) or more is exact up to F16 rounding; larger ranks are capped.
  auto full = LowRankPredictor::Fit(view, 500, 1, nullptr);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->rank(), 64);
  EXPECT_LE(ResidualSquared(*full, w, m, n), 1e-5 * total);
  EXPECT_EQ(full->bytes(), static_cast<uint64_t>(2 * (64 * 64 + 96 * 64)));
  EXPECT_FALSE(LowRankPredictor::Fit(view, 0, 1, nullptr).ok());
}

TEST(LowRankPredictorTest, ASecondMomentFitsTheWhitenedMatrix) {
  // W' = W · diag(s) has a known spectrum; fitted with inputs of second moment diag(s²) (so
  // L = diag(s)), the predictor's error on inputs s_j e_j is W''s optimal rank-r error.
  const int m = 96, n = 64;
  std::vector<double> sigma;
  for (int i = 0; i < 64; ++i) sigma.push_back(10.0 * std::pow(0.85, i));
  const auto w_scaled = KnownSpectrum(m, n, sigma, 6);
  std::vector<float> scale(n), w(static_cast<size_t>(m * n));
  for (int j = 0; j < n; ++j) scale[j] = j % 7 == 0 ? 20.0f : 0.5f + 0.01f * j;  // outlier channels
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) w[i * n + j] = w_scaled[i * n + j] / scale[j];
  }
  const TensorView view{DType::kF32, Shape{m, n}, w.data()};
  const int rank = 12;
  std::vector<double> moment(static_cast<size_t>(n * n), 0.0);
  for (int j = 0; j < n; ++j) moment[j * n + j] = static_cast<double>(scale[j]) * scale[j];
  auto p = LowRankPredictor::Fit(view, rank, 2, nullptr, moment);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<float> x(n), t(rank), g(m);
  double got = 0, total = 0, optimal = 0;
  for (int i = rank; i < 64; ++i) optimal += sigma[i] * sigma[i];
  for (double v : sigma) total += v * v;
  for (int j = 0; j < n; ++j) {
    std::fill(x.begin(), x.end(), 0.0f);
    x[j] = scale[j];
    p->PredictGate(x.data(), t.data(), g.data(), nullptr);
    for (int i = 0; i < m; ++i) got += (g[i] - w_scaled[i * n + j]) * (g[i] - w_scaled[i * n + j]);
  }
  EXPECT_LE(got, optimal * 1.02 + 1e-4 * total);
  EXPECT_GE(got, optimal * 0.98 - 1e-4 * total);
  // The same fit without the scale is worse on these inputs.
  auto plain = LowRankPredictor::Fit(view, rank, 2, nullptr);
  ASSERT_TRUE(plain.ok());
  double plain_err = 0;
  for (int j = 0; j < n; ++j) {
    std::fill(x.begin(), x.end(), 0.0f);
    x[j] = scale[j];
    plain->PredictGate(x.data(), t.data(), g.data(), nullptr);
    for (int i = 0; i < m; ++i) plain_err += (g[i] - w_scaled[i * n + j]) * (g[i] - w_scaled[i * n + j]);
  }
  EXPECT_GT(plain_err, got * 1.05);
  EXPECT_FALSE(LowRankPredictor::Fit(view, rank, 2, nullptr, std::span<const double>(moment.data(), 3)).ok());
  std::vector<double> not_definite(static_cast<size_t>(n * n), 0.0);
  not_definite[0] = -1.0;
  EXPECT_FALSE(LowRankPredictor::Fit(view, rank, 2, nullptr, not_definite).ok());
}

TEST(LowRankPredictorTest, TheSameSeedGivesTheSameFactors) {
  std::vector<double> sigma{5, 4, 3, 2, 1, 0.5};
  const auto w = KnownSpectrum(64, 32, sigma, 4);
  const TensorView view{DType::kF32, Shape{64, 32}, w.data()};
  ThreadPool pool(2);
  auto a = LowRankPredictor::Fit(view, 4, 7, nullptr);
  auto b = LowRankPredictor::Fit(view, 4, 7, &pool);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(std::memcmp(a->a().data, b->a().data, a->a().nbytes()), 0);
  EXPECT_EQ(std::memcmp(a->u().data, b->u().data, a->u().nbytes()), 0);
}

using m2test::Mlp;
using m2test::RandomMlp;

// y = Σ over the split's neurons of act(g_i) u_i down_i, from the dequantized store rows, in
// double; the split from the given scores by a full sort.
std::vector<double> Reference(const NeuronStore& store, kernels::Glu glu, const std::vector<float>& score,
                              int64_t nh, int64_t nl, const std::vector<float>& x) {
  const LayerNeurons& ln = store.layer(0);
  std::vector<int32_t> order, lists[2];
  SplitByScore(score, nh, nl, &order, &lists[0], &lists[1]);
  std::vector<double> y(static_cast<size_t>(ln.d_model), 0.0);
  std::vector<float> row(static_cast<size_t>(ln.d_model));
  for (int p = 0; p < 2; ++p) {
    for (int32_t i : lists[p]) {
      double g = 0, u = 0;
      DequantizeRow(ln.at[p].gate, i, row.data());
      for (int64_t k = 0; k < ln.d_model; ++k) g += row[k] * x[k];
      DequantizeRow(ln.at[p].up, i, row.data());
      for (int64_t k = 0; k < ln.d_model; ++k) u += row[k] * x[k];
      float gf = static_cast<float>(g);
      const float uf = static_cast<float>(u);
      kernels::GatedActivation(glu, &gf, &uf, 1);
      DequantizeRow(ln.at[p].down_t, i, row.data());
      for (int64_t k = 0; k < ln.d_model; ++k) y[k] += static_cast<double>(gf) * row[k];
    }
  }
  return y;
}

class MixedMlpTest : public ::testing::TestWithParam<kernels::Glu> {};

TEST_P(MixedMlpTest, MatchesTheReferenceWithAndWithoutCacheUnits) {
  const kernels::Glu glu = GetParam();
  const Mlp m = RandomMlp(64, 192, 21);
  auto views = m.views();
  auto w = M2Weights::Build(views, {DType::kQ8_0, DType::kQ4_0}, 16, false, nullptr);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  MixConfig cfg;
  cfg.r_high = 0.125;  // 24 neurons
  cfg.r_low = 0.25;    // 48 neurons
  auto tier = MakeHostTier();
  ThreadPool pool(2);
  auto with_units = MixedMlp::Create(w->get(), cfg, glu, tier.get(), &pool);
  cfg.cache_units = false;
  auto without = MixedMlp::Create(w->get(), cfg, glu, nullptr, &pool);
  ASSERT_TRUE(with_units.ok() && without.ok());
  std::mt19937 rng(22);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(64), y1(64), y2(64), score(192), t(16);
  for (int step = 0; step < 20; ++step) {
    // Adjacent tokens are similar: x drifts.
    for (float& v : x) v = step == 0 ? n(rng) : 0.8f * v + 0.6f * n(rng);
    ASSERT_TRUE((*with_units)->Forward(0, x.data(), y1.data()).ok());
    ASSERT_TRUE((*without)->Forward(0, x.data(), y2.data()).ok());
    for (int i = 0; i < 64; ++i) ASSERT_EQ(y1[i], y2[i]) << "units change the numbers at " << i;
    (*w)->predictors[0].Score(glu, x.data(), t.data(), score.data(), nullptr);
    // The lowrank score is |act(ĝ)| times each neuron's up magnitude (‖w_up_i‖ without calibration).
    ASSERT_EQ((*w)->up_scale.size(), 1u);
    for (int i = 0; i < 192; ++i) {
      double norm = 0;
      for (int k = 0; k < 64; ++k) norm += static_cast<double>(m.up[i * 64 + k]) * m.up[i * 64 + k];
      ASSERT_NEAR((*w)->up_scale[0][i], std::sqrt(norm), 1e-5 * std::sqrt(norm));
      score[i] *= (*w)->up_scale[0][i];
    }
    const auto ref = Reference(*(*w)->store, glu, score, 24, 48, x);
    double scale = 0;
    for (double v : ref) scale = std::max(scale, std::fabs(v));
    for (int i = 0; i < 64; ++i) {
      // The gathered kernels quantize x (Q8 blocks) and the down coefficients (int8 per group of 4).
      ASSERT_NEAR(y1[i], ref[i], 0.02 * scale + 1e-4) << "step " << step << " output " << i;
    }
  }
  const M2Stats& s = (*with_units)->stats();
  EXPECT_EQ(s.layer_tokens, 20u);
  EXPECT_EQ(s.neurons[kHigh], 20u * 24);
  EXPECT_EQ(s.neurons[kLow], 20u * 48);
  EXPECT_EQ(s.bytes_computed, 20u * (24 * (*w)->store->neuron_bytes(0, kHigh) + 48 * (*w)->store->neuron_bytes(0, kLow)));
  EXPECT_EQ(s.bytes_predictor, 20u * ((*w)->predictors[0].bytes() + 192 * sizeof(float)));  // + the up scales
  EXPECT_EQ(s.unit_hits + s.unit_loads[kHigh] + s.unit_loads[kLow], 20u * 72);
  EXPECT_GT(s.unit_hits, 0u) << "drifting inputs share neurons between adjacent tokens";
  EXPECT_GE(s.unit_loads[kHigh], 24u);  // the first token loads every neuron
  EXPECT_GE(s.unit_loads[kLow], 48u);
  EXPECT_EQ(s.bytes_into_top, s.unit_loads[kHigh] * (*w)->store->neuron_bytes(0, kHigh) +
                                  s.unit_loads[kLow] * (*w)->store->neuron_bytes(0, kLow));
  EXPECT_EQ((*without)->stats().bytes_into_top, 0u);
}

INSTANTIATE_TEST_SUITE_P(Activations, MixedMlpTest, ::testing::Values(kernels::Glu::kSilu, kernels::Glu::kGeluTanh));

TEST(MixedMlpAllNeuronsTest, AllNeuronsAtF32IsTheDenseMlp) {
  const Mlp m = RandomMlp(64, 96, 31);
  auto views = m.views();
  auto w = M2Weights::Build(views, {DType::kF32, DType::kF16}, 0, false, nullptr);
  ASSERT_TRUE(w.ok());
  MixConfig cfg;
  cfg.r_high = 1.0;
  cfg.r_low = 0.0;
  cfg.predictor = PredictorKind::kOracle;
  auto tier = MakeHostTier();
  auto mlp = MixedMlp::Create(w->get(), cfg, kernels::Glu::kSilu, tier.get(), nullptr);
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  std::vector<float> x(64), y(64);
  std::mt19937 rng(32);
  std::normal_distribution<float> n;
  for (float& v : x) v = n(rng);
  ASSERT_TRUE((*mlp)->Forward(0, x.data(), y.data()).ok());
  for (int r = 0; r < 64; ++r) {
    double acc = 0;
    for (int i = 0; i < 96; ++i) {
      double g = 0, u = 0;
      for (int k = 0; k < 64; ++k) g += m.gate[i * 64 + k] * x[k], u += m.up[i * 64 + k] * x[k];
      acc += g / (1 + std::exp(-g)) * u * m.down[r * 96 + i];
    }
    ASSERT_NEAR(y[r], acc, 1e-3 * (1 + std::fabs(acc))) << r;
  }
}

TEST(MixedMlpAllNeuronsTest, OracleRecallIsOneAndLowRankRecallIsCounted) {
  const Mlp m = RandomMlp(64, 128, 41);
  auto views = m.views();
  auto w = M2Weights::Build(views, {DType::kQ8_0, DType::kQ4_0}, 8, false, nullptr);
  ASSERT_TRUE(w.ok());
  MixConfig cfg;
  cfg.r_high = 0.1;
  cfg.r_low = 0.2;
  cfg.measure_recall = true;
  cfg.predictor = PredictorKind::kOracle;
  auto oracle = MixedMlp::Create(w->get(), cfg, kernels::Glu::kSilu, nullptr, nullptr);
  cfg.predictor = PredictorKind::kLowRank;
  auto low = MixedMlp::Create(w->get(), cfg, kernels::Glu::kSilu, nullptr, nullptr);
  ASSERT_TRUE(oracle.ok() && low.ok());
  std::vector<float> x(64), y(64);
  std::mt19937 rng(42);
  std::normal_distribution<float> n;
  for (int step = 0; step < 10; ++step) {
    for (float& v : x) v = n(rng);
    ASSERT_TRUE((*oracle)->Forward(0, x.data(), y.data()).ok());
    ASSERT_TRUE((*low)->Forward(0, x.data(), y.data()).ok());
  }
  EXPECT_DOUBLE_EQ((*oracle)->stats().recall(), 1.0);
  EXPECT_EQ((*low)->stats().recall_total, 10u * (13 + 26));  // round(12.8) + round(25.6)
  EXPECT_LE((*low)->stats().recall(), 1.0);
}

TEST(MixedMlpAllNeuronsTest, RefusesRatiosAboveOne) {
  const Mlp m = RandomMlp(64, 64, 51);
  auto views = m.views();
  auto w = M2Weights::Build(views, {}, 8, false, nullptr);
  ASSERT_TRUE(w.ok());
  MixConfig cfg;
  cfg.r_high = 0.6;
  cfg.r_low = 0.6;
  EXPECT_FALSE(MixedMlp::Create(w->get(), cfg, kernels::Glu::kSilu, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace weir::m2cache
