#include "sparsity/policy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sparsity/density.h"
#include "sparsity/select.h"
#include "test_util.h"

namespace weir::sparsity {
namespace {

using testutil::RandomActivations;
using testutil::SortTopK;
using testutil::ToVector;

// A tiny model: 3 layers, GQA attention (q_dim != kv_dim), d_ff not a multiple of 64.
constexpr int kLayers = 3;
const LayerDims kDims{96, 128, 32, 200};
std::vector<LayerDims> Dims() { return std::vector<LayerDims>(kLayers, kDims); }

// Activations of one token at each statistic, reproducible from (token, layer).
std::vector<float> Act(int token, int layer, int stat) {
  const int64_t widths[] = {kDims.d_model, kDims.q_dim, kDims.d_model, kDims.d_ff, kDims.d_ff};
  return RandomActivations(widths[stat], static_cast<uint32_t>(token * 100 + layer * 10 + stat));
}

// Calibration over `tokens` tokens; max_samples large enough to hold every magnitude.
Calibration Calibrate(int tokens) {
  Calibrator cal(kLayers, tokens * kDims.d_ff);
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < kLayers; ++l) {
      for (int s = 0; s < kNumSites; ++s) cal.Add(l, static_cast<Site>(s), Act(t, l, s));
      cal.AddGate(l, Act(t, l, 4));
    }
  }
  return cal.Finish();
}

std::unique_ptr<SparsityPolicy> Make(const std::string& spec, const Calibration* calib) {
  auto p = ParseSparsity(spec, calib);
  EXPECT_TRUE(p.ok()) << spec << ": " << p.status().ToString();
  if (!p.ok()) return nullptr;
  auto dims = Dims();
  Status st = (*p)->Prepare(dims);
  EXPECT_TRUE(st.ok()) << spec << ": " << st.ToString();
  return std::move(p).value();
}

struct Lists {
  IndexList attn_in{256}, attn_out{256}, mlp_in{256}, units{256}, down{256};
};

// Runs every hook of one token and layer the way the engine will.
void RunToken(SparsityPolicy& p, int token, int layer, Lists* out,
              const CacheStateView* in_cache = nullptr,
              const CacheStateView* down_cache = nullptr) {
  p.SelectInput(layer, Site::kAttnIn, Act(token, layer, 0), nullptr, &out->attn_in);
  p.SelectInput(layer, Site::kAttnOut, Act(token, layer, 1), nullptr, &out->attn_out);
  p.SelectInput(layer, Site::kMlpIn, Act(token, layer, 2), in_cache, &out->mlp_in);
  switch (p.unit_predictor()) {
    case UnitPredictor::kNone:
      out->units.SetAll(kDims.d_ff);
      break;
    case UnitPredictor::kGate:
      p.SelectUnits(layer, Act(token, layer, 4), &out->units);
      break;
    case UnitPredictor::kUp:
      p.SelectUnits(layer, Act(token, layer, 3), &out->units);
      break;
  }
  p.SelectDown(layer, Act(token, layer, 3), out->units, down_cache, &out->down);
}

const char* kAllMethods[] = {"glu", "gate", "up", "cats", "teal", "topk-all", "dip", "dip-ca"};

TEST(PolicyTest, DensityOneSelectsEverythingEverywhere) {
  Calibration calib = Calibrate(4);
  std::vector<uint64_t> none_cached(CacheWords(256), 0);
  CacheStateView cold_in(std::span<const uint64_t>(none_cached).first(CacheWords(kDims.d_model)),
                         kDims.d_model);
  CacheStateView cold_down(std::span<const uint64_t>(none_cached).first(CacheWords(kDims.d_ff)),
                           kDims.d_ff);
  std::vector<std::string> specs = {"dense", "dense:1", "dip-ca:1,gamma=0"};
  for (const char* m : kAllMethods) specs.push_back(std::string(m) + ":1.0");
  for (const std::string& spec : specs) {
    auto p = Make(spec, &calib);
    ASSERT_TRUE(p);
    for (int s = 0; s < kNumSites; ++s) EXPECT_FALSE(p->MayPrune(static_cast<Site>(s))) << spec;
    EXPECT_DOUBLE_EQ(p->info().target_mlp_density, 1.0) << spec;
    Lists lists;
    for (int l = 0; l < kLayers; ++l) {
      RunToken(*p, 0, l, &lists, &cold_in, &cold_down);
      EXPECT_TRUE(lists.attn_in.all() && lists.attn_out.all() && lists.mlp_in.all()) << spec;
      EXPECT_TRUE(lists.units.all() && lists.down.all()) << spec;
      EXPECT_EQ(lists.down.universe(), kDims.d_ff);
    }
  }
}

TEST(PolicyTest, MasksHaveTheRequestedSizePerSite) {
  for (double d : {0.35, 0.5, 0.8}) {
    const std::string ds = std::to_string(d);
    const int64_t units = KeepCount((3 * d - 1) / 2, kDims.d_ff);
    const DipAllocation a = DipAllocate(d);
    struct Want {
      std::string spec;
      int64_t attn_in, attn_out, mlp_in, units, down;
    };
    const Want wants[] = {
        {"glu:" + ds, 96, 128, 96, 200, KeepCount(d, 200)},
        {"gate:" + ds, 96, 128, 96, units, units},
        {"up:" + ds, 96, 128, 96, units, units},
        {"topk-all:" + ds, KeepCount(d, 96), KeepCount(d, 128), KeepCount(d, 96), 200,
         KeepCount(d, 200)},
        {"dip:" + ds, 96, 128, KeepCount(a.up_keep, 96), 200, KeepCount(a.down_keep, 200)},
        {"dip-ca:" + ds, 96, 128, KeepCount(a.up_keep, 96), 200, KeepCount(a.down_keep, 200)},
    };
    for (const Want& w : wants) {
      auto p = Make(w.spec, nullptr);
      ASSERT_TRUE(p);
      Lists lists;
      for (int t = 0; t < 3; ++t) {
        for (int l = 0; l < kLayers; ++l) {
          RunToken(*p, t, l, &lists);
          EXPECT_EQ(lists.attn_in.size(), w.attn_in) << w.spec;
          EXPECT_EQ(lists.attn_out.size(), w.attn_out) << w.spec;
          EXPECT_EQ(lists.mlp_in.size(), w.mlp_in) << w.spec;
          EXPECT_EQ(lists.units.size(), w.units) << w.spec;
          EXPECT_EQ(lists.down.size(), w.down) << w.spec;
        }
      }
    }
  }
}

std::vector<float> Abs(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
  return r;
}

TEST(PolicyTest, TopKPoliciesSelectTheLargestMagnitudes) {
  Lists lists;
  for (int t = 0; t < 4; ++t) {
    const int l = t % kLayers;
    auto glu = Make("glu:0.3", nullptr);
    RunToken(*glu, t, l, &lists);
    EXPECT_EQ(ToVector(lists.down), SortTopK(Abs(Act(t, l, 3)), KeepCount(0.3, 200)));

    auto gate = Make("gate:0.6", nullptr);
    RunToken(*gate, t, l, &lists);
    std::vector<float> silu = Act(t, l, 4);
    for (float& g : silu) g = std::fabs(g / (1.0f + std::exp(-g)));
    EXPECT_EQ(ToVector(lists.units), SortTopK(silu, KeepCount(0.4, 200)));
    EXPECT_EQ(ToVector(lists.down), ToVector(lists.units));

    auto up = Make("up:0.6", nullptr);
    RunToken(*up, t, l, &lists);
    EXPECT_EQ(up->unit_predictor(), UnitPredictor::kUp);
    EXPECT_EQ(ToVector(lists.units), SortTopK(Abs(Act(t, l, 3)), KeepCount(0.4, 200)));

    auto all = Make("topk-all:0.25", nullptr);
    RunToken(*all, t, l, &lists);
    EXPECT_EQ(ToVector(lists.attn_in), SortTopK(Abs(Act(t, l, 0)), KeepCount(0.25, 96)));
    EXPECT_EQ(ToVector(lists.attn_out), SortTopK(Abs(Act(t, l, 1)), KeepCount(0.25, 128)));
    EXPECT_EQ(ToVector(lists.mlp_in), SortTopK(Abs(Act(t, l, 2)), KeepCount(0.25, 96)));
    EXPECT_EQ(ToVector(lists.down), SortTopK(Abs(Act(t, l, 3)), KeepCount(0.25, 200)));

    auto dip = Make("dip:0.5,up=0.4,down=0.7", nullptr);
    RunToken(*dip, t, l, &lists);
    EXPECT_TRUE(lists.attn_in.all() && lists.attn_out.all());
    EXPECT_EQ(ToVector(lists.mlp_in), SortTopK(Abs(Act(t, l, 2)), KeepCount(0.4, 96)));
    EXPECT_EQ(ToVector(lists.down), SortTopK(Abs(Act(t, l, 3)), KeepCount(0.7, 200)));
  }
}

TEST(PolicyTest, DipGivesTheRequestedMlpDensity) {
  for (double keep : {0.3, 0.45, 0.6, 0.75, 0.9}) {
    auto p = Make("dip:" + std::to_string(keep), nullptr);
    ASSERT_TRUE(p);
    EXPECT_NEAR(p->info().target_mlp_density, keep, 1e-12);
    DensityMeter meter;
    Lists lists;
    for (int t = 0; t < 4; ++t) {
      for (int l = 0; l < kLayers; ++l) {
        RunToken(*p, t, l, &lists);
        MlpCounts c = CountMlp(kDims, p->unit_predictor(), lists.mlp_in, lists.units, lists.down);
        // Each count is rounded by at most half an entry.
        EXPECT_NEAR(MlpDensity(c), keep, (1.0 / 96 + 0.5 / 200) / 1.5) << keep;
        meter.AddMlp(c);
        meter.AddAttention(kDims, lists.attn_in.size(), lists.attn_out.size());
      }
    }
    EXPECT_NEAR(meter.mlp_density(), keep, 0.01);
    EXPECT_DOUBLE_EQ(meter.attention_density(), 1.0);
  }
}

TEST(PolicyTest, DipCaEqualsDipWhenAllCachedOrGammaIsOne) {
  std::vector<uint64_t> all_words(CacheWords(256), ~uint64_t{0});
  std::vector<uint64_t> some_words(CacheWords(256), 0x5a5a5a5a0f0f3c3cull);
  CacheStateView all_in(std::span<const uint64_t>(all_words).first(2), 96),
      all_down(all_words, 200);
  CacheStateView some_in(std::span<const uint64_t>(some_words).first(2), 96),
      some_down(some_words, 200);
  auto dip = Make("dip:0.4", nullptr);
  auto ca = Make("dip-ca:0.4", nullptr);
  auto ca1 = Make("dip-ca:0.4,gamma=1", nullptr);
  ASSERT_TRUE(dip && ca && ca1);
  EXPECT_FLOAT_EQ(ca->info().gamma, 0.2f);
  EXPECT_TRUE(ca->info().cache_aware);
  Lists a, b, c, d;
  for (int t = 0; t < 5; ++t) {
    const int l = t % kLayers;
    RunToken(*dip, t, l, &a);
    RunToken(*ca, t, l, &b, &all_in, &all_down);
    RunToken(*ca1, t, l, &c, &some_in, &some_down);
    RunToken(*ca, t, l, &d);  // no cache state: counts as all cached
    for (Lists* x : {&b, &c, &d}) {
      EXPECT_EQ(ToVector(x->mlp_in), ToVector(a.mlp_in));
      EXPECT_EQ(ToVector(x->down), ToVector(a.down));
    }
  }
}

TEST(PolicyTest, DipCaPrefersCachedColumnsAsEq10Says) {
  std::vector<uint64_t> words(CacheWords(256), 0);
  std::mt19937 rng(17);
  for (auto& w : words) w = (uint64_t{rng()} << 32) | rng();  // about half cached
  CacheStateView in_cache(std::span<const uint64_t>(words).first(2), 96), down_cache(words, 200);
  for (float gamma : {0.0f, 0.2f, 0.6f}) {
    auto p = Make("dip-ca:0.5,gamma=" + std::to_string(gamma), nullptr);
    auto dip = Make("dip:0.5", nullptr);
    ASSERT_TRUE(p && dip);
    const double up = p->info().mlp_in_keep, down = p->info().down_keep;
    Lists lists, plain;
    int64_t cached_ca = 0, cached_dip = 0;
    for (int t = 0; t < 4; ++t) {
      const int l = t % kLayers;
      RunToken(*p, t, l, &lists, &in_cache, &down_cache);
      RunToken(*dip, t, l, &plain);
      auto reference = [&](const std::vector<float>& x, const CacheStateView& cache, double keep) {
        std::vector<float> s(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          const float c = cache.test(static_cast<int64_t>(i)) ? 1.0f : 0.0f;
          s[i] = std::fabs(x[i]) * (c + gamma * (1.0f - c));
        }
        return SortTopK(s, KeepCount(keep, static_cast<int64_t>(x.size())));
      };
      EXPECT_EQ(ToVector(lists.mlp_in), reference(Act(t, l, 2), in_cache, up)) << gamma;
      EXPECT_EQ(ToVector(lists.down), reference(Act(t, l, 3), down_cache, down)) << gamma;
      // Same count as DIP, but at least as many cached columns.
      auto cached = [](const IndexList& list, const CacheStateView& cache) {
        int64_t n = 0;
        for (int64_t i = 0; i < list.size(); ++i) n += cache.test(list[i]);
        return n;
      };
      EXPECT_EQ(lists.down.size(), plain.down.size());
      EXPECT_GE(cached(lists.down, down_cache), cached(plain.down, down_cache));
      EXPECT_GE(cached(lists.mlp_in, in_cache), cached(plain.mlp_in, in_cache));
      cached_ca += cached(lists.down, down_cache) + cached(lists.mlp_in, in_cache);
      cached_dip += cached(plain.down, down_cache) + cached(plain.mlp_in, in_cache);
    }
    EXPECT_GT(cached_ca, cached_dip) << "gamma " << gamma << " changed nothing";
  }
}

// The calibration holds every magnitude it was fed, so running the policy over the same tokens
// must keep KeepCount(keep, N) of the N entries of each (layer, site), up to ties (none here).
TEST(PolicyTest, CatsAndTealHitTheirTargetOnTheCalibrationSamples) {
  const int tokens = 12;
  Calibration calib = Calibrate(tokens);
  for (double d : {0.4, 0.5, 0.7}) {
    auto teal = Make("teal:" + std::to_string(d), &calib);
    auto cats = Make("cats:" + std::to_string(d), &calib);
    ASSERT_TRUE(teal && cats);
    const double units_keep = (3 * d - 1) / 2;
    EXPECT_NEAR(cats->info().units_keep, units_keep, 1e-12);
    for (int l = 0; l < kLayers; ++l) {
      int64_t kept[kNumSites] = {}, total[kNumSites] = {}, cats_kept = 0, cats_total = 0;
      Lists lists;
      for (int t = 0; t < tokens; ++t) {
        RunToken(*teal, t, l, &lists);
        const IndexList* per_site[] = {&lists.attn_in, &lists.attn_out, &lists.mlp_in, &lists.down};
        for (int s = 0; s < kNumSites; ++s) {
          kept[s] += per_site[s]->size();
          total[s] += per_site[s]->universe();
        }
        RunToken(*cats, t, l, &lists);
        EXPECT_EQ(ToVector(lists.down), ToVector(lists.units));
        cats_kept += lists.units.size();
        cats_total += lists.units.universe();
      }
      for (int s = 0; s < kNumSites; ++s) {
        EXPECT_EQ(kept[s], KeepCount(d, total[s])) << "teal layer " << l << " site " << s;
        EXPECT_LE(std::fabs(static_cast<double>(kept[s]) / total[s] - d), 1.0 / total[s]);
      }
      EXPECT_EQ(cats_kept, KeepCount(units_keep, cats_total)) << "cats layer " << l;
    }
  }
}

TEST(PolicyTest, PrepareRejectsACalibrationOfAnotherModel) {
  Calibration calib = Calibrate(2);
  auto p = ParseSparsity("teal:0.5", &calib);
  ASSERT_TRUE(p.ok());
  std::vector<LayerDims> wider(kLayers, LayerDims{128, 128, 32, 200});
  Status st = (*p)->Prepare(wider);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layer 0 'attn_in' has width 96 but the model's is 128"),
            std::string::npos)
      << st.ToString();
  std::vector<LayerDims> fewer(2, kDims);
  st = (*p)->Prepare(fewer);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("calibration has 3 layers but the model has 2"), std::string::npos)
      << st.ToString();
  auto c = ParseSparsity("cats:0.6", &calib);
  ASSERT_TRUE(c.ok());
  std::vector<LayerDims> other_ff(kLayers, LayerDims{96, 128, 32, 256});
  st = (*c)->Prepare(other_ff);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'gate_silu' has width 200"), std::string::npos) << st.ToString();
  EXPECT_TRUE((*c)->Prepare(Dims()).ok());
}

TEST(PolicyTest, CloneSelectsTheSame) {
  std::vector<uint64_t> words(CacheWords(256), 0x0123456789abcdefull);
  CacheStateView in_cache(std::span<const uint64_t>(words).first(2), 96), down_cache(words, 200);
  Calibration calib = Calibrate(3);
  for (const char* spec : {"dip-ca:0.4", "gate:0.5", "teal:0.6"}) {
    auto p = Make(spec, &calib);
    auto q = p->Clone();
    p.reset();  // the clone owns everything it needs
    auto fresh = Make(spec, &calib);
    Lists a, b;
    for (int t = 0; t < 3; ++t) {
      RunToken(*q, t, t % kLayers, &a, &in_cache, &down_cache);
      RunToken(*fresh, t, t % kLayers, &b, &in_cache, &down_cache);
      EXPECT_EQ(ToVector(a.attn_in), ToVector(b.attn_in)) << spec;
      EXPECT_EQ(ToVector(a.mlp_in), ToVector(b.mlp_in)) << spec;
      EXPECT_EQ(ToVector(a.units), ToVector(b.units)) << spec;
      EXPECT_EQ(ToVector(a.down), ToVector(b.down)) << spec;
    }
    EXPECT_EQ(q->info().spec, fresh->info().spec);
  }
}

TEST(PolicyTest, SelectInputAtMlpDownEqualsSelectDownWithoutPredictor) {
  auto p = Make("topk-all:0.3", nullptr);
  IndexList a(256), b(256), all(256);
  all.SetAll(kDims.d_ff);
  auto h = Act(1, 1, 3);
  p->SelectInput(1, Site::kMlpDown, h, nullptr, &a);
  p->SelectDown(1, h, all, nullptr, &b);
  EXPECT_EQ(ToVector(a), ToVector(b));
  EXPECT_TRUE(p->MayPrune(Site::kMlpDown));
}

}  // namespace
}  // namespace weir::sparsity

namespace weir::sparsity {
namespace {

std::vector<int32_t> MlpIn(SparsityPolicy& p, int layer, const std::vector<float>& x) {
  IndexList out(256);
  p.SelectInput(layer, Site::kMlpIn, x, nullptr, &out);
  return ToVector(out);
}

TEST(PolicyTest, SpanReusesTheFirstLayersSelectionTokenByToken) {
  // 3 layers, span 2: layer 0 selects, layer 1 reuses it, layer 2 starts a new span.
  auto span = Make("dip:0.6,span=2", nullptr);
  auto plain = Make("dip:0.6", nullptr);
  ASSERT_TRUE(span && plain);
  EXPECT_EQ(span->info().mlp_in_span, 2);
  EXPECT_NE(span->info().spec.find("span=2"), std::string::npos);
  // A batch of two tokens: each layer's calls come token by token.
  const std::vector<float> x0a = Act(0, 0, 2), x0b = Act(1, 0, 2);
  const std::vector<float> x1a = Act(0, 1, 2), x1b = Act(1, 1, 2);
  const std::vector<float> x2a = Act(0, 2, 2);
  const auto s0a = MlpIn(*span, 0, x0a), s0b = MlpIn(*span, 0, x0b);
  EXPECT_EQ(s0a, MlpIn(*plain, 0, x0a));
  EXPECT_EQ(s0b, MlpIn(*plain, 0, x0b));
  ASSERT_NE(s0a, s0b);
  EXPECT_EQ(MlpIn(*span, 1, x1a), s0a);  // token a keeps its own span selection ...
  EXPECT_EQ(MlpIn(*span, 1, x1b), s0b);  // ... and token b its own
  EXPECT_NE(MlpIn(*plain, 1, x1a), s0a);
  EXPECT_EQ(MlpIn(*span, 2, x2a), MlpIn(*plain, 2, x2a));  // a new span selects afresh
}

TEST(PolicyTest, SpanScoresPredictLaterLayersFromTheNormWeights) {
  // Layer 1's norm weight makes channel 5 the largest there; layer 0's x barely shows it. The
  // span selection of layer 0 keeps it, the plain one does not.
  auto span = Make("dip:0.6,down=1,span=2", nullptr);
  ASSERT_TRUE(span);
  std::vector<float> x(static_cast<size_t>(kDims.d_model), 1.0f);
  x[5] = 0.01f;
  std::vector<float> s0(x.size(), 1.0f), s1(x.size(), 1.0f);
  s1[5] = 1000.0f;
  span->SetMlpInputScale(0, s0);
  span->SetMlpInputScale(1, s1);
  span->SetMlpInputScale(2, s0);
  const auto sel = MlpIn(*span, 0, x);
  EXPECT_TRUE(std::binary_search(sel.begin(), sel.end(), 5));
  auto plain = Make("dip:0.6,down=1", nullptr);
  const auto p = MlpIn(*plain, 0, x);
  EXPECT_EQ(p.size(), sel.size());
  EXPECT_FALSE(std::binary_search(p.begin(), p.end(), 5));
}

TEST(PolicyTest, PredictSpanGuessesTheNextSpanAndLeavesThisOneAlone) {
  // Layer 0's input, rescaled from layer 0's norm weights to layer 2's, is what the span that
  // starts at layer 2 would select from; guessing it does not change layer 1's reuse of layer 0's
  // selection.
  auto span = Make("dip:0.6,span=2", nullptr);
  auto fresh = Make("dip:0.6,span=2", nullptr);
  ASSERT_TRUE(span && fresh);
  const size_t d = static_cast<size_t>(kDims.d_model);
  std::vector<float> s0(d), s1(d, 1.0f), s2(d);
  for (size_t i = 0; i < d; ++i) {
    s0[i] = 0.1f + 0.3f * static_cast<float>(i % 9);  // far from constant: the guess divides
    s2[i] = 2.0f - 0.02f * static_cast<float>(i % 7);
  }
  s2[7] = 500.0f;  // layer 2 weighs channel 7 so that the guess must rescale to keep it
  for (auto* p : {span.get(), fresh.get()}) {
    p->SetMlpInputScale(0, s0);
    p->SetMlpInputScale(1, s1);
    p->SetMlpInputScale(2, s2);
  }
  const std::vector<float> x0 = Act(0, 0, 2), x1 = Act(0, 1, 2);
  const auto sel0 = MlpIn(*span, 0, x0);
  IndexList guess(256);
  ASSERT_TRUE(span->PredictSpan(0, 2, x0, &guess));
  std::vector<float> rescaled(d);
  for (size_t i = 0; i < d; ++i) rescaled[i] = x0[i] / s0[i] * s2[i];
  const std::vector<int32_t> g = ToVector(guess);
  EXPECT_EQ(g, MlpIn(*fresh, 2, rescaled));
  EXPECT_TRUE(std::binary_search(g.begin(), g.end(), 7));
  EXPECT_EQ(MlpIn(*span, 1, x1), sel0);  // the span at hand is untouched
  EXPECT_FALSE(span->PredictSpan(0, 1, x0, &guess));  // layer 1 starts no span
  auto plain = Make("dip:0.6", nullptr);
  EXPECT_FALSE(plain->PredictSpan(0, 2, x0, &guess));
}

TEST(PolicyTest, SpanOptionErrors) {
  for (const char* bad : {"dip:0.6,span=0", "dip:0.6,span=1.5", "dip:0.6,span=2000",
                          "teal:0.5,span=2", "dip-ca:0.6,span=x"}) {
    EXPECT_FALSE(ParseSparsity(bad, nullptr).ok()) << bad;
  }
  EXPECT_TRUE(ParseSparsity("dip-ca:0.6,gamma=0.5,span=4", nullptr).ok());
}

}  // namespace
}  // namespace weir::sparsity
