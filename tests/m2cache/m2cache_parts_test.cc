// The parts of M2Cache against simple references: the neuron store's rows, the score split, ATU
// slot bookkeeping, the cache unit's bytes, the ratio candidates and the --m2cache parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "random_mlp.h"
#include "m2cache/cache_unit.h"
#include "m2cache/mix_config.h"
#include "m2cache/neuron_store.h"
#include "m2cache/precision_split.h"
#include "m2cache/ratio_search.h"
#include "m2cache/slot_map.h"
#include "tensor/quantize.h"

namespace weir::m2cache {
namespace {

using m2test::Mlp;

Mlp RandomMlp(int64_t d, int64_t f, uint32_t seed) { return m2test::RandomMlp(d, f, seed, 0.5f); }

TEST(NeuronStoreTest, RowsAreTheWeightsRequantizedNeuronMajor) {
  const Mlp m = RandomMlp(64, 96, 1);
  const MlpWeights w[1] = {m.view()};
  auto store = NeuronStore::Build(w, {DType::kQ8_0, DType::kQ4_0}, nullptr);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const LayerNeurons& ln = (*store)->layer(0);
  EXPECT_EQ(ln.d_ff, 96);
  EXPECT_EQ(ln.d_model, 64);
  for (int p = 0; p < kNumPrecisions; ++p) {
    const DType t = p == kHigh ? DType::kQ8_0 : DType::kQ4_0;
    const size_t rb = RowBytes(t, 64);
    std::vector<uint8_t> want(rb);
    std::vector<float> column(64);
    for (int64_t i = 0; i < 96; ++i) {
      QuantizeRow(t, m.gate.data() + i * 64, want.data(), 64);
      EXPECT_EQ(std::memcmp(want.data(), ln.at[p].gate.row(i), rb), 0) << "gate row " << i;
      QuantizeRow(t, m.up.data() + i * 64, want.data(), 64);
      EXPECT_EQ(std::memcmp(want.data(), ln.at[p].up.row(i), rb), 0) << "up row " << i;
      for (int64_t r = 0; r < 64; ++r) column[static_cast<size_t>(r)] = m.down[static_cast<size_t>(r * 96 + i)];
      QuantizeRow(t, column.data(), want.data(), 64);
      EXPECT_EQ(std::memcmp(want.data(), ln.at[p].down_t.row(i), rb), 0) << "down column " << i;
    }
    EXPECT_EQ((*store)->neuron_bytes(0, static_cast<Precision>(p)), 3 * rb);
  }
  EXPECT_EQ((*store)->bytes(), 96 * 3 * (RowBytes(DType::kQ8_0, 64) + RowBytes(DType::kQ4_0, 64)));
}

TEST(NeuronStoreTest, RefusesATypeWhoseBlockDoesNotDivideTheRow) {
  const Mlp m = RandomMlp(48, 32, 2);
  const MlpWeights w[1] = {m.view()};
  auto store = NeuronStore::Build(w, {DType::kQ8_0, DType::kQ4_0}, nullptr);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("not a multiple"), std::string::npos) << store.status().ToString();
  auto k = NeuronStore::Build(w, {DType::kF16, DType::kQ4_K}, nullptr);
  EXPECT_FALSE(k.ok());
  auto f = NeuronStore::Build(w, {DType::kF32, DType::kF16}, nullptr);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
}

TEST(NeuronStoreTest, RefusesMismatchedShapes) {
  Mlp m = RandomMlp(64, 96, 3);
  MlpWeights w[1] = {m.view()};
  w[0].down.shape = Shape{64, 64};
  EXPECT_FALSE(NeuronStore::Build(w, {}, nullptr).ok());
}

// The reference split: sort every index by (score desc, index asc).
void ReferenceSplit(const std::vector<float>& s, int64_t nh, int64_t nl, std::vector<int32_t>* h,
                    std::vector<int32_t>* l) {
  std::vector<int32_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
  h->assign(idx.begin(), idx.begin() + nh);
  l->assign(idx.begin() + nh, idx.begin() + nh + nl);
  std::sort(h->begin(), h->end());
  std::sort(l->begin(), l->end());
}

TEST(SplitByScoreTest, MatchesASortIncludingTies) {
  std::mt19937 rng(5);
  std::vector<int32_t> order, h, l, rh, rl;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    std::vector<float> s(static_cast<size_t>(n));
    for (float& v : s) v = static_cast<float>(rng() % 7);  // many ties
    const int64_t nh = rng() % (n + 1);
    const int64_t nl = rng() % (n - nh + 1);
    SplitByScore(s, nh, nl, &order, &h, &l);
    ReferenceSplit(s, nh, nl, &rh, &rl);
    ASSERT_EQ(h, rh);
    ASSERT_EQ(l, rl);
  }
}

TEST(SlotMapTest, KeepsResidentNeuronsAndLoadsOnlyTheNewOnes) {
  std::mt19937 rng(9);
  const int64_t n_neurons = 200, cap = 50;
  SlotMap map(n_neurons, cap);
  std::set<int32_t> resident;
  std::vector<int32_t> slots(cap);
  std::vector<SlotLoad> loads;
  for (int step = 0; step < 300; ++step) {
    // Adjacent tokens share most of their set: keep some of the previous, add random ones.
    std::set<int32_t> want;
    for (int32_t n : resident) {
      if (rng() % 10 < 8 && static_cast<int64_t>(want.size()) < cap) want.insert(n);
    }
    const int64_t size = rng() % (cap + 1);
    while (static_cast<int64_t>(want.size()) < size) want.insert(static_cast<int32_t>(rng() % n_neurons));
    std::vector<int32_t> wanted(want.begin(), want.end());
    std::shuffle(wanted.begin(), wanted.end(), rng);
    const int64_t hits = map.Update(wanted, slots.data(), &loads);
    int64_t expect_hits = 0;
    for (int32_t n : wanted) expect_hits += resident.count(n);
    ASSERT_EQ(hits, expect_hits);
    ASSERT_EQ(static_cast<int64_t>(loads.size()), static_cast<int64_t>(wanted.size()) - expect_hits);
    std::set<int32_t> used;
    for (size_t k = 0; k < wanted.size(); ++k) {
      ASSERT_EQ(map.neuron_in(slots[k]), wanted[k]);
      ASSERT_TRUE(used.insert(slots[k]).second) << "a slot given twice";
    }
    for (const SlotLoad& ld : loads) {
      ASSERT_EQ(resident.count(ld.neuron), 0u) << "a resident neuron was loaded again";
      ASSERT_EQ(map.neuron_in(ld.slot), ld.neuron);
    }
    // What stays resident: the wanted set, plus neurons in slots nobody took.
    resident.clear();
    for (int32_t s = 0; s < cap; ++s) {
      if (map.neuron_in(s) >= 0) resident.insert(map.neuron_in(s));
    }
    for (int32_t n : wanted) ASSERT_EQ(resident.count(n), 1u);
  }
}

TEST(CacheUnitTest, SlotsHoldTheStoreRowsAndOnlyChangesAreCopied) {
  const Mlp m = RandomMlp(64, 128, 11);
  const MlpWeights w[1] = {m.view()};
  auto store = NeuronStore::Build(w, {DType::kQ8_0, DType::kQ4_0}, nullptr);
  ASSERT_TRUE(store.ok());
  auto tier = MakeHostTier();
  const NeuronRows& src = (*store)->layer(0).at[kLow];
  auto unit = CacheUnit::Create(src, 40, tier.get());
  ASSERT_TRUE(unit.ok()) << unit.status().ToString();
  const size_t row = src.gate.row_bytes();
  std::mt19937 rng(12);
  std::vector<int32_t> slots(40);
  std::vector<int32_t> prev;
  for (int step = 0; step < 50; ++step) {
    std::set<int32_t> want(prev.begin(), prev.begin() + static_cast<long>(prev.size() / 2));
    while (want.size() < 40) want.insert(static_cast<int32_t>(rng() % 128));
    std::vector<int32_t> wanted(want.begin(), want.end());
    uint64_t bytes = 0;
    const int64_t hits = unit->Update(src, wanted, slots.data(), &bytes);
    ASSERT_EQ(bytes, 3 * row * static_cast<uint64_t>(40 - hits));
    ASSERT_TRUE(tier->Flush().ok());
    for (size_t k = 0; k < wanted.size(); ++k) {
      ASSERT_EQ(std::memcmp(unit->rows().gate.row(slots[k]), src.gate.row(wanted[k]), row), 0);
      ASSERT_EQ(std::memcmp(unit->rows().up.row(slots[k]), src.up.row(wanted[k]), row), 0);
      ASSERT_EQ(std::memcmp(unit->rows().down_t.row(slots[k]), src.down_t.row(wanted[k]), row), 0);
    }
    prev = wanted;
  }
  uint64_t bytes = 0;
  EXPECT_EQ(unit->Update(src, prev, slots.data(), &bytes), 40);  // the same set again: all hits
  EXPECT_EQ(bytes, 0u);
}

TEST(RatioSearchTest, CandidatesSpendTheSameBytesFromUniformLowToUniformHigh) {
  const double n = 34.0 / 18.0;  // Q8_0 against Q4_0
  auto c = RatioCandidates(0.5, 0.05, n);
  ASSERT_GE(c.size(), 3u);
  EXPECT_DOUBLE_EQ(c.front().r_high, 0.0);
  EXPECT_DOUBLE_EQ(c.front().r_low, 0.5);
  EXPECT_DOUBLE_EQ(c.back().r_low, 0.0);
  EXPECT_NEAR(c.back().r_high, 0.5 / n, 1e-12);
  for (const auto& p : c) {
    EXPECT_NEAR(p.r_low + n * p.r_high, 0.5, 1e-9) << p.r_high;
    EXPECT_LE(p.r_high + p.r_low, 1.0 + 1e-12);
  }
  // A budget larger than all neurons at low precision caps r_low at what is left.
  for (const auto& p : RatioCandidates(1.5, 0.1, n)) EXPECT_LE(p.r_high + p.r_low, 1.0 + 1e-12);
  EXPECT_TRUE(RatioCandidates(0.5, 0.0, n).empty());
}

TEST(RatioSearchTest, PicksTheLowestScoreAndPassesErrorsOn) {
  auto c = RatioCandidates(0.25, 0.02, 2.0);
  auto best = SearchRatios(&c, [](const RatioPoint& p) -> Result<double> { return (p.r_high - 0.06) * (p.r_high - 0.06); });
  ASSERT_TRUE(best.ok());
  EXPECT_NEAR(c[*best].r_high, 0.06, 1e-12);
  auto bad = SearchRatios(&c, [](const RatioPoint&) -> Result<double> { return Status::IoError("disk"); });
  EXPECT_FALSE(bad.ok());
}

TEST(MixConfigTest, ParsesEveryKeyAndNamesTheBadPart) {
  auto c = ParseMixConfig("high=0.2,low=0.3,hi=f16,lo=q4_0,rank=32,predictor=oracle,units=off,recall=on");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->r_high, 0.2);
  EXPECT_DOUBLE_EQ(c->r_low, 0.3);
  EXPECT_EQ(c->types.high, DType::kF16);
  EXPECT_EQ(c->types.low, DType::kQ4_0);
  EXPECT_EQ(c->rank, 32);
  EXPECT_EQ(c->predictor, PredictorKind::kOracle);
  EXPECT_FALSE(c->cache_units);
  EXPECT_TRUE(c->measure_recall);
  EXPECT_TRUE(ParseMixConfig("").ok());
  for (const char* bad : {"high=2", "high=0.7,low=0.7", "hi=q9", "rank=0", "rank=x", "bogus=1", "high", "high=0.1,,low=0.2",
                          "predictor=magic", "units=maybe"}) {
    auto r = ParseMixConfig(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("--m2cache"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace weir::m2cache
