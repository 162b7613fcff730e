// Wanda's weight metric and the outlier statistics Mosaic and OWL derive their targets from.
//
//   omega_ij = ||A_j||_2 * |W_ij|                          (Mosaic Eq. 3 / 5; Wanda)
//   projection outlier: omega > alpha * mean(omega over the projection)      (Eq. 6, POD)
//   layer outlier:      omega > alpha * mean(omega over all 7 projections)   (Eq. 4, OWL's LOD)
//
// Quantized weights are dequantized row by row (the metric of a Q8_0 model is that of its
// dequantized values).
//
// Thread safety: free functions; `pool` is used from the calling thread only.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "format/model_file.h"
#include "prune/activation_norms.h"
#include "prune/projection.h"

namespace weir::prune {

// omega[j] = norm[j] * |w[j]|, j < n.
void WandaRow(const float* w, const float* norm, int64_t n, float* omega);

// Calls fn(thread_index, row, w_row, omega_row) for every row of `w` ([rows, cols]), with the
// row dequantized to F32 and its metric against `norm` ([cols]). Rows are split over `pool`;
// fn runs concurrently for different rows (thread_index < max(1, pool->size())).
void ScanRows(const TensorView& w, const float* norm, ThreadPool* pool,
              const std::function<void(int thread, int64_t row, const float* w_row,
                                       const float* omega_row)>& fn);

struct ProjectionOutliers {
  int64_t params = 0;          // elements of the weight
  double omega_sum = 0;        // sum of omega over the projection
  int64_t outliers = 0;        // omega > alpha * projection mean (Eq. 6)
  int64_t layer_outliers = 0;  // omega > alpha * layer mean (Eq. 4)
};

struct OutlierStats {
  double alpha = 0;
  std::vector<std::array<ProjectionOutliers, kNumProjections>> layers;  // [layer][projection]

  const ProjectionOutliers& at(int layer, Projection p) const {
    return layers[static_cast<size_t>(layer)][static_cast<size_t>(p)];
  }
  int n_layers() const { return static_cast<int>(layers.size()); }
  // Outliers / params of one projection (Algorithm 1, line 15, as a fraction).
  double ProjectionRatio(int layer, Projection p) const;
  // Layer outliers / params of the whole layer (OWL's layer outlier ratio).
  double LayerRatio(int layer) const;
  int64_t LayerParams(int layer) const;
};

// Both outlier counts for every projection of every layer. alpha must be positive and finite;
// the norms must have the model's widths.
Result<OutlierStats> ComputeOutlierStats(const format::ModelFile& model,
                                         const ActivationNorms& norms, double alpha,
                                         ThreadPool* pool);

}  // namespace weir::prune
