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
  bits_.assign(static_cast<size_t>(CacheWords(max_width)), 0);
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
  int32_t* idx = out->BeginWrite(n);
  const int64_t got = kernels::TopK(s, n, k, idx);
  WEIR_CHECK(got == k);
  // The kernel returns the k indices in any order; a bitset pass sorts them in O(n/64 + k).
  uint64_t* bits = bits_.data();
  for (int64_t j = 0; j < k; ++j) bits[idx[j] >> 6] |= uint64_t{1} << (idx[j] & 63);
  int64_t count = 0;
  const int64_t words = CacheWords(n);
  for (int64_t w = 0; w < words; ++w) {
    uint64_t word = bits[w];
    bits[w] = 0;
    while (word != 0) {
      idx[count++] = static_cast<int32_t>(w * 64 + __builtin_ctzll(word));
      word &= word - 1;
    }
  }
  WEIR_CHECK(count == k);
  out->EndWrite(count);
}

}  // namespace weir::sparsity
