#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/internal/dispatch.h"

namespace weir::kernels {

void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  internal::ActiveKernels().rms_norm(out, x, weight, n, eps);
}

void Softmax(float* x, int64_t n) { internal::ActiveKernels().softmax(x, n); }

void SiluMul(float* gate, const float* up, int64_t n) {
  internal::ActiveKernels().silu_mul(gate, up, n);
}

void GatedActivation(Glu glu, float* gate, const float* up, int64_t n) {
  if (glu == Glu::kGeluTanh) {
    GeluTanhMul(gate, up, n);
  } else {
    SiluMul(gate, up, n);
  }
}

void GeluTanhMul(float* gate, const float* up, int64_t n) {
  if (auto* f = internal::ActiveKernels().gelu_mul) {
    f(gate, up, n);
  } else {
    ref::GeluTanhMul(gate, up, n);
  }
}

void SoftCap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void HadamardRotate(float* x, int64_t n, int block) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    float* v = x + b0;
    for (int h = 1; h < block; h *= 2) {
      for (int i = 0; i < block; i += 2 * h) {
        for (int j = i; j < i + h; ++j) {
          const float a = v[j], c = v[j + h];
          v[j] = a + c;
          v[j + h] = a - c;
        }
      }
    }
    for (int i = 0; i < block; ++i) v[i] *= norm;
  }
}

void Rope(float* x, int n_heads, int head_dim, int rot_dim, int pos, float base, RopeStyle style,
          float freq_scale, const float* freq_factors) {
  for (int i = 0; i < rot_dim / 2; ++i) {
    float freq = std::pow(base, -2.0f * static_cast<float>(i) / static_cast<float>(rot_dim));
    float angle = static_cast<float>(pos) * freq;
    if (freq_factors != nullptr) angle /= freq_factors[i];
    angle *= freq_scale;
    float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      int a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
      int b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + rot_dim / 2;
      float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

namespace {

// A total order on scores: NaN below every number (including -inf), then by value.
// Returns a key whose unsigned comparison matches that order.
inline uint32_t OrderKey(float f) {
  if (std::isnan(f)) return 0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (f == 0) u = 0;  // -0 == +0
  // Positive floats: set the top bit; negative floats: flip all bits. Leaves 0 free for NaN.
  return (u & 0x80000000u) ? ~u + 1 : (u | 0x80000000u) + 1;
}

}  // namespace

int64_t TopK(const float* scores, int64_t n, int64_t k, int32_t* idx, float* scratch) {
  k = std::clamp<int64_t>(k, 0, n);
  if (k == 0) return 0;
  if (k == n) {
    for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
    return n;
  }
  // Find the k-th largest key by selection on a copy of the keys, then take, in index order,
  // everything strictly above it and the first (lowest-index) ties equal to it.
  auto* keys = reinterpret_cast<uint32_t*>(scratch);
  for (int64_t i = 0; i < n; ++i) keys[i] = OrderKey(scores[i]);
  std::nth_element(keys, keys + (k - 1), keys + n, [](uint32_t a, uint32_t b) { return a > b; });
  const uint32_t kth = keys[k - 1];
  int64_t above = 0;
  for (int64_t i = 0; i < k - 1; ++i) above += keys[i] > kth;
  int64_t ties_left = k - above;
  int64_t out = 0;
  for (int64_t i = 0; i < n && out < k; ++i) {
    const uint32_t key = OrderKey(scores[i]);
    if (key > kth || (key == kth && ties_left-- > 0)) idx[out++] = static_cast<int32_t>(i);
  }
  return out;
}

int64_t TopK(const float* scores, int64_t n, int64_t k, int32_t* idx) {
  if (n <= 0 || k <= 0) return 0;
  void* scratch =
      internal::ThreadScratch(internal::ScratchSlot::kTopK, static_cast<size_t>(n) * sizeof(float));
  return TopK(scores, n, k, idx, static_cast<float*>(scratch));
}

}  // namespace weir::kernels
