#include "prune/unstructured.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "prune/metric.h"

namespace weir::prune {

int64_t PrunedPerRow(double sparsity, int64_t cols) {
  if (!(sparsity > 0)) return 0;
  return std::clamp<int64_t>(std::llround(sparsity * static_cast<double>(cols)), 0, cols);
}

void PruneUnstructured(OwnedTensor* w, const float* norm, double sparsity, ThreadPool* pool) {
  const int64_t cols = w->view.cols();
  const int64_t k = PrunedPerRow(sparsity, cols);
  if (k == 0) return;
  const int threads = pool ? std::max(1, pool->size()) : 1;
  std::vector<std::vector<int32_t>> order(static_cast<size_t>(threads));
  for (auto& o : order) o.resize(static_cast<size_t>(cols));
  ScanRows(w->view, norm, pool, [&](int t, int64_t r, const float*, const float* omega) {
    std::vector<int32_t>& idx = order[static_cast<size_t>(t)];
    std::iota(idx.begin(), idx.end(), 0);
    // NaN metrics (from NaN weights) order last, so the comparison stays a strict weak order.
    auto key = [omega](int32_t i) { return std::isnan(omega[i]) ? INFINITY : omega[i]; };
    auto less = [&key](int32_t a, int32_t b) {
      const float ka = key(a), kb = key(b);
      return ka < kb || (ka == kb && a < b);
    };
    if (k < cols) std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), less);
    // Ascending, so that ZeroElements re-encodes each block of a type without an exact zero
    // code path (K-quants, Q5_0, ...) once, not once per pruned element (Gemma 3 270M Q4_K_M:
    // minutes instead of seconds).
    std::sort(idx.begin(), idx.begin() + k);
    // Each row is written by the one thread scanning it.
    ZeroElements(w->view.dtype, w->mutable_row(r),
                 std::span<const int32_t>(idx.data(), static_cast<size_t>(k)));
  });
}

}  // namespace weir::prune
