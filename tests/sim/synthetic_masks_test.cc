// Synthetic mask generators deliver the statistics they state.
#include "sim/synthetic_masks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace weir::sim {
namespace {

MaskLayout OneStream(uint32_t units, int n_experts = 1, int n_active = 1) {
  MaskLayout layout;
  layout.n_layers = 1;
  MaskStream s;
  s.name = "ffn_up";
  s.tensors = {TensorKind::kFfnUp};
  s.weights_per_unit = {16};
  s.n_units = units;
  s.n_experts = n_experts;
  s.n_experts_active = n_active;
  layout.streams.push_back(s);
  return layout;
}

std::vector<UnitMask> Collect(MaskSource* src) {
  std::vector<UnitMask> out;
  TokenMasks m;
  while (true) {
    auto more = src->Next(&m);
    EXPECT_TRUE(more.ok());
    if (!*more) break;
    out.push_back(m.masks[0]);
  }
  return out;
}

std::vector<UnitMask> Generate(const std::string& spec_text, uint32_t units, int tokens,
                               int n_experts = 1, int n_active = 1) {
  auto spec = ParseSyntheticSpec(spec_text);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  auto src = MakeSyntheticSource(OneStream(units, n_experts, n_active), *spec, tokens);
  EXPECT_TRUE(src.ok());
  return Collect(src->get());
}

TEST(SyntheticMasksTest, DenseIsAllUnits) {
  auto masks = Generate("dense", 1000, 5);
  ASSERT_EQ(masks.size(), 5u);
  for (const UnitMask& m : masks) EXPECT_EQ(m.Count(), 1000u);
}

TEST(SyntheticMasksTest, UniformAchievesItsDensity) {
  for (double d : {0.05, 0.3, 0.5, 0.9}) {
    auto masks = Generate(StrFormat("uniform:%g", d), 4096, 50);
    double active = 0;
    for (const UnitMask& m : masks) active += m.Count();
    double achieved = active / (4096.0 * 50);
    // 204800 Bernoulli draws: standard error < 0.0012.
    EXPECT_NEAR(achieved, d, 0.006) << "d " << d;
  }
}

TEST(SyntheticMasksTest, ZipfHasExactTopKAndSkew) {
  const uint32_t n = 2000;
  for (double s : {0.0, 1.0}) {
    auto masks = Generate(StrFormat("zipf:d=0.1,s=%g,seed=5", s), n, 300);
    std::vector<double> freq(n, 0);
    for (const UnitMask& m : masks) {
      EXPECT_EQ(m.Count(), 200u);
      for (uint32_t u = 0; u < n; ++u) freq[u] += m.Test(u);
    }
    std::sort(freq.begin(), freq.end(), std::greater<>());
    double total = std::accumulate(freq.begin(), freq.end(), 0.0);
    double top = std::accumulate(freq.begin(), freq.begin() + n / 10, 0.0) / total;
    if (s == 0) {
      EXPECT_LT(top, 0.16) << "no skew: the top 10% of units carry about 10%";
    } else {
      EXPECT_GT(top, 0.35) << "Zipf s=1: the top 10% of units carry most activations";
    }
  }
}

TEST(SyntheticMasksTest, ZipfRepeatKeepsPreviousUnits) {
  const uint32_t n = 1000;
  for (double r : {0.0, 0.5, 0.9}) {
    auto masks = Generate(StrFormat("zipf:d=0.2,s=0,r=%g", r), n, 40);
    double overlap = 0;
    for (size_t t = 1; t < masks.size(); ++t) {
      uint32_t both = 0;
      for (uint32_t u = 0; u < n; ++u) both += masks[t].Test(u) && masks[t - 1].Test(u);
      EXPECT_GE(both, static_cast<uint32_t>(r * 200));
      overlap += both / 200.0;
    }
    overlap /= static_cast<double>(masks.size() - 1);
    // Kept fraction r, plus chance overlap of the fresh draws (about d of the rest).
    EXPECT_NEAR(overlap, r + (1 - r) * 0.2, 0.05) << "r " << r;
  }
}

TEST(SyntheticMasksTest, MoeRoutesWholeExperts) {
  const uint32_t n = 8 * 64;
  auto masks = Generate("dense", n, 30, 8, 2);
  std::vector<int> used(8, 0);
  for (const UnitMask& m : masks) {
    EXPECT_EQ(m.Count(), 128u);
    int experts = 0;
    for (int e = 0; e < 8; ++e) {
      uint32_t c = 0;
      for (uint32_t j = 0; j < 64; ++j) c += m.Test(static_cast<uint32_t>(e) * 64 + j);
      EXPECT_TRUE(c == 0 || c == 64);
      if (c) {
        ++experts;
        ++used[static_cast<size_t>(e)];
      }
    }
    EXPECT_EQ(experts, 2);
  }
  for (int e = 0; e < 8; ++e) EXPECT_GT(used[static_cast<size_t>(e)], 0) << "expert " << e;
  // Density applies inside the picked experts.
  auto half = Generate("zipf:0.5", n, 10, 8, 2);
  for (const UnitMask& m : half) EXPECT_EQ(m.Count(), 64u);
}

TEST(SyntheticMasksTest, RewindReplaysTheSameMasks) {
  auto spec = ParseSyntheticSpec("zipf:d=0.3,s=1.2,r=0.4,seed=9");
  ASSERT_TRUE(spec.ok());
  auto src = MakeSyntheticSource(OneStream(300), *spec, 12);
  ASSERT_TRUE(src.ok());
  auto a = Collect(src->get());
  ASSERT_TRUE((*src)->Rewind().ok());
  auto b = Collect(src->get());
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) EXPECT_EQ(a[t].words(), b[t].words());
  // A different seed gives different masks.
  auto c = Generate("zipf:d=0.3,s=1.2,r=0.4,seed=10", 300, 12);
  EXPECT_NE(a[3].words(), c[3].words());
}

TEST(SyntheticMasksTest, ParsesAndRejectsSpecs) {
  auto z = ParseSyntheticSpec("zipf:0.3,1.1,0.6");
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->kind, SyntheticSpec::Kind::kZipf);
  EXPECT_DOUBLE_EQ(z->density, 0.3);
  EXPECT_DOUBLE_EQ(z->zipf_s, 1.1);
  EXPECT_DOUBLE_EQ(z->repeat, 0.6);
  EXPECT_EQ(DescribeSyntheticSpec(*z), "zipf:d=0.3,s=1.1,r=0.6,seed=1");
  for (const char* bad : {"uniform", "uniform:1.5", "uniform:0.5,s=2", "zipf:s=1", "dense:3",
                          "poisson:0.3", "zipf:0.1,1,0.5,7"}) {
    EXPECT_FALSE(ParseSyntheticSpec(bad).ok()) << bad;
  }
  EXPECT_FALSE(MakeSyntheticSource(OneStream(10), SyntheticSpec{}, 0).ok());
}

}  // namespace
}  // namespace weir::sim
