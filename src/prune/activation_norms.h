// ActivationNorms: per-input-channel sums of squared activations at the four input sites of every
// layer, accumulated over calibration tokens -- the ||A_j||_2 of Wanda's metric
// omega_ij = ||A_j||_2 * |W_ij| (Mosaic Eq. 5). q/k/v share kAttnIn, o reads kAttnOut, gate/up
// share kMlpIn, down reads kMlpDown (see sparsity/site.h).
//
// NormObserver plugs an ActivationNorms into a Session as its model::ActivationObserver.
//
// Thread safety: none; one owner. The observer is called on the session's thread.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "format/model_file.h"
#include "model/activation_observer.h"
#include "sparsity/site.h"

namespace weir::prune {

class ActivationNorms {
 public:
  ActivationNorms() = default;
  // Zero sums with the widths of every (layer, site) of `config` (per-layer dims honoured):
  // kAttnIn/kMlpIn d_model, kAttnOut n_head * head_dim, kMlpDown d_ff.
  static ActivationNorms ForConfig(const format::LlamaConfig& config);

  int n_layers() const { return static_cast<int>(sumsq_.size()); }
  int64_t width(int layer, sparsity::Site site) const;
  // Tokens accumulated at (layer, site).
  int64_t tokens(int layer, sparsity::Site site) const;

  // Adds x[j]^2 to channel j. Returns an error when layer/site/dim do not match the widths.
  Status Accumulate(int layer, sparsity::Site site, const float* x, int64_t dim);
  // Replaces the sums of squares of one site (tests, or norms computed elsewhere).
  Status SetSumSquares(int layer, sparsity::Site site, std::vector<double> sumsq);

  // ||A_j||_2 = sqrt(sum over tokens of x_j^2), one value per input channel.
  std::vector<float> Norms(int layer, sparsity::Site site) const;

 private:
  static constexpr int kSites = sparsity::kNumSites;
  std::vector<std::array<std::vector<double>, kSites>> sumsq_;  // [layer][site][width]
  std::vector<std::array<int64_t, kSites>> tokens_;             // [layer][site]
};

// Forwards every OnInput to an ActivationNorms. A call that does not fit the norms' widths is
// remembered (the observer cannot return a Status) and reported by status().
class NormObserver : public model::ActivationObserver {
 public:
  explicit NormObserver(ActivationNorms* norms) : norms_(norms) {}
  void OnInput(int layer, sparsity::Site site, const float* x, int64_t dim) override;
  const Status& status() const { return status_; }

 private:
  ActivationNorms* norms_;
  Status status_;
};

}  // namespace weir::prune
