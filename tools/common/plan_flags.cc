#include "common/plan_flags.h"

#include <cstdio>

#include "base/units.h"
#include "format/model_file.h"
#include "format/weir_pack_reader.h"
#include "sim/planner.h"
#include "sim/tool_inputs.h"

namespace weir::tools {

void AddPlanFlags(CLI::App& app, PlanFlags* f) {
  app.add_option("--plan", f->plan,
                 "auto: choose sparsity and read-ahead with ActiveFlow's planner for the model, "
                 "--plan-device and the budget (--memory for a pack), print the plan on stderr, "
                 "and run with it (docs/simulator.md)")
      ->check(CLI::IsMember({"auto"}));
  app.add_option("--plan-device", f->device,
                 "device profile the plan is made for (default this-machine)");
}

Status ApplyPlan(const PlanFlags& pf, const ModelFlags& mf, SparsityFlags* spf,
                 StreamingFlags* stf, bool prefetch_given, bool sparsity_given) {
  if (pf.plan.empty()) return Status::Ok();
  if (sparsity_given) {
    return Status::InvalidArgument("--plan auto chooses the sparsity; drop --sparsity");
  }
  if (prefetch_given) {
    return Status::InvalidArgument("--plan auto chooses the read-ahead; drop --prefetch");
  }
  WEIR_ASSIGN_OR_RETURN(sim::DeviceProfile dev, ResolveDevice(pf.device));
  const bool pack = IsPackFile(mf.model);
  SimModel m;
  sim::PlannerOptions o;
  double budget = 0;
  if (pack) {
    if (stf->memory.empty()) {
      return Status::InvalidArgument("--plan auto with a weir pack needs --memory (the budget)");
    }
    WEIR_ASSIGN_OR_RETURN(uint64_t b, ParseBytes(stf->memory));
    budget = static_cast<double>(b);
    WEIR_ASSIGN_OR_RETURN(m, ModelFromPack(mf.model));
    o.max_sparsity = 0;  // the engine streams a pack dense
  } else {
    WEIR_ASSIGN_OR_RETURN(format::ModelFile file, format::LoadModel(mf.model));
    WEIR_ASSIGN_OR_RETURN(m, ModelFromFile(file));
    budget = dev.memory_capacity_bytes;
  }
  if (m.file_bits) o.bits = *m.file_bits;
  if (mf.ctx > 0) o.kv_len = mf.ctx;
  o.kv_bits = 32;  // weir's KV cache is f32
  WEIR_ASSIGN_OR_RETURN(sim::Plan plan, sim::PlanActiveFlow(m.shape, dev, budget, o));
  const double density = 1.0 - plan.sparsity;
  if (plan.sparsity > 0) spf->spec = StrFormat("topk-all:%.3f", density);
  stf->prefetch = plan.group_layers;
  std::fprintf(stderr,
               "plan (ActiveFlow, device %s, budget %s%s): sparsity %.2f (%s), N = %d layers per "
               "preload group (--prefetch %d), cache %s, predicted %.3f tok/s\n",
               dev.name.c_str(), FormatBytes(static_cast<uint64_t>(budget)).c_str(),
               pack ? "" : " = the profile's memory", plan.sparsity,
               plan.sparsity > 0 ? spf->spec.c_str() : "dense", plan.group_layers,
               plan.group_layers, FormatBytes(static_cast<uint64_t>(plan.cache_bytes)).c_str(),
               plan.tokens_per_second);
  return Status::Ok();
}

}  // namespace weir::tools
