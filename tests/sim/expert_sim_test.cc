// Whole experts as the simulator's cache and read unit (routing traces of a mixture of experts):
// a hand-made routing whose hits, bytes and reads are counted by hand for every policy.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "sim/simulator.h"
#include "sim/sim_test_util.h"
#include "testing/testing.h"

namespace weir::sim {
namespace {

// Tokens route to {0,1} {0,2} {0,1} {2,3} {0,1}; the cache holds 2 experts.
std::unique_ptr<VectorSource> FiveTokens(const MaskLayout& layout) {
  return Routing(layout, {{0, 1}, {0, 2}, {0, 1}, {2, 3}, {0, 1}});
}

SimConfig Config(const ModelShape& shape, const MaskLayout& layout, CachePolicy policy) {
  SimConfig c;
  c.bits = WeightBits::Uniform(8);
  c.kv_len = 4;
  c.policy = policy;
  c.memory_bytes = 1e12;
  auto plan = PlanMemory(shape, layout, Flat(), c);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  c.memory_bytes = plan->static_bytes + 2.5 * kExpertBytes;  // room for 2 experts, not 3
  return c;
}

TEST(ExpertSimTest, LayoutMakesOneUnitPerExpert) {
  const ModelShape shape = OneLayerMoe();
  auto layout = MakeMaskLayout(shape, StreamSet::kExperts);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->streams.size(), 1u);
  const MaskStream& s = layout->streams[0];
  EXPECT_EQ(s.name, kExpertUnitsKind);
  EXPECT_EQ(s.n_units, 4u);
  EXPECT_TRUE(s.unit_records);
  EXPECT_EQ(s.UnitWeights(), 6144u);
  // Expert units need a mixture of experts with the same expert count.
  EXPECT_FALSE(MakeMaskStream(shape, 0, kExpertUnitsKind, 8, 0).ok());
  EXPECT_FALSE(MakeMaskLayout(UniformShape("dense", 64, 1, 4, 2, 16, 32, 100), StreamSet::kExperts)
                   .ok());
}

// By hand (a cache of 2; a miss is admitted only if it beats the worst cached expert):
//   lru:    t0 miss 0,1; t1 hit 0, miss 2 (evicts 1); t2 hit 0, miss 1 (evicts 2); t3 miss 2,3
//           (evict 0,1); t4 miss 0,1                                    -> 2 hits, 8 misses
//   lfu:    counts decide: t1 keeps 0 and admits 2 (count 1, newer than 1); t2 hit 0, 1 comes
//           back (count 2 > 1); t3 keeps 0 (3) and admits 2 (2, newer than 1's 2); t4 hit 0
//                                                                       -> 3 hits, 7 misses
//   belady: 2 at t1 is next used at t3, after 0 and 1 (t2): not admitted; t2 hits both; at t3
//           2 and 3 are never used again: 0,1 stay; t4 hits both          -> 5 hits, 5 misses
//   static: 0,1 from t0 on                                              -> 5 hits, 5 misses
// Reads: one per run of consecutive missed experts in a token (an expert record holds its gate,
// up and down): lru t0 {0,1}, t1 {2}, t2 {1}, t3 {2,3}, t4 {0,1} = 5; lfu 5 ({0,1},{2},{1},
// {2,3},{1}); belady and static 3 ({0,1}, {2}, {2,3}).
TEST(ExpertSimTest, HandCountedHitsBytesAndReadsForEveryPolicy) {
  const ModelShape shape = OneLayerMoe();
  auto layout = MakeMaskLayout(shape, StreamSet::kExperts);
  ASSERT_TRUE(layout.ok());
  struct Want {
    CachePolicy policy;
    uint64_t hits, misses, reads;
  } wants[] = {{CachePolicy::kLru, 2, 8, 5},
               {CachePolicy::kLfu, 3, 7, 5},
               {CachePolicy::kBelady, 5, 5, 3},
               {CachePolicy::kStatic, 5, 5, 3}};
  for (const Want& w : wants) {
    SCOPED_TRACE(CachePolicyName(w.policy));
    auto src = FiveTokens(*layout);
    const SimConfig c = Config(shape, *layout, w.policy);
    auto r = Simulate(shape, Flat(), c, src.get());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->plan.cache_units[0], 2u);
    EXPECT_DOUBLE_EQ(r->plan.unit_bytes[0], kExpertBytes);
    ASSERT_EQ(r->layers.size(), 1u);
    const LayerStats& l = r->layers[0];
    EXPECT_EQ(l.active, 10u);
    EXPECT_EQ(l.hits, w.hits);
    EXPECT_EQ(l.misses, w.misses);
    EXPECT_EQ(l.storage_requests, w.reads);
    EXPECT_DOUBLE_EQ(r->hit_rate, static_cast<double>(w.hits) / 10.0);
    EXPECT_DOUBLE_EQ(r->storage_bytes_per_token, w.misses * kExpertBytes / 5.0);
    // A flat 1 GB/s device: storage time is bytes / speed whatever the request sizes.
    EXPECT_NEAR(r->storage_s, w.misses * kExpertBytes / 1e9 / 5.0, 1e-15);
    EXPECT_GT(r->tokens_per_second, 0);
  }
}

}  // namespace
}  // namespace weir::sim
