// Helpers for the sparsity tests: random activations and a sort-based top-k reference.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "sparsity/index_list.h"

namespace weir::sparsity::testutil {

// Gaussian activations with a few large outliers, as real hidden states have.
inline std::vector<float> RandomActivations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  for (int64_t i = 0; i < n / 50; ++i) v[rng() % n] *= 20.0f;
  return v;
}

// The k indices of the largest scores (ties to the lower index), ascending, by a full sort.
inline std::vector<int32_t> SortTopK(const std::vector<float>& scores, int64_t k) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

// The selection as an explicit vector (0..n-1 for all()).
inline std::vector<int32_t> ToVector(const IndexList& list) {
  std::vector<int32_t> v(static_cast<size_t>(list.size()));
  for (int64_t i = 0; i < list.size(); ++i) v[static_cast<size_t>(i)] = list[i];
  return v;
}

}  // namespace weir::sparsity::testutil
