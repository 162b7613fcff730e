// The mixture-of-experts MLP (model/moe.h): routing against hand-computed values, an MoE layer of
// identical experts equals the dense MLP, a layer is the weighted sum of its chosen experts, the
// expert source sees every chosen expert announced once and released, a source's error reaches
// the caller, and on generated tiny Mixtral / Qwen3 MoE models the logits do not depend on how a
// prompt is batched (the grouping of tokens by expert). Agreement with an independent forward
// pass is tests/integration/oracle_test.cc's job.
#include "model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "format/gguf_reader.h"
#include "format/synth_llama.h"
#include "format/weir_pack_writer.h"
#include "kernels/matvec.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/session.h"
#include "sparsity/policy.h"
#include "model/moe_test_util.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

TEST(RouteTokenTest, TopKWithTiesToTheLowerIdAndSoftmaxOverTheChosen) {
  const float logits[] = {1.0f, 3.0f, 2.0f, 3.0f};
  ExpertChoice c[3];
  RouteToken(logits, 4, 2, true, c);
  EXPECT_EQ(c[0].expert, 1);
  EXPECT_EQ(c[1].expert, 3);
  EXPECT_FLOAT_EQ(c[0].weight, 0.5f);
  EXPECT_FLOAT_EQ(c[1].weight, 0.5f);

  RouteToken(logits, 4, 3, true, c);
  EXPECT_EQ(c[2].expert, 2);
  const double z = 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(c[0].weight, std::exp(3.0) / z, 1e-7);
  EXPECT_NEAR(c[2].weight, std::exp(2.0) / z, 1e-7);

  // Not renormalised: the chosen experts' probabilities under the softmax over all of them.
  RouteToken(logits, 4, 2, false, c);
  const double all = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(c[0].weight, std::exp(3.0) / all, 1e-7);
  EXPECT_NEAR(c[1].weight, std::exp(3.0) / all, 1e-7);
}

TEST(RouteTokenTest, NanRanksLast) {
  const float logits[] = {NAN, -5.0f, 0.5f};
  ExpertChoice c[2];
  RouteToken(logits, 3, 2, true, c);
  EXPECT_EQ(c[0].expert, 2);
  EXPECT_EQ(c[1].expert, 1);
  EXPECT_TRUE(std::isfinite(c[0].weight) && std::isfinite(c[1].weight));
  EXPECT_NEAR(c[0].weight + c[1].weight, 1.0f, 1e-6);
}


// y = W_down · (silu(W_gate x) ⊙ W_up x) of expert e, in double.
std::vector<double> ExpertRef(const MoeLayerFixture& f, int e, const float* x) {
  constexpr int D = MoeLayerFixture::kD, F = MoeLayerFixture::kF;
  std::vector<double> h(F), y(D, 0.0);
  for (int i = 0; i < F; ++i) {
    double g = 0, u = 0;
    for (int j = 0; j < D; ++j) {
      g += static_cast<double>(f.gate[(e * F + i) * D + j]) * x[j];
      u += static_cast<double>(f.up[(e * F + i) * D + j]) * x[j];
    }
    h[i] = g / (1 + std::exp(-g)) * u;
  }
  for (int o = 0; o < D; ++o) {
    for (int i = 0; i < F; ++i) y[o] += static_cast<double>(f.down[(e * D + o) * F + i]) * h[i];
  }
  return y;
}

std::vector<float> Inputs(int n, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(MoeMlpTest, IdenticalExpertsEqualTheDenseMlp) {
  MoeLayerFixture f(/*identical_experts=*/true);
  constexpr int n = 5, D = MoeLayerFixture::kD;
  auto moe = MoeMlp::Create(f.config, 8);
  ASSERT_TRUE(moe.ok()) << moe.status().ToString();
  ResidentExperts source(f.weights);
  const std::vector<float> x = Inputs(n, D, 1);
  std::vector<float> y(n * D);
  uint64_t bytes = 0;
  ASSERT_TRUE((*moe)
                  ->Forward(0, f.weights.layers[0].ffn_gate_inp, x.data(), n, y.data(), &source,
                            nullptr, &bytes)
                  .ok());
  for (int t = 0; t < n; ++t) {
    const std::vector<double> want = ExpertRef(f, 0, x.data() + t * D);
    for (int o = 0; o < D; ++o) EXPECT_NEAR(y[t * D + o], want[o], 1e-4) << t << "," << o;
  }
  // Router + two experts per token.
  const uint64_t expert = 3ull * MoeLayerFixture::kF * D * sizeof(float);
  EXPECT_EQ(bytes, n * (MoeLayerFixture::kE * D * sizeof(float) + 2 * expert));
}

TEST(MoeMlpTest, OutputIsTheWeightedSumOfTheChosenExperts) {
  MoeLayerFixture f(/*identical_experts=*/false);
  constexpr int n = 7, D = MoeLayerFixture::kD, E = MoeLayerFixture::kE, K = MoeLayerFixture::kK;
  auto moe = MoeMlp::Create(f.config, 8);
  ASSERT_TRUE(moe.ok());
  ResidentExperts source(f.weights);
  const std::vector<float> x = Inputs(n, D, 2);
  std::vector<float> y(n * D);
  uint64_t bytes = 0;
  ASSERT_TRUE((*moe)
                  ->Forward(0, f.weights.layers[0].ffn_gate_inp, x.data(), n, y.data(), &source,
                            nullptr, &bytes)
                  .ok());
  std::set<int> used;
  for (int t = 0; t < n; ++t) {
    // The routing the op reports is the router's top-2 of this token.
    float logits[E];
    for (int e = 0; e < E; ++e) {
      double s = 0;
      for (int j = 0; j < D; ++j) s += static_cast<double>(f.router[e * D + j]) * x[t * D + j];
      logits[e] = static_cast<float>(s);
    }
    ExpertChoice want[K];
    RouteToken(logits, E, K, true, want);
    const ExpertChoice* got = (*moe)->routing().data() + t * K;
    std::vector<double> sum(D, 0.0);
    for (int j = 0; j < K; ++j) {
      EXPECT_EQ(got[j].expert, want[j].expert) << "token " << t;
      EXPECT_NEAR(got[j].weight, want[j].weight, 1e-5);
      used.insert(got[j].expert);
      const std::vector<double> ye = ExpertRef(f, got[j].expert, x.data() + t * D);
      for (int o = 0; o < D; ++o) sum[o] += got[j].weight * ye[o];
    }
    EXPECT_NEAR(got[0].weight + got[1].weight, 1.0f, 1e-6);
    for (int o = 0; o < D; ++o) EXPECT_NEAR(y[t * D + o], sum[o], 1e-4) << t << "," << o;
  }
  EXPECT_GT(used.size(), 2u) << "the inputs should route to more than one pair of experts";
}

// Records the source protocol; optionally fails on one expert.
class RecordingSource final : public ExpertSource {
 public:
  RecordingSource(const LlamaWeights& w, int fail_on) : resident_(w), fail_on_(fail_on) {}
  Status Prepare(int layer, std::span<const int32_t> experts) override {
    prepared.assign(experts.begin(), experts.end());
    (void)layer;
    return Status::Ok();
  }
  Result<ExpertWeights> Acquire(int layer, int e) override {
    if (e == fail_on_) return Status::IoError("expert read failed");
    acquired.push_back(e);
    ++held;
    return resident_.Acquire(layer, e);
  }
  void Release(int layer, int e) override {
    (void)layer;
    released.push_back(e);
    --held;
  }
  std::vector<int32_t> prepared, acquired, released;
  int held = 0;

 private:
  ResidentExperts resident_;
  int fail_on_;
};

TEST(MoeMlpTest, SourceSeesEachChosenExpertOnceInOrder) {
  MoeLayerFixture f(false);
  constexpr int n = 8, D = MoeLayerFixture::kD, K = MoeLayerFixture::kK;
  auto moe = MoeMlp::Create(f.config, n);
  ASSERT_TRUE(moe.ok());
  RecordingSource source(f.weights, /*fail_on=*/-1);
  const std::vector<float> x = Inputs(n, D, 3);
  std::vector<float> y(n * D);
  uint64_t bytes = 0;
  ASSERT_TRUE((*moe)
                  ->Forward(0, f.weights.layers[0].ffn_gate_inp, x.data(), n, y.data(), &source,
                            nullptr, &bytes)
                  .ok());
  std::set<int32_t> chosen;
  for (int i = 0; i < n * K; ++i) chosen.insert((*moe)->routing()[i].expert);
  const std::vector<int32_t> want(chosen.begin(), chosen.end());  // ascending, each once
  EXPECT_EQ(source.prepared, want);
  EXPECT_EQ(source.acquired, want);
  EXPECT_EQ(source.released, want);
  EXPECT_EQ(source.held, 0);

  RecordingSource failing(f.weights, /*fail_on=*/want.back());
  Status st = (*moe)->Forward(0, f.weights.layers[0].ffn_gate_inp, x.data(), n, y.data(), &failing,
                              nullptr, &bytes);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_EQ(failing.held, 0);  // what was acquired before the failure was given back
}

TEST(MoeMlpTest, CreateRefusesABadConfig) {
  MoeLayerFixture f(false);
  format::LlamaConfig c = f.config;
  c.n_expert_used = c.n_expert + 1;
  EXPECT_FALSE(MoeMlp::Create(c, 4).ok());
  c = f.config;
  c.arch = &format::LlamaArch();
  EXPECT_FALSE(MoeMlp::Create(c, 4).ok());
}

// --- routing bias toward cached experts ---------------------------------------------------

TEST(RouteTokenTest, BiasChoosesTheTopKOfScaledProbabilitiesAndWeighsUnbiased) {
  const float logits[] = {2.0f, 1.5f, 1.0f, 0.2f};
  ExpertChoice c[2];
  // Expert 0 not cached. gamma 0.5: p0 * 0.5 ∝ e^2 / 2 = 3.69 < e^1.5 = 4.48, > e^1 = 2.72.
  float bias[4] = {std::log(0.5f), 0, 0, 0};
  RouteToken(logits, 4, 2, true, c, bias);
  EXPECT_EQ(c[0].expert, 1);
  EXPECT_EQ(c[1].expert, 0);
  // The weights are the softmax of the unbiased logits over the chosen pair.
  const double z = std::exp(2.0) + std::exp(1.5);
  EXPECT_NEAR(c[0].weight, std::exp(1.5) / z, 1e-7);
  EXPECT_NEAR(c[1].weight, std::exp(2.0) / z, 1e-7);
  // gamma 0.2: e^2 / 5 = 1.48 < e^1 = 2.72: expert 0 drops out.
  bias[0] = std::log(0.2f);
  RouteToken(logits, 4, 2, true, c, bias);
  EXPECT_EQ(c[0].expert, 1);
  EXPECT_EQ(c[1].expert, 2);
  const double z2 = std::exp(1.5) + std::exp(1.0);
  EXPECT_NEAR(c[0].weight, std::exp(1.5) / z2, 1e-7);
  EXPECT_NEAR(c[1].weight, std::exp(1.0) / z2, 1e-7);
  // Not renormalised: the chosen experts' share of the unbiased softmax over all four.
  RouteToken(logits, 4, 2, false, c, bias);
  const double all = std::exp(2.0) + std::exp(1.5) + std::exp(1.0) + std::exp(0.2);
  EXPECT_NEAR(c[0].weight, std::exp(1.5) / all, 1e-7);
  EXPECT_NEAR(c[1].weight, std::exp(1.0) / all, 1e-7);
}

TEST(RouteTokenTest, BiasMatchesABruteForceOverRandomLogitsAndZeroBiasIsNoBias) {
  std::mt19937 rng(17);
  std::normal_distribution<float> n(0.0f, 1.5f);
  std::bernoulli_distribution cached(0.4);
  constexpr int E = 16, K = 4;
  for (float gamma : {1.0f, 0.7f, 0.3f, 0.05f}) {
    for (int trial = 0; trial < 200; ++trial) {
      float logits[E], bias[E];
      bool in[E];
      for (int e = 0; e < E; ++e) {
        logits[e] = n(rng);
        in[e] = cached(rng);
        bias[e] = in[e] ? 0.0f : std::log(gamma);
      }
      ExpertChoice got[K];
      RouteToken(logits, E, K, true, got, bias);
      // Brute force in double: the K largest softmax probabilities, those of uncached experts
      // multiplied by gamma.
      double p[E], z = 0;
      for (int e = 0; e < E; ++e) z += std::exp(static_cast<double>(logits[e]));
      for (int e = 0; e < E; ++e) p[e] = std::exp(static_cast<double>(logits[e])) / z * (in[e] ? 1 : gamma);
      std::vector<int> ids(E);
      std::iota(ids.begin(), ids.end(), 0);
      std::sort(ids.begin(), ids.end(), [&](int a, int b) { return p[a] > p[b]; });
      double wz = 0;
      for (int j = 0; j < K; ++j) wz += std::exp(static_cast<double>(logits[ids[j]]));
      for (int j = 0; j < K; ++j) {
        ASSERT_EQ(got[j].expert, ids[j]) << "gamma " << gamma << " trial " << trial;
        EXPECT_NEAR(got[j].weight, std::exp(static_cast<double>(logits[ids[j]])) / wz, 1e-6);
      }
      // A bias of zeros is exactly the plain routing.
      float zero[E] = {};
      ExpertChoice plain[K], zeroed[K];
      RouteToken(logits, E, K, true, plain);
      RouteToken(logits, E, K, true, zeroed, zero);
      ASSERT_EQ(std::memcmp(plain, zeroed, sizeof(plain)), 0);
    }
  }
}

// Resident experts with a hand-made cache state.
class MaskedSource final : public ExpertSource {
 public:
  MaskedSource(const LlamaWeights& w, uint64_t mask) : resident_(w), mask_(mask) {}
  Result<ExpertWeights> Acquire(int layer, int e) override { return resident_.Acquire(layer, e); }
  const uint64_t* CachedExperts(int layer) override {
    (void)layer;
    ++asked;
    return &mask_;
  }
  int asked = 0;

 private:
  ResidentExperts resident_;
  uint64_t mask_;
};

TEST(MoeMlpTest, BiasTowardCachedExpertsRoutesByTheCacheState) {
  MoeLayerFixture f(/*identical_experts=*/false);
  constexpr int n = 8, D = MoeLayerFixture::kD, E = MoeLayerFixture::kE, K = MoeLayerFixture::kK;
  const std::vector<float> x = Inputs(n, D, 4);
  const TensorView& router = f.weights.layers[0].ffn_gate_inp;
  auto plain = MoeMlp::Create(f.config, n);
  ASSERT_TRUE(plain.ok());
  ResidentExperts resident(f.weights);
  std::vector<float> y_plain(n * D);
  uint64_t bytes = 0;
  ASSERT_TRUE((*plain)->Forward(0, router, x.data(), n, y_plain.data(), &resident, nullptr, &bytes).ok());
  std::vector<ExpertChoice> plain_routing((*plain)->routing().begin(), (*plain)->routing().end());

  const uint64_t mask = 0b010011;  // experts 0, 1 and 4 cached
  const float gamma = 0.3f;
  auto biased = MoeMlp::Create(f.config, n);
  ASSERT_TRUE(biased.ok());
  ASSERT_TRUE((*biased)->set_expert_bias(gamma).ok());
  MaskedSource source(f.weights, mask);
  std::vector<float> y(n * D);
  ASSERT_TRUE((*biased)->Forward(0, router, x.data(), n, y.data(), &source, nullptr, &bytes).ok());
  EXPECT_EQ(source.asked, 1);  // once per step, before routing
  int changed = 0;
  for (int t = 0; t < n; ++t) {
    // The biased top-k of this token's router probabilities (double, by hand), weighed by the
    // unbiased softmax over the chosen experts.
    double logit[E], key[E];
    for (int e = 0; e < E; ++e) {
      double s = 0;
      for (int j = 0; j < D; ++j) s += static_cast<double>(f.router[e * D + j]) * x[t * D + j];
      logit[e] = s;
      key[e] = std::exp(s) * (((mask >> e) & 1) ? 1.0 : gamma);
    }
    std::vector<int> ids(E);
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(), [&](int a, int b) { return key[a] > key[b]; });
    const ExpertChoice* got = (*biased)->routing().data() + t * K;
    double wz = 0;
    for (int j = 0; j < K; ++j) wz += std::exp(logit[ids[j]]);
    std::vector<double> sum(D, 0.0);
    for (int j = 0; j < K; ++j) {
      EXPECT_EQ(got[j].expert, ids[j]) << "token " << t;
      EXPECT_NEAR(got[j].weight, std::exp(logit[ids[j]]) / wz, 1e-5);
      const std::vector<double> ye = ExpertRef(f, ids[j], x.data() + t * D);
      for (int o = 0; o < D; ++o) sum[o] += std::exp(logit[ids[j]]) / wz * ye[o];
      bool was = false;
      for (int i = 0; i < K; ++i) was |= plain_routing[t * K + i].expert == ids[j];
      changed += !was;
    }
    for (int o = 0; o < D; ++o) EXPECT_NEAR(y[t * D + o], sum[o], 1e-4) << t << "," << o;
  }
  EXPECT_GT(changed, 0) << "the cache state should move some choices";
  EXPECT_EQ((*biased)->bias_stats().choices, static_cast<uint64_t>(n * K));
  EXPECT_EQ((*biased)->bias_stats().changed, static_cast<uint64_t>(changed));

  // Every expert cached: the plain routing, bit for bit.
  MaskedSource all(f.weights, (uint64_t{1} << E) - 1);
  ASSERT_TRUE((*biased)->Forward(0, router, x.data(), n, y.data(), &all, nullptr, &bytes).ok());
  EXPECT_EQ(std::memcmp(y.data(), y_plain.data(), y.size() * sizeof(float)), 0);
  // gamma 1 is no bias: the cache state is not even read, and the output is the plain one.
  ASSERT_TRUE((*biased)->set_expert_bias(1.0f).ok());
  MaskedSource ignored(f.weights, mask);
  ASSERT_TRUE((*biased)->Forward(0, router, x.data(), n, y.data(), &ignored, nullptr, &bytes).ok());
  EXPECT_EQ(ignored.asked, 0);
  EXPECT_EQ(std::memcmp(y.data(), y_plain.data(), y.size() * sizeof(float)), 0);
  // Out of range.
  EXPECT_FALSE((*biased)->set_expert_bias(0.0f).ok());
  EXPECT_FALSE((*biased)->set_expert_bias(1.5f).ok());
  EXPECT_FALSE((*biased)->set_expert_bias(NAN).ok());
}

// --- generated tiny models ------------------------------------------------------------------

std::unique_ptr<Model> TinyMoe(const std::string& arch, DType type) {
  const std::string path = testing::TempDir() + "/tiny_" + arch + "_" + DTypeName(type) + ".gguf";
  auto spec = format::SynthPreset("tiny", arch);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(format::WriteRandomLlamaGguf(*spec, type, 11, path, nullptr).ok());
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<float> AllLogits(const Model& m, const std::vector<int32_t>& ids, int n_batch, int step,
                             ThreadPool* pool) {
  SessionOptions so;
  so.ctx = 64;
  so.n_batch = n_batch;
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

struct TinyCase {
  const char* arch;
  DType type;
};

class TinyMoeTest : public ::testing::TestWithParam<TinyCase> {};

TEST_P(TinyMoeTest, BatchingThePromptDoesNotChangeLogits) {
  std::unique_ptr<Model> m = TinyMoe(GetParam().arch, GetParam().type);
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->config().IsMoe());
  ThreadPool pool(2);
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back((i * 53 + 7) % m->config().vocab_size);
  const std::vector<float> one = AllLogits(*m, ids, 1, 1, &pool);
  ASSERT_FALSE(one.empty());
  for (auto [n_batch, step] : {std::pair{8, 8}, {8, 3}, {16, 16}}) {
    const std::vector<float> got = AllLogits(*m, ids, n_batch, step, &pool);
    ASSERT_EQ(got.size(), one.size());
    double max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(one[i])));
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - one[i]));
    }
    EXPECT_LT(max_diff / max_abs, 1e-5) << "n_batch " << n_batch << " step " << step;
  }
}

TEST_P(TinyMoeTest, TrafficCountsTheRouterAndTheChosenExperts) {
  std::unique_ptr<Model> m = TinyMoe(GetParam().arch, GetParam().type);
  ASSERT_NE(m, nullptr);
  const auto& c = m->config();
  SessionOptions so;
  so.ctx = 16;
  auto s = Session::Create(*m, nullptr, so);
  ASSERT_TRUE(s.ok());
  const int32_t ids[] = {1, 17, 200};
  ASSERT_TRUE((*s)->Forward(ids, LogitsFor::kLast).ok());
  uint64_t per_token = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m->weights().layers[static_cast<size_t>(l)];
    per_token += w.ffn_gate_inp.nbytes() +
                 (w.w_gate_exps.nbytes() + w.w_up_exps.nbytes() + w.w_down_exps.nbytes()) /
                     c.n_expert * c.n_expert_used;
  }
  EXPECT_EQ((*s)->traffic().mlp_used, 3 * per_token);
  EXPECT_EQ((*s)->traffic().mlp_dense, 3 * per_token);
  ASSERT_NE((*s)->moe(), nullptr);
  EXPECT_EQ((*s)->moe()->routing().size(), 3u * c.n_expert_used);
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyMoeTest,
                         ::testing::Values(TinyCase{"mixtral", DType::kF32},
                                           TinyCase{"mixtral", DType::kQ8_0},
                                           TinyCase{"qwen3moe", DType::kF32},
                                           TinyCase{"qwen3moe", DType::kQ4_0}),
                         [](const ::testing::TestParamInfo<TinyCase>& info) {
                           return std::string(info.param.arch) + "_" + DTypeName(info.param.type);
                         });

// Expert stacks loaded tiled for the dense kernels (each expert's rows are whole groups of 16,
// so each expert's slice is tiled): the same logits as row-major to 1e-4 relative and the same
// argmax, as for dense weights (weights_placement_test.cc).
TEST_P(TinyMoeTest, TiledExpertsAgreeWithRowMajor) {
  if (GetParam().type != DType::kQ8_0 && GetParam().type != DType::kQ4_0) GTEST_SKIP() << "F32";
  const std::string path = testing::TempDir() + "/tiled_" + GetParam().arch + ".gguf";
  auto spec = format::SynthPreset("tiny", GetParam().arch);
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, GetParam().type, 13, path, nullptr).ok());
  format::LoadOptions o;
  o.placement = format::WeightPlacement::kMemory;
  auto rows = Model::Load(path, o);
  o.tile_linear = true;
  auto tiled = Model::Load(path, o);
  ASSERT_TRUE(rows.ok() && tiled.ok());
  if ((*tiled)->file().TiledTensorCount() == 0) GTEST_SKIP() << "no fast tiled product on this CPU";
  const auto& tf = (*tiled)->file();
  EXPECT_EQ(tf.Find("blk.0.ffn_up_exps.weight")->layout, Layout::kTiled16);
  EXPECT_EQ(tf.Find("blk.1.ffn_down_exps.weight")->layout, Layout::kTiled16);
  EXPECT_EQ(tf.Find("blk.0.ffn_gate_inp.weight")->layout, Layout::kRowMajor);  // F32 router
  ThreadPool pool(2);
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 53 + 7) % (*rows)->config().vocab_size);
  const std::vector<float> a = AllLogits(**rows, ids, 4, 4, &pool);
  const std::vector<float> b = AllLogits(**tiled, ids, 4, 4, &pool);
  ASSERT_EQ(a.size(), b.size());
  const size_t vocab = static_cast<size_t>((*rows)->config().vocab_size);
  for (size_t t = 0; t < ids.size(); ++t) {
    double diff = 0, norm = 0;
    size_t best_a = 0, best_b = 0;
    for (size_t i = 0; i < vocab; ++i) {
      const float x = a[t * vocab + i], y = b[t * vocab + i];
      diff = std::max(diff, std::fabs(static_cast<double>(x) - y));
      norm = std::max(norm, std::fabs(static_cast<double>(x)));
      if (x > a[t * vocab + best_a]) best_a = i;
      if (y > b[t * vocab + best_b]) best_b = i;
    }
    EXPECT_LE(diff, 1e-4 * norm) << "token " << t;
    EXPECT_EQ(best_a, best_b) << "token " << t;
  }
}

// Hostile MoE headers: random bytes written over the metadata and tensor infos of a tiny
// Mixtral file (expert counts, 3-D shapes, key names included) give an error or a model, and a
// model that loads also decodes (the MoE op never sees a file the validator let through with
// experts it cannot index).
TEST(TinyMoeRefusals, MutatedHeadersFailCleanlyOrDecode) {
  const std::string path = testing::TempDir() + "/fuzz_mixtral.gguf";
  auto spec = format::SynthPreset("tiny", "mixtral");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 3, path, nullptr).ok());
  const std::string file = testing::ReadFile(path);
  auto clean = format::GgufFile::Parse("fuzz.gguf", reinterpret_cast<const uint8_t*>(file.data()),
                                       file.size(), nullptr);
  ASSERT_TRUE(clean.ok());
  const uint64_t header = clean->data_offset();
  std::mt19937_64 rng(21);
  int errors = 0, decoded = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::vector<uint8_t> b(file.begin(), file.end());
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) b[rng() % header] = static_cast<uint8_t>(rng());
    auto f = format::GgufFile::Parse("fuzz.gguf", b.data(), b.size(), nullptr);
    if (!f.ok()) {
      ++errors;
      continue;
    }
    auto mf = format::LoadGgufModel(*f);
    if (!mf.ok()) {
      ++errors;
      EXPECT_EQ(mf.status().message().find('\n'), std::string::npos) << mf.status().message();
      continue;
    }
    auto m = Model::FromFile(std::move(mf).value());
    if (!m.ok()) {
      ++errors;
      continue;
    }
    SessionOptions so;
    so.ctx = 8;
    auto s = Session::Create(**m, nullptr, so);
    if (!s.ok()) {
      ++errors;
      continue;
    }
    const int32_t ids[] = {1, 2};
    EXPECT_TRUE((*s)->Forward(ids, LogitsFor::kLast).ok());
    ++decoded;
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(decoded, 0);  // most single-byte changes hit token strings and still load
}

TEST(TinyMoeRefusals, ExpertBiasIsANoOpOnResidentExpertsAndRefusedOnADenseModel) {
  std::unique_ptr<Model> m = TinyMoe("qwen3moe", DType::kF32);
  ASSERT_NE(m, nullptr);
  ThreadPool pool(2);
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 31 + 5) % m->config().vocab_size);
  auto logits = [&](float gamma) {
    SessionOptions so;
    so.ctx = 32;
    so.n_batch = 1;
    so.expert_bias = gamma;
    auto s = Session::Create(*m, &pool, so);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    std::vector<float> out;
    for (int32_t t : ids) {
      auto l = (*s)->Forward(std::span<const int32_t>(&t, 1), LogitsFor::kLast);
      EXPECT_TRUE(l.ok());
      out.insert(out.end(), *l, *l + m->config().vocab_size);
    }
    EXPECT_EQ((*s)->moe()->bias_stats().choices, 0u);  // never acted: every expert is resident
    return out;
  };
  const std::vector<float> plain = logits(1.0f), biased = logits(0.2f);
  ASSERT_EQ(plain.size(), biased.size());
  EXPECT_EQ(std::memcmp(plain.data(), biased.data(), plain.size() * sizeof(float)), 0);
  SessionOptions bad;
  bad.ctx = 16;
  bad.expert_bias = 0.0f;
  EXPECT_EQ(Session::Create(*m, nullptr, bad).status().code(), Status::Code::kInvalidArgument);

  const std::string dense = testing::TempDir() + "/tiny_dense_for_bias.gguf";
  auto spec = format::SynthPreset("tiny", "llama");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 3, dense, nullptr).ok());
  auto d = Model::Load(dense);
  ASSERT_TRUE(d.ok());
  SessionOptions so;
  so.ctx = 16;
  so.expert_bias = 0.5f;
  auto s = Session::Create(**d, nullptr, so);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("mixture of experts"), std::string::npos);
}

TEST(TinyMoeRefusals, AttentionSparsityAndDenseLayoutsAreRefused) {
  std::unique_ptr<Model> m = TinyMoe("mixtral", DType::kF32);
  ASSERT_NE(m, nullptr);
  // Pruning inside the experts runs (tests/model/moe_sparse_test.cc); pruning attention does not.
  auto p = sparsity::ParseSparsity("topk-all:0.5", nullptr);
  ASSERT_TRUE(p.ok());
  SessionOptions so;
  so.ctx = 16;
  so.sparsity = p->get();
  auto s = Session::Create(*m, nullptr, so);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(s.status().message().find("mixture of experts"), std::string::npos)
      << s.status().message();
  // A policy that never prunes is the dense computation and is accepted.
  auto dense = sparsity::ParseSparsity("dense", nullptr);
  ASSERT_TRUE(dense.ok());
  so.sparsity = dense->get();
  EXPECT_TRUE(Session::Create(*m, nullptr, so).ok());

  // A mixture of experts packs with the experts layout only (tests/model/streaming_experts_test.cc
  // streams it): no dense layout, no --type, no layer groups.
  const std::string out = testing::TempDir() + "/moe.weirpack";
  EXPECT_TRUE(format::WritePack(m->file(), out, {}).ok());
  format::PackOptions o;
  o.layout = format::PackLayout::kColumns;
  EXPECT_EQ(format::WritePack(m->file(), out, o).code(), Status::Code::kInvalidArgument);
  o = {};
  o.type = DType::kQ8_0;
  EXPECT_EQ(format::WritePack(m->file(), out, o).code(), Status::Code::kUnsupported);
  o = {};
  o.group_size = 2;
  EXPECT_EQ(format::WritePack(m->file(), out, o).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace weir::model
