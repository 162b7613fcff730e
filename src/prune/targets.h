// Pruning targets: the fraction of each projection's parameters to prune, from one overall
// target P in [0, 1), by three methods (Mosaic §3.1):
//
//   global      every projection gets P.
//   layer       OWL's layer outlier distribution (LOD): layer n gets p_n from its layer outlier
//               ratio D_n (metric.h, Eq. 4); all projections of the layer get p_n.
//   projection  Mosaic's projection outlier distribution (POD): projection (n, m) gets p_{n,m}
//               from its own outlier ratio (Eq. 6), normalised over all N*M projections.
//
// Outlier ratios become targets the way OWL does it (the Mosaic paper says only that the ranks
// are "normalized" and "scaled by the pruning target"): the ratios are mapped linearly onto
// densities spanning [0, 2*lambda] (more outliers -> more kept), then shifted by a common
// constant so that the average density is 1 - P. With lambda = 0.08 every target lies within
// P +- 0.08. When a shifted density would leave [1 - max_sparsity, 1] it is clamped and the
// shift is re-solved (bisection), so the average stays exactly P.
//
// Which average. Eq. 1-2 are plain means over layers and over the projections of a layer, but
// the paper defines P as the fraction of *parameters* pruned ("p = 0.3 prunes 30% of the model
// parameters"), and a plain mean over projections of very different sizes (k, v are 4-8x
// smaller than gate/up/down in GQA models) prunes a different number of parameters than
// global pruning does -- which would make the methods incomparable at equal P. weir therefore
// averages weighted by parameter count by default (TargetAverage::kParams): every method prunes
// the same number of parameters at the same P. TargetAverage::kUniform gives Eq. 1-2 literally
// (and OWL's own plain mean).
//
// Thread safety: plain values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "prune/metric.h"
#include "prune/projection.h"

namespace weir::prune {

enum class TargetMethod : uint8_t { kGlobal = 0, kLayer = 1, kProjection = 2 };
std::string_view TargetMethodName(TargetMethod m);  // "global", "layer", "projection"
Result<TargetMethod> ParseTargetMethod(std::string_view name);

enum class TargetAverage : uint8_t { kParams = 0, kUniform = 1 };
std::string_view TargetAverageName(TargetAverage a);  // "params", "uniform"
Result<TargetAverage> ParseTargetAverage(std::string_view name);

struct TargetOptions {
  double lambda = 0.08;  // OWL's bound: targets spread over P +- lambda
  TargetAverage average = TargetAverage::kParams;
  double max_sparsity = 0.99;  // no projection is pruned beyond this
};

struct PruneTargets {
  TargetMethod method = TargetMethod::kGlobal;
  double target = 0;  // P
  TargetOptions options;
  std::vector<std::array<double, kNumProjections>> sparsity;  // [layer][projection]
  std::vector<std::array<int64_t, kNumProjections>> params;   // [layer][projection]

  int n_layers() const { return static_cast<int>(sparsity.size()); }
  double at(int layer, Projection p) const {
    return sparsity[static_cast<size_t>(layer)][static_cast<size_t>(p)];
  }
  // Mean of the targets, weighted by parameter count (kParams) or plain (kUniform).
  double Mean(TargetAverage average) const;
  // Parameter-weighted mean over the attention (q, k, v, o) or MLP (gate, up, down) projections
  // of one layer: the fraction of that block's parameters the targets prune.
  double BlockMean(int layer, bool attention) const;
};

// Checks P: finite and in [0, 1).
Status CheckTargetFraction(double p);

// The OWL mapping described above: sparsity_i for each ratio_i such that the `weights`-weighted
// mean of the sparsities is p, more outliers giving less sparsity, all within
// [0, max_sparsity] and within the span 2*lambda. p == 0 gives all zeros; equal ratios give
// all p. Errors on mismatched sizes, non-positive weights, p outside [0, max_sparsity], or
// lambda < 0.
Result<std::vector<double>> SpreadByOutlierRatio(std::span<const double> ratios,
                                                 std::span<const double> weights, double p,
                                                 double lambda, double max_sparsity);

// Targets for every projection. `stats` may be null for kGlobal (it needs only the shapes);
// layer and projection methods need it.
Result<PruneTargets> ComputeTargets(TargetMethod method, double p,
                                    const std::vector<LayerProjections>& layers,
                                    const OutlierStats* stats, const TargetOptions& options);

}  // namespace weir::prune
