#include "sparsity/select.h"

#include <algorithm>

#include "kernels/ops.h"

namespace weir::sparsity {

int64_t KeepCount(double keep, int64_t n) {
  if (n <= 0) return 0;
  double k = std::floor(keep * static_cast<double>(n) + 0.5);
  if (!(k >= 1)) return 1;  // also catches NaN
  if (k >= static_cast<double>(n)) return n;
  return static_cast<int64_t>(k);
}

void SelectThreshold(std::span<const float> v, Magnitude mag, float threshold, IndexList* out) {
  const int64_t n = static_cast<int64_t>(v.size());
  int32_t* idx = out->BeginWrite(n);
  int64_t count = 0;
  if (mag == Magnitude::kAbs) {
    for (int64_t i = 0; i < n; ++i) {
      idx[count] = static_cast<int32_t>(i);
      count += std::fabs(v[i]) >= threshold;  // branch-free; NaN never passes
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      idx[count] = static_cast<int32_t>(i);
      count += AbsSilu(v[i]) >= threshold;
    }
  }
  out->EndWrite(count);
}

void Selector::Reserve(int64_t max_width) {
  WEIR_CHECK(max_width >= 0);
  scores_.assign(static_cast<size_t>(max_width), 0.0f);
  topk_scratch_.assign(static_cast<size_t>(max_width), 0.0f);
}

void Selector::TopK(std::span<const float> v, Magnitude mag, int64_t k, const CacheStateView* cache,
                    float gamma, IndexList* out) {
  const int64_t n = static_cast<int64_t>(v.size());
  WEIR_CHECK(n <= max_width());
  k = std::clamp<int64_t>(k, 0, n);
  if (k == n) {
    out->SetAll(n);
    return;
  }
  float* s = scores_.data();
  if (mag == Magnitude::kAbs) {
    for (int64_t i = 0; i < n; ++i) s[i] = Score(v[i], Magnitude::kAbs);
  } else {
    for (int64_t i = 0; i < n; ++i) s[i] = Score(v[i], Magnitude::kAbsSilu);
  }
  if (cache != nullptr) {
    WEIR_CHECK(cache->size() == n);
    for (int64_t i = 0; i < n; ++i) {
      if (!cache->test(i)) s[i] *= gamma;
    }
  }
  // The kernel returns the indices in increasing order, using topk_scratch_ (no allocation).
  int32_t* idx = out->BeginWrite(n);
  const int64_t count = kernels::TopK(s, n, k, idx, topk_scratch_.data());
  WEIR_CHECK(count == k);
  out->EndWrite(count);
}

}  // namespace weir::sparsity
