// Selection primitives shared by every policy: how many to keep, top-k by magnitude (optionally
// cache-aware, DIP-CA's Eq. 10), and magnitude thresholds (CATS, TEAL). Results are written into
// caller-owned IndexLists in ascending order.
//
// Count rule: keeping a fraction `keep` of n entries keeps
//   KeepCount(keep, n) = clamp(floor(keep * n + 0.5), 1, n)
// (round half up, never zero, so a layer is never switched off entirely).
//
// Thread safety: Selector owns scratch; one thread at a time per Selector. Free functions are
// pure.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "sparsity/index_list.h"

namespace weir::sparsity {

// Score of one entry before ranking: |v|, or |silu(v)| = |v * sigmoid(v)| for gate pre-activations.
enum class Magnitude : uint8_t { kAbs, kAbsSilu };

inline float AbsSilu(float g) { return std::fabs(g / (1.0f + std::exp(-g))); }
inline float Score(float v, Magnitude mag) {
  float s = mag == Magnitude::kAbs ? std::fabs(v) : AbsSilu(v);
  return s == s ? s : 0.0f;  // a NaN input ranks lowest instead of breaking the ordering
}

// See the count rule above; n == 0 gives 0.
int64_t KeepCount(double keep, int64_t n);

// out = {i : Score(v[i]) >= threshold}. all() when every entry passes.
void SelectThreshold(std::span<const float> v, Magnitude mag, float threshold, IndexList* out);

class Selector {
 public:
  Selector() = default;
  explicit Selector(int64_t max_width) { Reserve(max_width); }
  // Allocates scratch for inputs of up to max_width entries. Call once.
  void Reserve(int64_t max_width);
  int64_t max_width() const { return static_cast<int64_t>(scores_.size()); }

  // out = the k entries with the largest scores, ties to the lower index, ascending; all() when
  // k >= n. With a cache view (DIP-CA, Eq. 10 of the DIP paper), the score of an entry whose
  // column is not cached is multiplied by gamma:  s_i = Score(v_i) * (c_i + gamma * (1 - c_i)).
  // The paper also divides by ||v||_inf; a positive common factor does not change the ranking,
  // so it is left out.
  void TopK(std::span<const float> v, Magnitude mag, int64_t k, const CacheStateView* cache,
            float gamma, IndexList* out);

 private:
  std::vector<float> scores_;
  std::vector<float> topk_scratch_;  // kernels::TopK's selection buffer
};

}  // namespace weir::sparsity
