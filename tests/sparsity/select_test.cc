#include "sparsity/select.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sparsity/index_list.h"
#include "test_util.h"

namespace weir::sparsity {
namespace {

using testutil::RandomActivations;
using testutil::SortTopK;
using testutil::ToVector;

TEST(KeepCountTest, RoundsHalfUpAndNeverDropsEverything) {
  EXPECT_EQ(KeepCount(1.0, 2048), 2048);
  EXPECT_EQ(KeepCount(0.5, 2048), 1024);
  EXPECT_EQ(KeepCount(0.3, 10), 3);   // 0.3 * 10 = 3.0000000000000004, not 4
  EXPECT_EQ(KeepCount(0.25, 10), 3);  // 2.5 rounds up
  EXPECT_EQ(KeepCount(0.24, 10), 2);
  EXPECT_EQ(KeepCount(0.001, 10), 1);  // never zero
  EXPECT_EQ(KeepCount(0.7, 1), 1);
  EXPECT_EQ(KeepCount(0.5, 0), 0);
  EXPECT_EQ(KeepCount(1.5, 7), 7);  // clamped to n
  EXPECT_EQ(KeepCount(std::nan(""), 7), 1);
}

TEST(IndexListTest, AllIsAFlagAndListsAreExplicit) {
  IndexList list(16);
  list.SetAll(10);
  EXPECT_TRUE(list.all());
  EXPECT_EQ(list.size(), 10);
  EXPECT_EQ(list[7], 7);
  EXPECT_TRUE(list.Contains(9));
  EXPECT_FALSE(list.Contains(10));
  EXPECT_DOUBLE_EQ(list.density(), 1.0);
  list.Materialize();
  EXPECT_FALSE(list.all());
  ASSERT_EQ(list.indices().size(), 10u);
  EXPECT_EQ(list.indices()[9], 9);

  int32_t* w = list.BeginWrite(12);
  w[0] = 2;
  w[1] = 5;
  list.EndWrite(2);
  EXPECT_FALSE(list.all());
  EXPECT_EQ(list.size(), 2);
  EXPECT_TRUE(list.Contains(5));
  EXPECT_FALSE(list.Contains(4));
  EXPECT_DOUBLE_EQ(list.density(), 2.0 / 12.0);

  IndexList copy(16);
  copy.CopyFrom(list);
  EXPECT_EQ(ToVector(copy), ToVector(list));
  EXPECT_EQ(copy.universe(), 12);

  // Writing every index of the universe yields all().
  w = list.BeginWrite(3);
  for (int i = 0; i < 3; ++i) w[i] = i;
  list.EndWrite(3);
  EXPECT_TRUE(list.all());
}

TEST(IndexListTest, CacheStateViewReadsBitsLsbFirst) {
  std::vector<uint64_t> words(CacheWords(130), 0);
  words[0] = 0b101;
  words[2] = 1;  // column 128
  CacheStateView view(words, 130);
  EXPECT_TRUE(view.test(0));
  EXPECT_FALSE(view.test(1));
  EXPECT_TRUE(view.test(2));
  EXPECT_TRUE(view.test(128));
  EXPECT_FALSE(view.test(129));
  EXPECT_EQ(CacheWords(128), 2);
  EXPECT_EQ(CacheWords(129), 3);
}

TEST(SelectorTest, TopKMatchesSortReference) {
  Selector sel(5000);
  IndexList out(5000);
  for (int64_t n : {1, 7, 64, 65, 1000, 4999}) {
    auto x = RandomActivations(n, static_cast<uint32_t>(n));
    std::vector<float> mag(x.size());
    for (size_t i = 0; i < x.size(); ++i) mag[i] = std::fabs(x[i]);
    for (double keep : {0.01, 0.1, 0.37, 0.5, 0.9}) {
      const int64_t k = KeepCount(keep, n);
      sel.TopK(x, Magnitude::kAbs, k, nullptr, 1.0f, &out);
      EXPECT_EQ(out.size(), k) << "n=" << n << " keep=" << keep;
      EXPECT_EQ(ToVector(out), SortTopK(mag, k)) << "n=" << n << " keep=" << keep;
    }
    sel.TopK(x, Magnitude::kAbs, n, nullptr, 1.0f, &out);
    EXPECT_TRUE(out.all());
  }
}

TEST(SelectorTest, TopKBreaksTiesTowardLowerIndexAndRanksNanLowest) {
  Selector sel(8);
  IndexList out(8);
  std::vector<float> x = {1, -2, 2, 1, std::nanf(""), -2, 0.5f, 1};
  sel.TopK(x, Magnitude::kAbs, 4, nullptr, 1.0f, &out);
  EXPECT_EQ(ToVector(out), (std::vector<int32_t>{0, 1, 2, 5}));  // |1| at 0, 3, 7: 0 wins
  sel.TopK(x, Magnitude::kAbs, 7, nullptr, 1.0f, &out);
  EXPECT_FALSE(out.Contains(4));  // NaN is the one left out
}

TEST(SelectorTest, SiluMagnitudeTopKMatchesReference) {
  const int64_t n = 777;
  Selector sel(n);
  IndexList out(n);
  auto g = RandomActivations(n, 3);
  std::vector<float> s(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    s[i] = AbsSilu(g[i]);
    const double ref = std::fabs(g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))));
    EXPECT_NEAR(s[i], ref, 1e-6 * (1 + ref));
  }
  sel.TopK(g, Magnitude::kAbsSilu, 200, nullptr, 1.0f, &out);
  EXPECT_EQ(ToVector(out), SortTopK(s, 200));
}

TEST(SelectorTest, CacheAwareTopKFollowsEq10) {
  const int64_t n = 1000;
  Selector sel(n);
  IndexList out(n);
  auto x = RandomActivations(n, 11);
  std::vector<uint64_t> words(CacheWords(n), 0);
  std::mt19937 rng(5);
  for (int64_t i = 0; i < n; ++i) {
    if (rng() % 3 == 0) words[i / 64] |= uint64_t{1} << (i % 64);
  }
  CacheStateView cache(words, n);
  for (float gamma : {0.0f, 0.2f, 0.5f}) {
    std::vector<float> s(x.size());
    for (int64_t i = 0; i < n; ++i) {
      const float c = cache.test(i) ? 1.0f : 0.0f;
      s[i] = std::fabs(x[i]) * (c + gamma * (1.0f - c));
    }
    sel.TopK(x, Magnitude::kAbs, 300, &cache, gamma, &out);
    EXPECT_EQ(ToVector(out), SortTopK(s, 300)) << "gamma=" << gamma;
  }
}

TEST(SelectThresholdTest, KeepsExactlyTheEntriesAtOrAboveTheThreshold) {
  const int64_t n = 513;
  IndexList out(n);
  auto x = RandomActivations(n, 9);
  for (float t : {0.0f, 0.3f, 1.0f, 2.5f, 1e9f}) {
    SelectThreshold(x, Magnitude::kAbs, t, &out);
    std::vector<int32_t> ref;
    for (int64_t i = 0; i < n; ++i)
      if (std::fabs(x[i]) >= t) ref.push_back(static_cast<int32_t>(i));
    EXPECT_EQ(ToVector(out), ref) << "t=" << t;
    EXPECT_EQ(out.all(), static_cast<int64_t>(ref.size()) == n);
    SelectThreshold(x, Magnitude::kAbsSilu, t, &out);
    ref.clear();
    for (int64_t i = 0; i < n; ++i)
      if (AbsSilu(x[i]) >= t) ref.push_back(static_cast<int32_t>(i));
    EXPECT_EQ(ToVector(out), ref) << "silu t=" << t;
  }
}

}  // namespace
}  // namespace weir::sparsity
