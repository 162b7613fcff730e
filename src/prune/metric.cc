#include "prune/metric.h"

#include <algorithm>
#include <cmath>

#include "tensor/quantize.h"

namespace weir::prune {

void WandaRow(const float* w, const float* norm, int64_t n, float* omega) {
  for (int64_t j = 0; j < n; ++j) omega[j] = norm[j] * std::fabs(w[j]);
}

void ScanRows(const TensorView& w, const float* norm, ThreadPool* pool,
              const std::function<void(int, int64_t, const float*, const float*)>& fn) {
  const int threads = pool ? std::max(1, pool->size()) : 1;
  const int64_t cols = w.cols();
  std::vector<std::vector<float>> row(static_cast<size_t>(threads)),
      omega(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    row[static_cast<size_t>(t)].resize(static_cast<size_t>(cols));
    omega[static_cast<size_t>(t)].resize(static_cast<size_t>(cols));
  }
  ParallelFor(pool, static_cast<size_t>(w.rows()), [&](size_t begin, size_t end, int t) {
    float* r = row[static_cast<size_t>(t)].data();
    float* o = omega[static_cast<size_t>(t)].data();
    for (size_t i = begin; i < end; ++i) {
      DequantizeRow(w, static_cast<int64_t>(i), r);
      WandaRow(r, norm, cols, o);
      fn(t, static_cast<int64_t>(i), r, o);
    }
  });
}

double OutlierStats::ProjectionRatio(int layer, Projection p) const {
  const ProjectionOutliers& s = at(layer, p);
  return s.params > 0 ? static_cast<double>(s.outliers) / static_cast<double>(s.params) : 0.0;
}

int64_t OutlierStats::LayerParams(int layer) const {
  int64_t n = 0;
  for (const auto& s : layers[static_cast<size_t>(layer)]) n += s.params;
  return n;
}

double OutlierStats::LayerRatio(int layer) const {
  int64_t n = 0;
  for (const auto& s : layers[static_cast<size_t>(layer)]) n += s.layer_outliers;
  const int64_t params = LayerParams(layer);
  return params > 0 ? static_cast<double>(n) / static_cast<double>(params) : 0.0;
}

Result<OutlierStats> ComputeOutlierStats(const format::ModelFile& model,
                                         const ActivationNorms& norms, double alpha,
                                         ThreadPool* pool) {
  if (!(alpha > 0) || !std::isfinite(alpha)) {
    return Status::InvalidArgument(
        StrFormat("outlier threshold alpha %g must be positive and finite", alpha));
  }
  WEIR_ASSIGN_OR_RETURN(std::vector<LayerProjections> layers, BindProjections(model));
  if (norms.n_layers() != static_cast<int>(layers.size())) {
    return Status::InvalidArgument(
        StrFormat("%s: activation norms cover %d layers, the model has %zu", model.path.c_str(),
                  norms.n_layers(), layers.size()));
  }
  const int threads = pool ? std::max(1, pool->size()) : 1;
  OutlierStats stats;
  stats.alpha = alpha;
  stats.layers.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerProjections& L = layers[l];
    std::array<std::vector<float>, kNumProjections> norm;
    for (Projection p : kAllProjections) {
      const sparsity::Site site = ProjectionSite(p);
      if (norms.width(static_cast<int>(l), site) != L[p].cols()) {
        return Status::InvalidArgument(StrFormat(
            "%s: activation norms of layer %zu site %s have %lld channels, %s has %lld columns",
            model.path.c_str(), l, std::string(sparsity::SiteName(site)).c_str(),
            static_cast<long long>(norms.width(static_cast<int>(l), site)), L.name(p).c_str(),
            static_cast<long long>(L[p].cols())));
      }
      norm[static_cast<size_t>(p)] = norms.Norms(static_cast<int>(l), site);
    }
    // Pass 1: the mean of omega per projection and over the layer.
    auto& out = stats.layers[l];
    double layer_sum = 0;
    int64_t layer_params = 0;
    for (Projection p : kAllProjections) {
      std::vector<double> partial(static_cast<size_t>(threads), 0.0);
      ScanRows(L[p], norm[static_cast<size_t>(p)].data(), pool,
               [&](int t, int64_t, const float*, const float* o) {
                 double s = 0;
                 for (int64_t j = 0; j < L[p].cols(); ++j) s += o[j];
                 partial[static_cast<size_t>(t)] += s;
               });
      ProjectionOutliers& po = out[static_cast<size_t>(p)];
      po.params = L.params(p);
      for (double s : partial) po.omega_sum += s;
      layer_sum += po.omega_sum;
      layer_params += po.params;
    }
    // Pass 2: count omega above alpha times each mean.
    const double layer_threshold = alpha * layer_sum / static_cast<double>(layer_params);
    for (Projection p : kAllProjections) {
      ProjectionOutliers& po = out[static_cast<size_t>(p)];
      const double threshold = alpha * po.omega_sum / static_cast<double>(po.params);
      std::vector<int64_t> own(static_cast<size_t>(threads), 0),
          lay(static_cast<size_t>(threads), 0);
      ScanRows(L[p], norm[static_cast<size_t>(p)].data(), pool,
               [&](int t, int64_t, const float*, const float* o) {
                 int64_t a = 0, b = 0;
                 for (int64_t j = 0; j < L[p].cols(); ++j) {
                   a += o[j] > threshold;
                   b += o[j] > layer_threshold;
                 }
                 own[static_cast<size_t>(t)] += a;
                 lay[static_cast<size_t>(t)] += b;
               });
      for (int t = 0; t < threads; ++t) {
        po.outliers += own[static_cast<size_t>(t)];
        po.layer_outliers += lay[static_cast<size_t>(t)];
      }
    }
  }
  return stats;
}

}  // namespace weir::prune
