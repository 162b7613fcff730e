// Sparsity inside each chosen expert (MoeMlp::set_sparsity): for every pruning policy that works
// on MLP columns, the MoE layer's output equals a float64 reference that routes the token, and in
// each chosen expert computes the dense expert with the policy's selections applied explicitly
// (input columns of gate/up, units, columns of down). Density 1 equals the dense experts; a real
// selection changes the output and reads fewer bytes. On a generated tiny model a session runs
// with the policy; attention-pruning policies are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "format/synth_llama.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/session.h"
#include "sparsity/calibration.h"
#include "sparsity/policy.h"
#include "model/moe_test_util.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

constexpr int kD = MoeLayerFixture::kD, kF = MoeLayerFixture::kF, kE = MoeLayerFixture::kE,
              kK = MoeLayerFixture::kK;

// The layer of these tests: distinct experts, seed 17.
struct Layer : MoeLayerFixture {
  Layer() : MoeLayerFixture(/*identical_experts=*/false, /*seed=*/17) {}
};

bool In(const sparsity::IndexList& l, int i) { return l.all() || l.Contains(i); }

// Expert e on x in float64 with the selections of `policy` (its own copy) applied explicitly.
std::vector<double> PrunedExpertRef(const Layer& f, int e, const float* x,
                                    sparsity::SparsityPolicy* policy) {
  using sparsity::Site;
  sparsity::IndexList in(kF), units(kF), down(kF);
  if (policy->MayPrune(Site::kMlpIn)) {
    policy->SelectInput(0, Site::kMlpIn, std::span<const float>(x, kD), nullptr, &in);
  } else {
    in.SetAll(kD);
  }
  std::vector<double> g(kF, 0.0), u(kF, 0.0);
  for (int i = 0; i < kF; ++i) {
    for (int j = 0; j < kD; ++j) {
      if (!In(in, j)) continue;
      g[i] += static_cast<double>(f.gate[(e * kF + i) * kD + j]) * x[j];
      u[i] += static_cast<double>(f.up[(e * kF + i) * kD + j]) * x[j];
    }
  }
  std::vector<float> pre(kF);
  switch (policy->unit_predictor()) {
    case sparsity::UnitPredictor::kNone:
      units.SetAll(kF);
      break;
    case sparsity::UnitPredictor::kGate:
      for (int i = 0; i < kF; ++i) pre[i] = static_cast<float>(g[i]);
      policy->SelectUnits(0, pre, &units);
      break;
    case sparsity::UnitPredictor::kUp:
      for (int i = 0; i < kF; ++i) pre[i] = static_cast<float>(u[i]);
      policy->SelectUnits(0, pre, &units);
      break;
  }
  std::vector<double> h(kF, 0.0);
  std::vector<float> hf(kF, 0.0f);
  for (int i = 0; i < kF; ++i) {
    if (!In(units, i)) continue;
    h[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    hf[i] = static_cast<float>(h[i]);
  }
  policy->SelectDown(0, hf, units, nullptr, &down);
  std::vector<double> y(kD, 0.0);
  for (int o = 0; o < kD; ++o) {
    for (int i = 0; i < kF; ++i) {
      if (In(down, i)) y[o] += static_cast<double>(f.down[(e * kD + o) * kF + i]) * h[i];
    }
  }
  return y;
}

std::vector<float> Inputs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n) * kD);
  for (float& v : x) v = dist(rng);
  return x;
}

// The layer's output under `spec`, and the bytes it counted.
std::vector<float> RunLayer(const Layer& f, sparsity::SparsityPolicy* policy, const std::vector<float>& x,
                       int n, uint64_t* bytes) {
  auto moe = MoeMlp::Create(f.config, n);
  EXPECT_TRUE(moe.ok());
  EXPECT_TRUE((*moe)->set_sparsity(policy).ok());
  ResidentExperts source(f.weights);
  std::vector<float> y(static_cast<size_t>(n) * kD);
  *bytes = 0;
  EXPECT_TRUE((*moe)
                  ->Forward(0, f.weights.layers[0].ffn_gate_inp, x.data(), n, y.data(), &source,
                            nullptr, bytes)
                  .ok());
  // Router + k whole experts per token, whatever was pruned.
  EXPECT_EQ((*moe)->last_dense_bytes(),
            static_cast<uint64_t>(n) * (kE * kD + kK * 3ull * kD * kF) * sizeof(float));
  if (policy == nullptr) EXPECT_EQ(*bytes, (*moe)->last_dense_bytes());
  return y;
}

TEST(MoeSparsityTest, EachChosenExpertIsPrunedAsTheReferenceSays) {
  Layer f;
  constexpr int n = 6;
  const std::vector<float> x = Inputs(n, 3);
  uint64_t dense_bytes = 0;
  const std::vector<float> dense = RunLayer(f, nullptr, x, n, &dense_bytes);
  // Thresholds for cats from random activations of the layer's widths (teal prunes attention
  // inputs too, so a mixture of experts refuses it, like topk-all).
  sparsity::Calibrator calibrator(1);
  {
    std::mt19937 rng(9);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> a(kD), b(kF), gpre(kF);
    for (int s = 0; s < 64; ++s) {
      for (float& v : a) v = dist(rng);
      for (float& v : b) v = 0.1f * dist(rng);
      for (float& v : gpre) v = dist(rng);
      calibrator.Add(0, sparsity::Site::kMlpIn, a);
      calibrator.Add(0, sparsity::Site::kMlpDown, b);
      calibrator.AddGate(0, gpre);
    }
  }
  const sparsity::Calibration calib = calibrator.Finish();
  for (const char* spec :
       {"dip:0.5", "glu:0.4", "up:0.5", "gate:0.5", "dip-ca:0.5", "cats:0.5"}) {
    SCOPED_TRACE(spec);
    auto p = sparsity::ParseSparsity(spec, &calib);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    std::vector<sparsity::LayerDims> dims = {{kD, 16, 16, kF}};
    ASSERT_TRUE((*p)->Prepare(dims).ok());
    auto ref_policy = (*p)->Clone();
    uint64_t bytes = 0;
    const std::vector<float> y = RunLayer(f, p->get(), x, n, &bytes);
    double max_change = 0;
    for (int t = 0; t < n; ++t) {
      // Route as the op does (float logits).
      float logits[kE];
      for (int e = 0; e < kE; ++e) {
        double s = 0;
        for (int j = 0; j < kD; ++j) s += static_cast<double>(f.router[e * kD + j]) * x[t * kD + j];
        logits[e] = static_cast<float>(s);
      }
      ExpertChoice c[kK];
      RouteToken(logits, kE, kK, true, c);
      std::vector<double> want(kD, 0.0);
      for (int j = 0; j < kK; ++j) {
        const std::vector<double> ye =
            PrunedExpertRef(f, c[j].expert, x.data() + t * kD, ref_policy.get());
        for (int o = 0; o < kD; ++o) want[o] += c[j].weight * ye[o];
      }
      for (int o = 0; o < kD; ++o) {
        EXPECT_NEAR(y[t * kD + o], want[o], 1e-4) << t << "," << o;
        max_change = std::max(max_change, std::fabs(double(y[t * kD + o]) - dense[t * kD + o]));
      }
    }
    EXPECT_GT(max_change, 1e-3) << "the policy should change the output";
    EXPECT_LT(bytes, dense_bytes);
  }
}

TEST(MoeSparsityTest, FullDensityIsTheDenseExperts) {
  Layer f;
  constexpr int n = 4;
  const std::vector<float> x = Inputs(n, 4);
  uint64_t dense_bytes = 0, bytes = 0;
  const std::vector<float> dense = RunLayer(f, nullptr, x, n, &dense_bytes);
  auto p = sparsity::ParseSparsity("dip:1.0", nullptr);
  ASSERT_TRUE(p.ok());
  std::vector<sparsity::LayerDims> dims = {{kD, 16, 16, kF}};
  ASSERT_TRUE((*p)->Prepare(dims).ok());
  const std::vector<float> y = RunLayer(f, p->get(), x, n, &bytes);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], dense[i], 1e-5) << i;
  EXPECT_EQ(bytes, dense_bytes);
}

TEST(MoeSparsityTest, ASessionRunsAPolicyInsideTheExpertsAndRefusesAttentionPruning) {
  const std::string path = testing::TempDir() + "/moe_sparse_qwen3moe.gguf";
  // (Calibration sees each chosen expert's gate and GLU output: below.)
  auto spec = format::SynthPreset("tiny", "qwen3moe");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 11, path, nullptr).ok());
  auto m = Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::vector<int32_t> ids = {1, 17, 200, 5, 9, 33};
  auto logits = [&](sparsity::SparsityPolicy* p) {
    SessionOptions so;
    so.ctx = 32;
    so.sparsity = p;
    auto s = Session::Create(**m, nullptr, so);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    auto l = (*s)->Forward(ids, LogitsFor::kLast);
    EXPECT_TRUE(l.ok());
    return std::vector<float>(*l, *l + (*m)->config().vocab_size);
  };
  const std::vector<float> dense = logits(nullptr);
  auto p = sparsity::ParseSparsity("dip:0.5", nullptr);
  ASSERT_TRUE(p.ok());
  const std::vector<float> pruned = logits(p->get());
  double diff = 0;
  for (size_t i = 0; i < dense.size(); ++i) {
    ASSERT_TRUE(std::isfinite(pruned[i]));
    diff = std::max(diff, std::fabs(double(pruned[i]) - dense[i]));
  }
  EXPECT_GT(diff, 0.0);

  // The observer sees every chosen expert's gate pre-activation and GLU output, per token: what
  // `weir calibrate` pools into a layer's TEAL / CATS thresholds.
  struct Counter : ActivationObserver {
    int gates = 0, downs = 0, experts = 0;
    void OnGate(int, const float*, int64_t d_ff) override { gates += d_ff == 32; }
    void OnInput(int, sparsity::Site site, const float*, int64_t d) override {
      downs += site == sparsity::Site::kMlpDown && d == 32;
    }
    void OnExperts(int, const int32_t*, int k) override { experts += k; }
  } counter;
  {
    SessionOptions so;
    so.ctx = 32;
    auto s = Session::Create(**m, nullptr, so);
    ASSERT_TRUE(s.ok());
    (*s)->set_observer(&counter);
    ASSERT_TRUE((*s)->Forward(ids, LogitsFor::kLast).ok());
    const int want = static_cast<int>(ids.size()) * (*m)->config().n_layers * 4;  // k = 4
    EXPECT_EQ(counter.experts, want);
    EXPECT_EQ(counter.gates, want);
    EXPECT_EQ(counter.downs, want);
  }

  auto all = sparsity::ParseSparsity("topk-all:0.5", nullptr);
  ASSERT_TRUE(all.ok());
  SessionOptions so;
  so.ctx = 16;
  so.sparsity = all->get();
  auto s = Session::Create(**m, nullptr, so);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(s.status().message().find("mixture of experts"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace weir::model
