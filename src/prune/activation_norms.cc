#include "prune/activation_norms.h"

#include <cmath>

namespace weir::prune {

namespace {
int SiteIndex(sparsity::Site s) { return static_cast<int>(s); }
}  // namespace

ActivationNorms ActivationNorms::ForConfig(const format::LlamaConfig& c) {
  ActivationNorms n;
  n.sumsq_.resize(static_cast<size_t>(std::max(c.n_layers, 0)));
  n.tokens_.assign(n.sumsq_.size(), {});
  for (size_t l = 0; l < n.sumsq_.size(); ++l) {
    const format::LayerDims d =
        l < c.layers.size() ? c.layers[l] : format::LayerDims{c.n_head, c.n_head_kv, c.d_ff};
    const int64_t widths[kSites] = {c.d_model, int64_t{d.n_head} * c.head_dim, c.d_model, d.d_ff};
    for (int s = 0; s < kSites; ++s) n.sumsq_[l][s].assign(static_cast<size_t>(widths[s]), 0.0);
  }
  return n;
}

int64_t ActivationNorms::width(int layer, sparsity::Site site) const {
  if (layer < 0 || layer >= n_layers()) return 0;
  return static_cast<int64_t>(sumsq_[static_cast<size_t>(layer)][SiteIndex(site)].size());
}

int64_t ActivationNorms::tokens(int layer, sparsity::Site site) const {
  if (layer < 0 || layer >= n_layers()) return 0;
  return tokens_[static_cast<size_t>(layer)][SiteIndex(site)];
}

Status ActivationNorms::Accumulate(int layer, sparsity::Site site, const float* x, int64_t dim) {
  if (layer < 0 || layer >= n_layers()) {
    return Status::InvalidArgument(
        StrFormat("activation norms: layer %d outside [0, %d)", layer, n_layers()));
  }
  std::vector<double>& acc = sumsq_[static_cast<size_t>(layer)][SiteIndex(site)];
  if (dim != static_cast<int64_t>(acc.size())) {
    return Status::InvalidArgument(StrFormat(
        "activation norms: layer %d site %s got %lld values, expected %zu", layer,
        std::string(sparsity::SiteName(site)).c_str(), static_cast<long long>(dim), acc.size()));
  }
  for (int64_t j = 0; j < dim; ++j) acc[static_cast<size_t>(j)] += static_cast<double>(x[j]) * x[j];
  ++tokens_[static_cast<size_t>(layer)][SiteIndex(site)];
  return Status::Ok();
}

Status ActivationNorms::SetSumSquares(int layer, sparsity::Site site, std::vector<double> sumsq) {
  if (layer < 0 || layer >= n_layers()) {
    return Status::InvalidArgument(
        StrFormat("activation norms: layer %d outside [0, %d)", layer, n_layers()));
  }
  std::vector<double>& acc = sumsq_[static_cast<size_t>(layer)][SiteIndex(site)];
  if (sumsq.size() != acc.size()) {
    return Status::InvalidArgument(
        StrFormat("activation norms: layer %d site %s given %zu values, expected %zu", layer,
                  std::string(sparsity::SiteName(site)).c_str(), sumsq.size(), acc.size()));
  }
  for (double v : sumsq) {
    if (!(v >= 0) || !std::isfinite(v)) {
      return Status::InvalidArgument(
          StrFormat("activation norms: layer %d site %s has sum of squares %g", layer,
                    std::string(sparsity::SiteName(site)).c_str(), v));
    }
  }
  acc = std::move(sumsq);
  return Status::Ok();
}

std::vector<float> ActivationNorms::Norms(int layer, sparsity::Site site) const {
  if (layer < 0 || layer >= n_layers()) return {};
  const std::vector<double>& acc = sumsq_[static_cast<size_t>(layer)][SiteIndex(site)];
  std::vector<float> out(acc.size());
  for (size_t j = 0; j < acc.size(); ++j) out[j] = static_cast<float>(std::sqrt(acc[j]));
  return out;
}

void NormObserver::OnInput(int layer, sparsity::Site site, const float* x, int64_t dim) {
  if (!status_.ok()) return;
  status_ = norms_->Accumulate(layer, site, x, dim);
}

}  // namespace weir::prune
