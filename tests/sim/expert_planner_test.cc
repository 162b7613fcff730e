// The expert planner (sim/expert_planner.h): the expert cache and the budget chosen from a
// routing, on hand-made routings whose hit counts are known.
#include "sim/expert_planner.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "sim/simulator.h"
#include "sim/sim_test_util.h"
#include "testing/testing.h"

namespace weir::sim {
namespace {

ExpertPlanOptions Options() {
  ExpertPlanOptions o;
  o.bits = WeightBits::Uniform(8);
  o.kv_len = 4;
  o.model_compute = false;
  return o;
}

double StaticBytes(const ModelShape& shape, const MaskLayout& layout) {
  SimConfig c;
  c.bits = WeightBits::Uniform(8);
  c.kv_len = 4;
  c.memory_bytes = 1e12;
  auto plan = PlanMemory(shape, layout, Flat(), c);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan->static_bytes;
}

// The routing of expert_sim_test.cc ({0,1} {0,2} {0,1} {2,3} {0,1}), whose hits at a cache of 2
// are counted by hand there: lru 2 of 10, lfu 3 of 10. A budget of 2.5 experts holds 2.
TEST(ExpertPlannerTest, EveryCacheSizeThatFitsAndTheBestAtTheBudget) {
  const ModelShape shape = OneLayerMoe();
  auto layout = MakeMaskLayout(shape, StreamSet::kExperts);
  ASSERT_TRUE(layout.ok());
  const double fixed = StaticBytes(shape, *layout);
  auto src = Routing(*layout, {{0, 1}, {0, 2}, {0, 1}, {2, 3}, {0, 1}});
  auto plan = PlanExperts(shape, Flat(), fixed + 2.5 * kExpertBytes, Options(), src.get());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_DOUBLE_EQ(plan->expert_bytes, kExpertBytes);
  EXPECT_DOUBLE_EQ(plan->static_bytes, fixed);
  EXPECT_DOUBLE_EQ(plan->all_cached_bytes, fixed + 4 * kExpertBytes);
  ASSERT_EQ(plan->steps.size(), 6u);  // c = 0, 1, 2 x lfu, lru
  for (size_t i = 0; i < plan->steps.size(); ++i) {
    const ExpertPlanStep& s = plan->steps[i];
    EXPECT_EQ(s.cached_experts, static_cast<int>(i / 2));
    EXPECT_EQ(s.policy, i % 2 == 0 ? "lfu" : "lru");
    EXPECT_DOUBLE_EQ(s.memory_bytes, fixed + s.cached_experts * kExpertBytes);
    // Flat 1 GB/s: storage bytes are the misses' whole experts.
    EXPECT_NEAR(s.storage_bytes_per_token, (1 - s.hit_rate) * 10 * kExpertBytes / 5, 1e-9);
  }
  EXPECT_DOUBLE_EQ(plan->steps[0].hit_rate, 0.0);
  EXPECT_DOUBLE_EQ(plan->steps[4].hit_rate, 0.3);  // c = 2, lfu
  EXPECT_DOUBLE_EQ(plan->steps[5].hit_rate, 0.2);  // c = 2, lru
  // c = 1: LFU keeps expert 0 (chosen at t0, t1, t2, t4): hits at t1, t2, t4, as many as with
  // 2 cached; LRU hits 0 at t1 and t2 only.
  EXPECT_DOUBLE_EQ(plan->steps[2].hit_rate, 0.3);  // c = 1, lfu
  EXPECT_DOUBLE_EQ(plan->steps[3].hit_rate, 0.2);  // c = 1, lru
  // So the routing says a second expert buys nothing: the best at the budget is c = 1 under
  // LFU (ties go to fewer experts), faster than LRU at either size.
  EXPECT_EQ(plan->at_budget.cached_experts, 1);
  EXPECT_EQ(plan->at_budget.policy, "lfu");
  EXPECT_DOUBLE_EQ(plan->at_budget.tokens_per_second, plan->steps[4].tokens_per_second);
  EXPECT_GT(plan->at_budget.tokens_per_second, plan->steps[5].tokens_per_second);
  // No slack: the pick is the best; all the slack in the world: no expert cached.
  EXPECT_EQ(plan->budget_pick.cached_experts, 1);
  ExpertPlanOptions loose = Options();
  loose.slack = 0.99;
  auto cheap = PlanExperts(shape, Flat(), fixed + 2.5 * kExpertBytes, loose, src.get());
  ASSERT_TRUE(cheap.ok()) << cheap.status().ToString();
  EXPECT_EQ(cheap->budget_pick.cached_experts, 0);
  EXPECT_EQ(cheap->at_budget.cached_experts, 1);
}

// What the planner is for: the routing, not the shape, decides the budget. A routing that keeps
// choosing experts 0 and 1 needs 2 cached; one that alternates {0,1} and {2,3} gains nothing
// from 2 under LRU and needs all 4.
TEST(ExpertPlannerTest, TheMeasuredRoutingPicksTheBudget) {
  const ModelShape shape = OneLayerMoe();
  auto layout = MakeMaskLayout(shape, StreamSet::kExperts);
  ASSERT_TRUE(layout.ok());
  const double fixed = StaticBytes(shape, *layout);
  ExpertPlanOptions o = Options();
  o.policies = {CachePolicy::kLru};
  o.warmup_tokens = 2;  // the first reads of every expert are not counted
  std::vector<std::vector<uint32_t>> same(12, {0, 1}), alternating;
  for (int t = 0; t < 12; ++t) alternating.push_back(t % 2 ? std::vector<uint32_t>{2, 3}
                                                           : std::vector<uint32_t>{0, 1});
  const double budget = fixed + 4 * kExpertBytes;  // every expert fits

  auto s1 = Routing(*layout, same);
  auto p1 = PlanExperts(shape, Flat(), budget, o, s1.get());
  ASSERT_TRUE(p1.ok()) << p1.status().ToString();
  ASSERT_EQ(p1->steps.size(), 5u);
  EXPECT_EQ(p1->tokens_measured, 10);
  EXPECT_DOUBLE_EQ(p1->steps[2].hit_rate, 1.0);
  EXPECT_EQ(p1->budget_pick.cached_experts, 2);
  EXPECT_DOUBLE_EQ(p1->budget_pick.memory_bytes, fixed + 2 * kExpertBytes);
  // The fastest is any c >= 2 (the same tok/s); ties go to fewer experts.
  EXPECT_EQ(p1->at_budget.cached_experts, 2);

  auto s2 = Routing(*layout, alternating);
  auto p2 = PlanExperts(shape, Flat(), budget, o, s2.get());
  ASSERT_TRUE(p2.ok()) << p2.status().ToString();
  EXPECT_DOUBLE_EQ(p2->steps[2].hit_rate, 0.0);
  EXPECT_DOUBLE_EQ(p2->steps[4].hit_rate, 1.0);
  EXPECT_EQ(p2->budget_pick.cached_experts, 4);
  EXPECT_EQ(p2->at_budget.cached_experts, 4);
  EXPECT_GT(p2->at_budget.tokens_per_second, 2 * p2->steps[2].tokens_per_second);
}

TEST(ExpertPlannerTest, RefusesSmallBudgetsAndLayoutsThatAreNotExperts) {
  const ModelShape shape = OneLayerMoe();
  auto layout = MakeMaskLayout(shape, StreamSet::kExperts);
  ASSERT_TRUE(layout.ok());
  const double fixed = StaticBytes(shape, *layout);
  auto src = Routing(*layout, {{0, 1}, {2, 3}});
  auto small = PlanExperts(shape, Flat(), fixed - 1, Options(), src.get());
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("the minimum is"), std::string::npos)
      << small.status().ToString();
  // Neuron masks of the MLP are not experts.
  auto mlp = MakeMaskLayout(shape, StreamSet::kMlp);
  ASSERT_TRUE(mlp.ok());
  VectorSource neurons(*mlp, {});
  auto wrong = PlanExperts(shape, Flat(), fixed * 2, Options(), &neurons);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("ffn_experts"), std::string::npos);
  ExpertPlanOptions bad = Options();
  bad.slack = 1;
  EXPECT_FALSE(PlanExperts(shape, Flat(), fixed * 2, bad, src.get()).ok());
}

}  // namespace
}  // namespace weir::sim
