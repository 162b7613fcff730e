#include "prune/targets.h"

#include <algorithm>
#include <cmath>

namespace weir::prune {

std::string_view TargetMethodName(TargetMethod m) {
  switch (m) {
    case TargetMethod::kGlobal:
      return "global";
    case TargetMethod::kLayer:
      return "layer";
    case TargetMethod::kProjection:
      return "projection";
  }
  return "?";
}

Result<TargetMethod> ParseTargetMethod(std::string_view name) {
  for (TargetMethod m : {TargetMethod::kGlobal, TargetMethod::kLayer, TargetMethod::kProjection}) {
    if (name == TargetMethodName(m)) return m;
  }
  return Status::InvalidArgument(
      StrFormat("unknown pruning method '%.*s' (global, layer or projection)",
                static_cast<int>(name.size()), name.data()));
}

std::string_view TargetAverageName(TargetAverage a) {
  return a == TargetAverage::kParams ? "params" : "uniform";
}

Result<TargetAverage> ParseTargetAverage(std::string_view name) {
  if (name == "params") return TargetAverage::kParams;
  if (name == "uniform") return TargetAverage::kUniform;
  return Status::InvalidArgument(StrFormat("unknown target average '%.*s' (params or uniform)",
                                           static_cast<int>(name.size()), name.data()));
}

double PruneTargets::Mean(TargetAverage average) const {
  double num = 0, den = 0;
  for (size_t l = 0; l < sparsity.size(); ++l) {
    for (int p = 0; p < kNumProjections; ++p) {
      const double w = average == TargetAverage::kParams
                           ? static_cast<double>(params[l][static_cast<size_t>(p)])
                           : 1.0;
      num += w * sparsity[l][static_cast<size_t>(p)];
      den += w;
    }
  }
  return den > 0 ? num / den : 0.0;
}

double PruneTargets::BlockMean(int layer, bool attention) const {
  double num = 0, den = 0;
  for (Projection p : kAllProjections) {
    if (IsAttention(p) != attention) continue;
    const double w =
        static_cast<double>(params[static_cast<size_t>(layer)][static_cast<size_t>(p)]);
    num += w * at(layer, p);
    den += w;
  }
  return den > 0 ? num / den : 0.0;
}

Status CheckTargetFraction(double p) {
  if (!std::isfinite(p) || p < 0 || p >= 1) {
    return Status::InvalidArgument(StrFormat("pruning target %g is outside [0, 1)", p));
  }
  return Status::Ok();
}

Result<std::vector<double>> SpreadByOutlierRatio(std::span<const double> ratios,
                                                 std::span<const double> weights, double p,
                                                 double lambda, double max_sparsity) {
  WEIR_RETURN_IF_ERROR(CheckTargetFraction(p));
  if (ratios.size() != weights.size() || ratios.empty()) {
    return Status::InvalidArgument(
        StrFormat("outlier spread: %zu ratios and %zu weights", ratios.size(), weights.size()));
  }
  if (!std::isfinite(lambda) || lambda < 0) {
    return Status::InvalidArgument(
        StrFormat("outlier spread: lambda %g must be finite and >= 0", lambda));
  }
  if (!(max_sparsity > 0) || max_sparsity >= 1) {
    return Status::InvalidArgument(
        StrFormat("outlier spread: max sparsity %g is outside (0, 1)", max_sparsity));
  }
  if (p > max_sparsity) {
    return Status::InvalidArgument(StrFormat(
        "pruning target %g exceeds the largest per-projection target %g", p, max_sparsity));
  }
  double total_w = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0) || !std::isfinite(weights[i]) || !std::isfinite(ratios[i])) {
      return Status::InvalidArgument(
          StrFormat("outlier spread: entry %zu has weight %g, ratio %g", i, weights[i], ratios[i]));
    }
    total_w += weights[i];
  }
  std::vector<double> out(ratios.size(), 0.0);
  if (p == 0) return out;
  const auto [mn, mx] = std::minmax_element(ratios.begin(), ratios.end());
  const double rmin = *mn, rmax = *mx;
  std::vector<double> base(ratios.size(), 0.0);  // density offsets in [0, 2*lambda]
  if (rmax > rmin) {
    for (size_t i = 0; i < ratios.size(); ++i)
      base[i] = 2 * lambda * (ratios[i] - rmin) / (rmax - rmin);
  }
  const double lo_density = 1 - max_sparsity, want = (1 - p) * total_w;
  auto mean_density = [&](double c) {
    double s = 0;
    for (size_t i = 0; i < base.size(); ++i)
      s += weights[i] * std::clamp(base[i] + c, lo_density, 1.0);
    return s;
  };
  // mean_density is continuous and non-decreasing in c; at lo it is lo_density * W <= want, at
  // hi it is W > want.
  double lo = lo_density - 2 * lambda - 1, hi = 1.0;
  for (int it = 0; it < 200 && hi - lo > 0; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    (mean_density(mid) < want ? lo : hi) = mid;
  }
  const double c = mean_density(hi) - want <= want - mean_density(lo) ? hi : lo;
  for (size_t i = 0; i < base.size(); ++i) out[i] = 1 - std::clamp(base[i] + c, lo_density, 1.0);
  return out;
}

Result<PruneTargets> ComputeTargets(TargetMethod method, double p,
                                    const std::vector<LayerProjections>& layers,
                                    const OutlierStats* stats, const TargetOptions& options) {
  WEIR_RETURN_IF_ERROR(CheckTargetFraction(p));
  if (layers.empty()) return Status::InvalidArgument("pruning targets: the model has no layers");
  if (method != TargetMethod::kGlobal) {
    if (stats == nullptr) {
      return Status::InvalidArgument(StrFormat("pruning method %s needs outlier statistics",
                                               std::string(TargetMethodName(method)).c_str()));
    }
    if (stats->n_layers() != static_cast<int>(layers.size())) {
      return Status::InvalidArgument(
          StrFormat("outlier statistics cover %d layers, the model has %zu", stats->n_layers(),
                    layers.size()));
    }
  }
  PruneTargets t;
  t.method = method;
  t.target = p;
  t.options = options;
  const size_t n = layers.size();
  t.params.resize(n);
  t.sparsity.assign(n, {});
  for (size_t l = 0; l < n; ++l) {
    for (Projection pr : kAllProjections)
      t.params[l][static_cast<size_t>(pr)] = layers[l].params(pr);
  }
  const bool by_params = options.average == TargetAverage::kParams;
  if (method == TargetMethod::kGlobal) {
    if (p > options.max_sparsity) {
      return Status::InvalidArgument(
          StrFormat("pruning target %g exceeds the largest per-projection target %g", p,
                    options.max_sparsity));
    }
    for (auto& row : t.sparsity) row.fill(p);
    return t;
  }
  if (method == TargetMethod::kLayer) {
    std::vector<double> ratios(n), weights(n);
    for (size_t l = 0; l < n; ++l) {
      ratios[l] = stats->LayerRatio(static_cast<int>(l));
      weights[l] = by_params ? static_cast<double>(stats->LayerParams(static_cast<int>(l))) : 1.0;
    }
    WEIR_ASSIGN_OR_RETURN(
        std::vector<double> s,
        SpreadByOutlierRatio(ratios, weights, p, options.lambda, options.max_sparsity));
    for (size_t l = 0; l < n; ++l) t.sparsity[l].fill(s[l]);
    return t;
  }
  std::vector<double> ratios, weights;
  for (size_t l = 0; l < n; ++l) {
    for (Projection pr : kAllProjections) {
      ratios.push_back(stats->ProjectionRatio(static_cast<int>(l), pr));
      weights.push_back(by_params ? static_cast<double>(t.params[l][static_cast<size_t>(pr)])
                                  : 1.0);
    }
  }
  WEIR_ASSIGN_OR_RETURN(
      std::vector<double> s,
      SpreadByOutlierRatio(ratios, weights, p, options.lambda, options.max_sparsity));
  for (size_t l = 0; l < n; ++l) {
    for (int pr = 0; pr < kNumProjections; ++pr)
      t.sparsity[l][static_cast<size_t>(pr)] = s[l * kNumProjections + pr];
  }
  return t;
}

}  // namespace weir::prune
