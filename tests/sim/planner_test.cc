// ActiveFlow planner: feasibility, the budget floor, the cost model by hand, and the greedy stop.
#include "sim/planner.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/testing.h"

namespace weir::sim {
namespace {

DeviceProfile Profile(const std::string& name) {
  auto p = LoadDeviceProfile(testing::SourceDir() + "/profiles/" + name + ".json");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

TEST(PlannerTest, FeasiblePlansStayWithinTheBudget) {
  for (const char* model : {"llama-2-7b", "mixtral-8x7b", "phi-3-mini"}) {
    auto shape = ModelPreset(model);
    ASSERT_TRUE(shape.ok());
    PlannerOptions o;
    auto min = MinimumPlanMemory(*shape, o);
    ASSERT_TRUE(min.ok());
    for (const char* dev : {"ufs4", "ufs3.1", "ufs2.2"}) {
      DeviceProfile d = Profile(dev);
      double prev_sp = 1;
      for (double f : {1.0, 1.5, 3.0, 6.0, 20.0}) {
        double budget = *min * f;
        auto plan = PlanActiveFlow(*shape, d, budget, o);
        ASSERT_TRUE(plan.ok()) << plan.status().ToString();
        EXPECT_LE(plan->memory_used, budget * (1 + 1e-9)) << model << " " << dev << " " << f;
        EXPECT_GE(plan->group_layers, 1);
        EXPECT_LE(plan->group_layers, shape->n_layers);
        EXPECT_GE(plan->sparsity, 0);
        EXPECT_LE(plan->sparsity, o.max_sparsity);
        EXPECT_GE(plan->cache_bytes, 0);
        EXPECT_GT(plan->tokens_per_second, 0);
        EXPECT_FALSE(plan->stop_reason.empty());
        // More memory buys accuracy: the sparsity never rises with the budget (tok/s may fall,
        // as ActiveFlow's Fig. 14 shows, since more active weights are read).
        EXPECT_LE(plan->sparsity, prev_sp + 1e-12) << model << " " << dev << " " << f;
        prev_sp = plan->sparsity;
      }
    }
  }
}

TEST(PlannerTest, RefusesImpossibleBudgetsWithTheMinimum) {
  auto shape = ModelPreset("llama-2-7b");
  PlannerOptions o;
  auto min = MinimumPlanMemory(*shape, o);
  ASSERT_TRUE(min.ok());
  auto plan = PlanActiveFlow(*shape, Profile("ufs3.1"), *min * 0.99, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(plan.status().message().find(StrFormat("(%.0f bytes", std::ceil(*min))),
            std::string::npos)
      << plan.status().ToString();
  EXPECT_TRUE(PlanActiveFlow(*shape, Profile("ufs3.1"), *min, o).ok());
}

TEST(PlannerTest, SparsityFollowsTheBudgetAndDenseWhenItFits) {
  auto shape = ModelPreset("llama-2-7b");
  PlannerOptions o;
  DeviceProfile d = Profile("ufs4");
  auto whole = PlanActiveFlow(*shape, d, 20 * kGB, o);
  ASSERT_TRUE(whole.ok());
  EXPECT_DOUBLE_EQ(whole->sparsity, 0);
  EXPECT_DOUBLE_EQ(whole->hit_rate, 1);  // everything cached
  EXPECT_EQ(whole->group_layers, 1);     // nothing to preload: T_preload = 0 <= T_comp
  // Half the streamed bytes available: sp = 0.5.
  double half = whole->fixed_bytes + whole->kv_bytes + 0.5 * whole->model_streamed_bytes;
  auto p = PlanActiveFlow(*shape, d, half, o);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->sparsity, 0.5, 1e-12);
}

TEST(PlannerTest, CostModelByHand) {
  // One flat-flash device, no compute rate, uniform hit rate: check Eq. 1-9 for the chosen N.
  auto shape = ModelPreset("llama-2-7b");
  DeviceProfile d;
  d.name = "hand";
  d.memory_bandwidth = 50 * kGB;
  d.storage_read.points = {{2048, 0.2 * kGB}, {2048.0 * 32, 2 * kGB}};
  PlannerOptions o;
  o.similarity = 0.9;
  auto min = MinimumPlanMemory(*shape, o);
  auto plan = PlanActiveFlow(*shape, d, 2.5 * kGB, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const PlanStep& st = plan->chosen;
  const int n = st.n;
  const double sp = plan->sparsity;
  const double s_l = plan->layer_bytes, s_m = plan->model_streamed_bytes;
  EXPECT_NEAR(sp, 1 - (2.5 * kGB - plan->fixed_bytes - plan->kv_bytes) / s_m, 1e-12);
  EXPECT_NEAR(st.group_bytes, s_l * (1 - sp) * n, 1e-3);  // Eq. 9
  EXPECT_NEAR(st.cache_bytes, 2.5 * kGB - plan->fixed_bytes - plan->kv_bytes - st.group_bytes,
              1e-3);  // Eq. 8
  const double hr = st.cache_bytes / s_m;
  EXPECT_NEAR(st.hit_rate, hr, 1e-12);
  // 4-bit 4096-wide channels are 2048 bytes: BW_small is the first point.
  EXPECT_NEAR(plan->channel_bytes, 2048, 1e-9);
  EXPECT_NEAR(st.bw_small, 0.2 * kGB, 1);
  EXPECT_NEAR(st.t_load, st.group_bytes * (1 - hr) / (0.2 * kGB), 1e-12);             // Eq. 3
  EXPECT_NEAR(st.t_comp, st.group_bytes / (50 * kGB), 1e-12);                         // Eq. 4
  EXPECT_NEAR(st.t_onload, st.group_bytes * (1 - hr) * 0.1 / (0.2 * kGB), 1e-12);     // Eq. 6
  EXPECT_NEAR(st.t_preload, st.group_bytes * (1 - hr) / st.bw_large, 1e-12);          // Eq. 7
  EXPECT_NEAR(st.t_overlap, st.t_onload + std::max(st.t_preload, st.t_comp), 1e-12);  // Eq. 5
  const double groups = 32.0 / n;
  EXPECT_NEAR(
      plan->seconds_per_token,
      st.t_load + (groups - 1) * st.t_overlap + st.t_comp + 4096.0 * 32000 * 0.5 / (50 * kGB),
      1e-12);  // Eq. 1 plus the output head
  // Larger groups read larger chunks: the search went past N = 1 on this slow small-read flash.
  EXPECT_GT(plan->steps.size(), 1u);
  EXPECT_GT(plan->steps[1].bw_large, plan->steps[0].bw_large);
  EXPECT_TRUE(min.ok());
}

TEST(PlannerTest, SimulatedHitRateRisesWithCacheAndSkew) {
  SyntheticSpec flat;
  flat.kind = SyntheticSpec::Kind::kZipf;
  flat.zipf_s = 0;
  SyntheticSpec skewed = flat;
  skewed.zipf_s = 1.2;
  auto hr_flat = SimulatedHitRate(flat, 2000, 100, CachePolicy::kLfu);
  auto hr_skew = SimulatedHitRate(skewed, 2000, 100, CachePolicy::kLfu);
  // Without skew the hit rate is about the cached fraction.
  EXPECT_NEAR(hr_flat(0.3, 0.2), 0.3, 0.05);
  EXPECT_GT(hr_skew(0.3, 0.2), hr_flat(0.3, 0.2) + 0.1);
  EXPECT_LT(hr_skew(0.1, 0.2), hr_skew(0.5, 0.2));
  EXPECT_DOUBLE_EQ(hr_skew(1.0, 0.2), 1.0);
  EXPECT_DOUBLE_EQ(hr_skew(0.0, 0.2), 0.0);
}

}  // namespace
}  // namespace weir::sim
