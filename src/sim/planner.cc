#include "sim/planner.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "sim/sim_report.h"
#include "sim/simulator.h"

namespace weir::sim {
namespace {

struct Sizes {
  double fixed = 0;  // resident, without KV
  double kv = 0;
  double s_m = 0;         // streamed bytes, model
  double s_l = 0;         // streamed bytes, mean layer
  double p_l = 0;         // streamed params, mean layer
  double channel = 0;     // mean bytes of one unit of one tensor
  double head_bytes = 0;  // read per token by the output stage
  double attn_flops_per_layer = 0;
};

Result<Sizes> ComputeSizes(const ModelShape& shape, const PlannerOptions& o) {
  WEIR_ASSIGN_OR_RETURN(MaskLayout layout, MakeMaskLayout(shape, o.streams));
  DeviceProfile any;
  any.name = "planner";
  any.memory_bandwidth = 1;
  any.storage_read = BandwidthCurve::Flat(1);
  SimConfig cfg;
  cfg.memory_bytes = 1e30;
  cfg.bits = o.bits;
  cfg.kv_bits = o.kv_bits;
  cfg.kv_len = o.kv_len;
  WEIR_ASSIGN_OR_RETURN(MemoryPlan mp, PlanMemory(shape, layout, any, cfg));
  Sizes s;
  s.kv = mp.kv_bytes;
  s.fixed = mp.static_bytes - mp.kv_bytes;
  s.s_m = mp.streamed_bytes;
  s.s_l = s.s_m / shape.n_layers;
  double params = 0, channels = 0;
  for (const MaskStream& st : layout.streams) {
    params += static_cast<double>(st.UnitWeights()) * st.n_units;
    channels += static_cast<double>(st.n_units) * static_cast<double>(st.tensors.size());
  }
  s.p_l = params / shape.n_layers;
  s.channel = channels > 0 ? s.s_m / channels : 0;
  TensorKind head = shape.tied_output ? TensorKind::kTokenEmbd : TensorKind::kOutput;
  s.head_bytes = WeightBytes(shape.TensorParams(TensorKind::kTokenEmbd, 0), o.bits.Of(head));
  double heads = 0;
  for (const LayerShape& L : shape.layers) heads += L.n_head;
  s.attn_flops_per_layer =
      4.0 * heads / shape.n_layers * shape.head_dim * static_cast<double>(o.kv_len);
  return s;
}

Status CheckOptions(const PlannerOptions& o) {
  if (!(o.max_sparsity >= 0 && o.max_sparsity < 1)) {
    return Status::InvalidArgument(StrFormat("max sparsity %g outside [0, 1)", o.max_sparsity));
  }
  if (!(o.similarity >= 0 && o.similarity <= 1)) {
    return Status::InvalidArgument(StrFormat("similarity %g outside [0, 1]", o.similarity));
  }
  if (!(o.stop_fraction >= 0 && o.stop_fraction < 1)) {
    return Status::InvalidArgument(StrFormat("stop fraction %g outside [0, 1)", o.stop_fraction));
  }
  return Status::Ok();
}

}  // namespace

HitRateModel UniformHitRate() {
  return [](double cache_fraction, double) { return std::clamp(cache_fraction, 0.0, 1.0); };
}

HitRateModel SimulatedHitRate(SyntheticSpec spec, uint32_t units, int64_t tokens,
                              CachePolicy policy) {
  return [spec, units, tokens, policy](double cache_fraction, double density) -> double {
    if (cache_fraction >= 1) return 1;
    if (cache_fraction <= 0 || units == 0 || tokens <= 0) return 0;
    MaskLayout layout;
    layout.n_layers = 1;
    MaskStream s;
    s.name = "units";
    s.tensors = {TensorKind::kFfnUp};
    s.weights_per_unit = {1};
    s.n_units = units;
    layout.streams.push_back(s);
    SyntheticSpec sp = spec;
    sp.density = std::clamp(density, 0.0, 1.0);
    auto src = MakeSyntheticSource(layout, sp, tokens);
    if (!src.ok()) return std::clamp(cache_fraction, 0.0, 1.0);
    uint32_t k = static_cast<uint32_t>(std::min<double>(units, std::floor(cache_fraction * units)));
    auto cache = UnitCache::Create(policy, units, k);
    std::unique_ptr<OccurrenceMatrix> future;
    TokenMasks m;
    std::vector<uint32_t> active;
    if (policy == CachePolicy::kBelady) {
      future = std::make_unique<OccurrenceMatrix>(units, tokens);
      for (int64_t t = 0; *(*src)->Next(&m); ++t) {
        active.clear();
        m.masks[0].AppendActive(&active);
        for (uint32_t u : active) future->Set(u, t);
      }
      (void)(*src)->Rewind();
    }
    const int64_t warm = tokens / 10;
    double hits = 0, total = 0;
    AccessResult r;
    for (int64_t t = 0; *(*src)->Next(&m); ++t) {
      active.clear();
      m.masks[0].AppendActive(&active);
      cache->Access(t, active, future.get(), &r);
      if (t >= warm) {
        hits += r.hits;
        total += static_cast<double>(active.size());
      }
    }
    return total > 0 ? hits / total : 0;
  };
}

Result<double> MinimumPlanMemory(const ModelShape& shape, const PlannerOptions& o) {
  WEIR_RETURN_IF_ERROR(CheckOptions(o));
  WEIR_ASSIGN_OR_RETURN(Sizes s, ComputeSizes(shape, o));
  return s.fixed + s.kv + s.s_l * (1 - o.max_sparsity);
}

Result<Plan> PlanActiveFlow(const ModelShape& shape, const DeviceProfile& device,
                            double memory_budget, const PlannerOptions& o) {
  WEIR_RETURN_IF_ERROR(CheckOptions(o));
  WEIR_RETURN_IF_ERROR(ValidateDeviceProfile(device, device.name));
  WEIR_ASSIGN_OR_RETURN(Sizes s, ComputeSizes(shape, o));
  const double minimum = s.fixed + s.kv + s.s_l * (1 - o.max_sparsity);
  if (!(memory_budget >= minimum)) {
    auto B = [](double b) { return FormatDecimalBytes(b); };
    return Status::InvalidArgument(StrFormat(
        "memory budget %s is too small for '%s': the minimum is %s (%.0f bytes: resident %s + "
        "KV cache %s at %lld tokens + one layer's active weights %s at sparsity %.2f)",
        B(memory_budget).c_str(), shape.name.c_str(), B(minimum).c_str(), std::ceil(minimum),
        B(s.fixed).c_str(), B(s.kv).c_str(), static_cast<long long>(o.kv_len),
        B(s.s_l * (1 - o.max_sparsity)).c_str(), o.max_sparsity));
  }
  HitRateModel hit_rate = o.hit_rate ? o.hit_rate : UniformHitRate();
  const bool compute = o.model_compute && device.flops_per_s > 0;
  const double avail = memory_budget - s.fixed - s.kv;
  const int L = shape.n_layers;

  Plan plan;
  plan.model = shape.name;
  plan.device = device.name;
  plan.memory_budget = memory_budget;
  plan.sparsity = std::clamp(1 - avail / s.s_m, 0.0, o.max_sparsity);
  plan.kv_bytes = s.kv;
  plan.fixed_bytes = s.fixed;
  plan.layer_bytes = s.s_l;
  plan.model_streamed_bytes = s.s_m;
  plan.channel_bytes = s.channel;
  const double density = 1 - plan.sparsity;
  const double bw_small = device.storage_read.At(s.channel);
  const double t_head = s.head_bytes / device.memory_bandwidth;

  double prev_preload = -1;
  int best = -1;
  for (int n = 1; n <= L; ++n) {
    PlanStep st;
    st.n = n;
    st.group_bytes = s.s_l * density * n;
    if (st.group_bytes > avail + 1e-6) {
      plan.stop_reason = StrFormat("a group of %d layers no longer fits the budget", n);
      break;
    }
    st.cache_bytes = std::clamp(avail - st.group_bytes, 0.0, s.s_m);
    st.hit_rate = std::clamp(hit_rate(st.cache_bytes / s.s_m, density), 0.0, 1.0);
    st.bw_small = bw_small;
    st.bw_large = device.storage_read.At(s.channel * n);
    const double miss = 1 - st.hit_rate;
    st.t_load = st.group_bytes * miss / st.bw_small;
    st.t_comp = st.group_bytes / device.memory_bandwidth;
    if (compute) {
      double flops = n * (2.0 * s.p_l * density + s.attn_flops_per_layer);
      st.t_comp = std::max(st.t_comp, flops / device.flops_per_s);
    }
    st.t_onload = st.group_bytes * miss * (1 - o.similarity) / st.bw_small;
    st.t_preload = st.group_bytes * miss / st.bw_large;
    st.t_overlap = st.t_onload + std::max(st.t_preload, st.t_comp);
    const double groups = static_cast<double>(L) / n;  // a partial last group counts partly
    st.t_decode = st.t_load + (groups - 1) * st.t_overlap + st.t_comp + t_head;
    plan.steps.push_back(st);
    if (best < 0 || st.t_decode < plan.steps[static_cast<size_t>(best)].t_decode) {
      best = static_cast<int>(plan.steps.size()) - 1;
    }
    if (st.t_preload <= st.t_comp) {
      plan.stop_reason = StrFormat("preloading hides under compute at N = %d", n);
      break;
    }
    // Per-layer preload time is what a larger N improves; stop when it stops improving.
    double per_layer = st.t_preload / n;
    if (prev_preload > 0 && prev_preload - per_layer < o.stop_fraction * prev_preload) {
      plan.stop_reason = StrFormat("preload time per layer improved by less than %.0f%% at N = %d",
                                   100 * o.stop_fraction, n);
      break;
    }
    prev_preload = per_layer;
    if (n == L) plan.stop_reason = "every layer is in one group";
  }
  if (best < 0) {
    return Status::Internal(StrFormat("planner found no group size for '%s'", shape.name.c_str()));
  }
  plan.chosen = plan.steps[static_cast<size_t>(best)];
  plan.group_layers = plan.chosen.n;
  plan.group_bytes = plan.chosen.group_bytes;
  plan.cache_bytes = plan.chosen.cache_bytes;
  plan.hit_rate = plan.chosen.hit_rate;
  plan.memory_used = plan.group_bytes + plan.cache_bytes + plan.kv_bytes + plan.fixed_bytes;
  plan.seconds_per_token = plan.chosen.t_decode;
  plan.tokens_per_second = 1 / plan.seconds_per_token;
  return plan;
}

}  // namespace weir::sim
