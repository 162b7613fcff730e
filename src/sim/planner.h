// The planner: ActiveFlow's cost model (Jia et al., §4.1, Eq. 1-9) and its greedy search. For
// a model shape, a device profile and a memory budget it chooses the sparsity sp, the number of
// layers N in a cross-layer preload group and the weight-cache size, and predicts tok/s.
//
// Symbols (ActiveFlow Table 1) and how they are computed here:
//   S_l   streamed bytes of one layer (all linear tensors with StreamSet::kAll, as ActiveFlow
//         sparsifies every linear operator; the mean over layers)
//   S_m   streamed bytes of the model (sum of S_l)
//   M_kv  KV cache at kv_len tokens; M_fixed adds what ActiveFlow's Eq. 8 leaves implicit:
//         token embeddings, output head, norms and non-streamed tensors, which stay resident
//   sp    = 1 - (M_max - M_fixed) / S_m, clamped to [0, max_sparsity] (first greedy step)
//   M_cl  = S_l (1 - sp) N                                                      (Eq. 9)
//   M_cache = M_max - M_fixed - M_cl, at most S_m (1 - ...): the rest of the budget (Eq. 8)
//   hr    hit rate of the cache: a model hr(cache fraction, density); by default uniform
//         random masks, hr = M_cache / S_m; or measured by simulating synthetic masks
//   si    cross-layer similarity (default 0.95: ActiveFlow reports on-demand loads of ~5%)
//   BW_small = storage throughput at one channel (unit of one tensor);
//   BW_large = storage throughput at N channels, the chunk of the cross-layer layout (Fig. 9)
//   T_load    = M_cl (1 - hr) / BW_small                                        (Eq. 3)
//   T_comp    = M_cl / BW_mem, or FLOPs / rate when the profile has one and it is larger (Eq. 4)
//   T_onload  = M_cl (1 - hr)(1 - si) / BW_small: Eq. 6 prints S_l; scaled by N here so that
//               it is per group like Eqs. 3, 4 and 7                             (Eq. 6)
//   T_preload = M_cl (1 - hr) / BW_large                                        (Eq. 7)
//   T_overlap = T_onload + max(T_preload, T_comp)                               (Eq. 5)
//   T_decode  = T_load + (G - 1) T_overlap + T_comp + T_head, G = L / N          (Eq. 1; the
//               overlap repeats once per group transition, a partial last group counting as a
//               fraction of one; T_head reads the output head)
// Greedy search: N = 1, 2, ... while M_cl fits; stop when T_preload <= T_comp or when
// T_preload fell by less than stop_fraction; the plan is the evaluated N with the least T_decode.
//
// Thread safety: pure functions.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/device_profile.h"
#include "sim/mask_source.h"
#include "sim/model_shape.h"
#include "sim/synthetic_masks.h"
#include "sim/unit_cache.h"

namespace weir::sim {

// Hit rate of a cache holding `cache_fraction` of the streamed weights when a fraction
// `density` of the units is active per token.
using HitRateModel = std::function<double(double cache_fraction, double density)>;

// hr = cache_fraction (uniform random masks: every unit equally likely to be active).
HitRateModel UniformHitRate();
// Measures hr by running `policy` over masks from `spec` (its density replaced by the asked
// one) on one stream of `units` units for `tokens` tokens (the first 10% not counted).
HitRateModel SimulatedHitRate(SyntheticSpec spec, uint32_t units, int64_t tokens,
                              CachePolicy policy);

struct PlannerOptions {
  WeightBits bits = WeightBits::Uniform(4);
  double kv_bits = 16;
  int64_t kv_len = 1024;
  StreamSet streams = StreamSet::kAll;
  double max_sparsity = 0.8;    // ActiveFlow evaluates 0.5..0.8
  double similarity = 0.95;     // si
  double stop_fraction = 0.02;  // stop when T_preload improves by less than this fraction
  bool model_compute = true;    // use the profile's FLOP rate in T_comp
  HitRateModel hit_rate;        // empty = UniformHitRate()
};

struct PlanStep {
  int n = 0;  // layers per group
  double group_bytes = 0, cache_bytes = 0, hit_rate = 0;
  double bw_small = 0, bw_large = 0;
  double t_load = 0, t_comp = 0, t_onload = 0, t_preload = 0, t_overlap = 0, t_decode = 0;
};

struct Plan {
  std::string model, device;
  double memory_budget = 0;
  double sparsity = 0;
  int group_layers = 0;             // N
  double group_bytes = 0;           // M_cl
  double cache_bytes = 0;           // M_cache
  double kv_bytes = 0;              // M_kv
  double fixed_bytes = 0;           // embeddings, head, norms, non-streamed tensors (without KV)
  double memory_used = 0;           // M_cl + M_cache + M_kv + fixed
  double layer_bytes = 0;           // S_l
  double model_streamed_bytes = 0;  // S_m
  double channel_bytes = 0;
  double hit_rate = 0;
  double seconds_per_token = 0;
  double tokens_per_second = 0;
  PlanStep chosen;
  std::vector<PlanStep> steps;  // every N the greedy search evaluated
  std::string stop_reason;
};

// The smallest budget with a plan: fixed + KV + one layer's active weights at max_sparsity.
Result<double> MinimumPlanMemory(const ModelShape& shape, const PlannerOptions& options);

// Errors (InvalidArgument) when the budget is below MinimumPlanMemory, stating the minimum.
Result<Plan> PlanActiveFlow(const ModelShape& shape, const DeviceProfile& device,
                            double memory_budget, const PlannerOptions& options);

}  // namespace weir::sim
