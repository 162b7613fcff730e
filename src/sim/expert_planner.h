// The planner for a mixture of experts streamed with whole experts as the cache and read unit
// (weir pack's experts layout): from a routing (a recorded trace of the experts each layer chose
// per token, `weir run --trace` on a MoE model, or synthetic routing) it chooses the expert cache
// for a memory budget and the budget itself.
//
// ActiveFlow's planner (planner.h) chooses a sparsity and a cross-layer group size for channel
// streaming; neither applies here: the router fixes which experts run (k of n per layer and
// token), an expert is read as one record, and an experts pack has no cross-layer groups. What
// is left to choose is how much of the budget holds experts and under which policy, and what
// decides that is how often the routing reuses experts, which only a routing can say. So the
// cost model is the simulator itself (simulator.h): for c = 0, 1, ... experts cached per layer
// (the budget static + KV + c x the layers' expert bytes, the cache split evenly across
// layers as the simulator splits it) and each policy, the routing is replayed and gives the
// hit rate, bytes and reads per token and tok/s on the device. The plan is
//   at the budget: the (c, policy) with the highest tok/s that fits (ties: fewer experts, then
//                  the policy listed first);
//   budget pick:   the smallest c (and its best policy) whose tok/s is within `slack` of that:
//                  the budget beyond which more memory buys less than `slack`.
//
// Thread safety: pure functions of their inputs (they read the routing source).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "sim/device_profile.h"
#include "sim/mask_source.h"
#include "sim/model_shape.h"
#include "sim/unit_cache.h"

namespace weir::sim {

struct ExpertPlanOptions {
  WeightBits bits = WeightBits::Uniform(4);
  double kv_bits = 16;
  int64_t kv_len = 1024;
  std::vector<CachePolicy> policies = {CachePolicy::kLfu, CachePolicy::kLru};
  int64_t warmup_tokens = 0;
  bool model_compute = true;
  double slack = 0.05;  // the budget pick's allowed loss of tok/s, in [0, 1)
};

struct ExpertPlanStep {
  int cached_experts = 0;    // c: experts cached per layer
  double memory_bytes = 0;   // static + KV + c experts per layer
  std::string policy;
  double hit_rate = 0;       // chosen experts found cached
  double storage_bytes_per_token = 0;
  double reads_per_token = 0;
  double tokens_per_second = 0;
};

struct ExpertPlan {
  std::string model, device, routing;
  double memory_budget = 0;
  int n_layers = 0, n_experts = 0, n_experts_active = 0;
  double expert_bytes = 0;      // one expert (mean over layers)
  double static_bytes = 0;      // everything but the experts, KV cache included
  double all_cached_bytes = 0;  // static + every expert
  int64_t tokens_measured = 0;
  ExpertPlanStep at_budget;     // the best that fits the budget
  ExpertPlanStep budget_pick;   // the smallest budget within slack of at_budget
  double slack = 0;
  std::vector<ExpertPlanStep> steps;  // every (c, policy) evaluated, c ascending
};

// `routing`'s layout must be expert streams (kExpertUnitsKind) of `shape`, one per layer: a
// routing trace (tools: TraceMaskSource) or synthetic masks over StreamSet::kExperts.
// InvalidArgument for another layout, options out of range, or a budget below the static
// tensors (the message states the minimum).
Result<ExpertPlan> PlanExperts(const ModelShape& shape, const DeviceProfile& device,
                               double memory_budget, const ExpertPlanOptions& options,
                               MaskSource* routing);

}  // namespace weir::sim
