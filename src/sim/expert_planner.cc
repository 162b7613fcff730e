#include "sim/expert_planner.h"

#include <cmath>

#include "sim/sim_report.h"
#include "sim/simulator.h"

namespace weir::sim {
namespace {

Status CheckExpertLayout(const ModelShape& shape, const MaskLayout& layout,
                         const std::string& routing) {
  bool ok = shape.n_experts > 1 && layout.n_layers == shape.n_layers &&
            layout.streams.size() == static_cast<size_t>(shape.n_layers);
  for (size_t l = 0; ok && l < layout.streams.size(); ++l) {
    const MaskStream& s = layout.streams[l];
    ok = s.name == kExpertUnitsKind && s.layer == static_cast<int>(l) &&
         s.n_units == static_cast<uint32_t>(shape.n_experts);
  }
  if (!ok) {
    return Status::InvalidArgument(StrFormat(
        "expert planner: routing '%s' is not one stream of %d experts (%s) per layer of '%s' "
        "(%d layers, %d experts): it needs a mixture of experts and a routing trace recorded on "
        "one (weir run --trace)",
        routing.c_str(), shape.n_experts, kExpertUnitsKind, shape.name.c_str(), shape.n_layers,
        shape.n_experts));
  }
  return Status::Ok();
}

}  // namespace

Result<ExpertPlan> PlanExperts(const ModelShape& shape, const DeviceProfile& device,
                               double memory_budget, const ExpertPlanOptions& o,
                               MaskSource* routing) {
  WEIR_RETURN_IF_ERROR(ValidateDeviceProfile(device, device.name));
  if (!(o.slack >= 0 && o.slack < 1)) {
    return Status::InvalidArgument(StrFormat("expert planner: slack %g outside [0, 1)", o.slack));
  }
  if (o.policies.empty()) return Status::InvalidArgument("expert planner: no cache policy");
  const MaskLayout& layout = routing->layout();
  WEIR_RETURN_IF_ERROR(CheckExpertLayout(shape, layout, routing->Describe()));

  SimConfig base;
  base.bits = o.bits;
  base.kv_bits = o.kv_bits;
  base.kv_len = o.kv_len;
  base.warmup_tokens = o.warmup_tokens;
  base.model_compute = o.model_compute;
  base.memory_bytes = 1e30;
  WEIR_ASSIGN_OR_RETURN(MemoryPlan whole, PlanMemory(shape, layout, device, base));
  double layer_experts = 0;  // one expert of every layer
  for (double b : whole.unit_bytes) layer_experts += b;

  ExpertPlan plan;
  plan.model = shape.name;
  plan.device = device.name;
  plan.routing = routing->Describe();
  plan.memory_budget = memory_budget;
  plan.n_layers = shape.n_layers;
  plan.n_experts = shape.n_experts;
  plan.n_experts_active = shape.n_experts_active;
  plan.expert_bytes = layer_experts / shape.n_layers;
  plan.static_bytes = whole.static_bytes;
  plan.all_cached_bytes = whole.static_bytes + whole.streamed_bytes;
  plan.slack = o.slack;
  if (!(memory_budget >= whole.static_bytes)) {
    auto B = [](double b) { return FormatDecimalBytes(b); };
    return Status::InvalidArgument(StrFormat(
        "memory budget %s is too small for '%s': the minimum is %s (%.0f bytes: everything but "
        "the experts, with the KV cache at %lld tokens; then no expert is cached)",
        B(memory_budget).c_str(), shape.name.c_str(), B(whole.static_bytes).c_str(),
        std::ceil(whole.static_bytes), static_cast<long long>(o.kv_len)));
  }

  // Every cache size that fits, each policy: the routing replayed through the simulator.
  for (int c = 0; c <= shape.n_experts; ++c) {
    const double need = whole.static_bytes + c * layer_experts;
    if (need > memory_budget) break;
    for (CachePolicy p : o.policies) {
      SimConfig cfg = base;
      cfg.memory_bytes = need;
      cfg.policy = p;
      WEIR_ASSIGN_OR_RETURN(SimResult r, Simulate(shape, device, cfg, routing));
      for (uint32_t units : r.plan.cache_units) {
        if (units != static_cast<uint32_t>(c)) {
          return Status::Internal(StrFormat("expert planner: %u experts cached in a layer, "
                                            "%d planned",
                                            units, c));
        }
      }
      ExpertPlanStep st;
      st.cached_experts = c;
      st.memory_bytes = need;
      st.policy = r.policy;
      st.hit_rate = r.hit_rate;
      st.storage_bytes_per_token = r.storage_bytes_per_token;
      uint64_t reads = 0;
      for (const LayerStats& l : r.layers) reads += l.storage_requests;
      st.reads_per_token = static_cast<double>(reads) / static_cast<double>(r.tokens_measured);
      st.tokens_per_second = r.tokens_per_second;
      plan.tokens_measured = r.tokens_measured;
      plan.steps.push_back(st);
    }
  }
  // At the budget: the fastest (steps are in c, then policy order, so the first maximum wins).
  const ExpertPlanStep* best = &plan.steps.front();
  for (const ExpertPlanStep& s : plan.steps) {
    if (s.tokens_per_second > best->tokens_per_second) best = &s;
  }
  plan.at_budget = *best;
  // The budget pick: the first step within slack of it, and the fastest policy at that c.
  const double floor_tps = (1 - o.slack) * best->tokens_per_second;
  const ExpertPlanStep* pick = nullptr;
  for (const ExpertPlanStep& s : plan.steps) {
    if (pick != nullptr && s.cached_experts != pick->cached_experts) break;
    if (pick == nullptr ? s.tokens_per_second >= floor_tps
                        : s.tokens_per_second > pick->tokens_per_second) {
      pick = &s;
    }
  }
  plan.budget_pick = *pick;
  return plan;
}

}  // namespace weir::sim
