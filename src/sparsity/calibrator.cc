// Calibrator: reservoir sampling of activation magnitudes (Algorithm R). Each magnitude offered
// after the reservoir is full replaces a uniformly chosen slot with probability max/seen, so the
// kept set is a uniform sample of everything offered.
#include <algorithm>

#include "base/check.h"
#include "sparsity/calibration.h"
#include "sparsity/select.h"

namespace weir::sparsity {

Calibrator::Calibrator(int n_layer, int64_t max_samples, uint64_t seed)
    : max_samples_(max_samples),
      rng_(seed),
      layers_(static_cast<size_t>(n_layer)),
      expert_chosen_(static_cast<size_t>(n_layer)) {
  WEIR_CHECK(n_layer >= 0 && max_samples >= 1);
}

// splitmix64: small, fast, and the same sequence on every platform.
uint64_t Calibrator::Next() {
  uint64_t z = (rng_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void Calibrator::Offer(int layer, CalibStat stat, std::span<const float> a, bool silu) {
  WEIR_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()));
  SampleSet& set = layers_[static_cast<size_t>(layer)][static_cast<size_t>(stat)];
  const int64_t width = static_cast<int64_t>(a.size());
  WEIR_CHECK(set.width == 0 || set.width == width);  // one site keeps one width
  set.width = width;
  const Magnitude mag = silu ? Magnitude::kAbsSilu : Magnitude::kAbs;
  if (!silu && width > 0) {
    // The entries among the top half of this token's magnitudes (ties: lower index first).
    if (set.kept_half.empty()) set.kept_half.assign(static_cast<size_t>(width), 0);
    order_.resize(static_cast<size_t>(width));
    for (int64_t i = 0; i < width; ++i) order_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    const int64_t keep = (width + 1) / 2;
    auto larger = [&](int32_t x, int32_t y) {
      const float ax = Score(a[static_cast<size_t>(x)], mag), ay = Score(a[static_cast<size_t>(y)], mag);
      return ax > ay || (ax == ay && x < y);
    };
    std::nth_element(order_.begin(), order_.begin() + (keep - 1), order_.end(), larger);
    for (int64_t k = 0; k < keep; ++k) ++set.kept_half[static_cast<size_t>(order_[static_cast<size_t>(k)])];
  }
  for (float v : a) {
    const float m = Score(v, mag);
    if (set.seen < max_samples_) {
      set.sorted.push_back(m);
    } else {
      // Uniform j in [0, seen] by multiply-shift (bias < 2^-40 for any realistic count).
      const uint64_t j = static_cast<uint64_t>(
          (static_cast<unsigned __int128>(Next()) * static_cast<uint64_t>(set.seen + 1)) >> 64);
      if (j < static_cast<uint64_t>(max_samples_)) set.sorted[j] = m;
    }
    ++set.seen;
  }
}

void Calibrator::Add(int layer, Site site, std::span<const float> activations) {
  Offer(layer, StatOf(site), activations, false);
}

void Calibrator::AddGate(int layer, std::span<const float> gate_pre) {
  Offer(layer, CalibStat::kGateSilu, gate_pre, true);
}

void Calibrator::AddExperts(int layer, std::span<const int32_t> chosen, int n_expert) {
  WEIR_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()) && n_expert >= 1);
  std::vector<uint32_t>& counts = expert_chosen_[static_cast<size_t>(layer)];
  WEIR_CHECK(counts.empty() || counts.size() == static_cast<size_t>(n_expert));
  counts.resize(static_cast<size_t>(n_expert), 0);
  for (int32_t e : chosen) {
    WEIR_CHECK(e >= 0 && e < n_expert);
    ++counts[static_cast<size_t>(e)];
  }
}

Calibration Calibrator::Finish(std::string note) const {
  Calibration c;
  c.note = std::move(note);
  c.max_samples = max_samples_;
  c.layers = layers_;
  c.expert_chosen = expert_chosen_;
  for (auto& layer : c.layers) {
    for (auto& set : layer) std::sort(set.sorted.begin(), set.sorted.end());
  }
  return c;
}

}  // namespace weir::sparsity
