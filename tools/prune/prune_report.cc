#include "prune/prune_report.h"

#include <cstdio>

namespace weir::tools {

std::string TargetsTable(const prune::PruneTargets& t, const prune::PruneReport& r) {
  std::string out = StrFormat(
      "targets: method %s, P = %.4f; mean %.4f weighted by parameters, %.4f plain; "
      "(achieved sparsity = 1 - nonzero / original params)\n",
      std::string(prune::TargetMethodName(t.method)).c_str(), t.target,
      t.Mean(prune::TargetAverage::kParams), t.Mean(prune::TargetAverage::kUniform));
  out += StrFormat("%-5s %-17s %-11s", "layer", "heads (kv)", "d_ff");
  for (prune::Projection p : prune::kAllProjections)
    out += StrFormat(" %-14s", std::string(prune::ProjectionName(p)).c_str());
  out += "\n";
  for (int l = 0; l < t.n_layers(); ++l) {
    const size_t li = static_cast<size_t>(l);
    std::string heads = "?", ff = "?";
    if (li < r.dims_before.size() && li < r.dims_after.size()) {
      const auto& b = r.dims_before[li];
      const auto& a = r.dims_after[li];
      heads = StrFormat("%d(%d)->%d(%d)", b.n_head, b.n_head_kv, a.n_head, a.n_head_kv);
      ff = StrFormat("%d->%d", b.d_ff, a.d_ff);
    }
    out += StrFormat("%-5d %-17s %-11s", l, heads.c_str(), ff.c_str());
    for (prune::Projection p : prune::kAllProjections) {
      const double achieved =
          li < r.projections.size() ? r.projections[li][static_cast<size_t>(p)].sparsity() : 0;
      out += StrFormat(" %.3f (%.3f)  ", t.at(l, p), achieved);
    }
    out += "\n";
  }
  return out;
}

nlohmann::json TargetsJson(const prune::PruneTargets& t, const prune::PruneReport& r,
                           const prune::OutlierStats* stats) {
  nlohmann::json j;
  j["method"] = std::string(prune::TargetMethodName(t.method));
  j["target"] = t.target;
  j["average"] = std::string(prune::TargetAverageName(t.options.average));
  j["lambda"] = t.options.lambda;
  j["mean_params"] = t.Mean(prune::TargetAverage::kParams);
  j["mean_uniform"] = t.Mean(prune::TargetAverage::kUniform);
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < t.n_layers(); ++l) {
    const size_t li = static_cast<size_t>(l);
    nlohmann::json L;
    if (li < r.dims_before.size() && li < r.dims_after.size()) {
      const auto& b = r.dims_before[li];
      const auto& a = r.dims_after[li];
      L["dims_before"] = {{"n_head", b.n_head}, {"n_head_kv", b.n_head_kv}, {"d_ff", b.d_ff}};
      L["dims_after"] = {{"n_head", a.n_head}, {"n_head_kv", a.n_head_kv}, {"d_ff", a.d_ff}};
    }
    if (stats && l < stats->n_layers()) L["layer_outlier_ratio"] = stats->LayerRatio(l);
    nlohmann::json projections;
    for (prune::Projection p : prune::kAllProjections) {
      nlohmann::json e = {{"target", t.at(l, p)}};
      if (li < r.projections.size()) {
        const auto& pr = r.projections[li][static_cast<size_t>(p)];
        e["sparsity"] = pr.sparsity();
        e["params_before"] = pr.params_before;
        e["params_after"] = pr.params_after;
        e["nonzero_after"] = pr.nonzero_after;
      }
      if (stats && l < stats->n_layers()) e["outlier_ratio"] = stats->ProjectionRatio(l, p);
      projections[std::string(prune::ProjectionName(p))] = e;
    }
    L["projections"] = projections;
    layers.push_back(L);
  }
  j["layers"] = layers;
  return j;
}

}  // namespace weir::tools
