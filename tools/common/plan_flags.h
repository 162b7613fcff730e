// `--plan auto` of weir run: ActiveFlow's planner (sim/planner.h) chooses the sparsity and the
// layer-group size for the model, a device profile (--plan-device, default this-machine) and the
// memory budget, prints its choice on stderr, and the run uses it:
//   sparsity  `topk-all:(1 - sp)` when sp > 0 (ActiveFlow prunes every linear operator by
//             activation magnitude), dense otherwise;
//   N         the read-ahead depth of a streamed pack (--prefetch N: the next N layers load
//             while one computes, ActiveFlow's cross-layer preloading);
//   cache     the engine's memory plan gives the cache what the budget leaves (the planner's
//             M_cache is printed for comparison).
// For a weir pack the planner is asked for sp = 0 (max_sparsity 0: choosing a column pack's
// sparse-streaming density is not wired yet) and the budget is --memory; a model run resident has no
// budget flag, so the budget is the profile's memory capacity.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"
#include "common/model_flags.h"
#include "common/streaming_flags.h"

namespace weir::tools {

struct PlanFlags {
  std::string plan;                   // "" or "auto"
  std::string device = "this-machine";  // --plan-device: profile name or JSON path
};
void AddPlanFlags(CLI::App& app, PlanFlags* flags);

// With --plan auto: plans, prints the choice on stderr, and sets sparsity->spec and
// streaming->prefetch (before ParseSparsityFlags and LoadRunModel). InvalidArgument when the
// plan conflicts with an explicit --sparsity or --prefetch.
Status ApplyPlan(const PlanFlags& plan, const ModelFlags& model, SparsityFlags* sparsity,
                 StreamingFlags* streaming, bool prefetch_given, bool sparsity_given);

}  // namespace weir::tools
