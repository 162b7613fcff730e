// Printing shared by `weir prune` and `weir prune-eval`: the per-projection targets table and
// its JSON form.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "prune/metric.h"
#include "prune/pruner.h"
#include "prune/targets.h"

namespace weir::tools {

// One line per layer: dims before -> after, then target (achieved) per projection.
std::string TargetsTable(const prune::PruneTargets& targets, const prune::PruneReport& report);

// {"method", "target", "mean_params", "mean_uniform", "layers": [{"dims_before", "dims_after",
// "projections": {"q": {"target", "sparsity", "params_before", "params_after", "outlier_ratio"}}}]}
// outlier ratios are included when `stats` is given.
nlohmann::json TargetsJson(const prune::PruneTargets& targets, const prune::PruneReport& report,
                           const prune::OutlierStats* stats);

}  // namespace weir::tools
