#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace weir::kernels {

void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void Rope(float* x, int n_heads, int head_dim, int rot_dim, int pos, float base, RopeStyle style) {
  for (int i = 0; i < rot_dim / 2; ++i) {
    float freq = std::pow(base, -2.0f * static_cast<float>(i) / static_cast<float>(rot_dim));
    float angle = static_cast<float>(pos) * freq;
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

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = *std::max_element(x, x + n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

int64_t TopK(const float* scores, int64_t n, int64_t k, int32_t* idx) {
  k = std::clamp<int64_t>(k, 0, n);
  if (k == 0) return 0;
  std::vector<int32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  std::nth_element(all.begin(), all.begin() + (k - 1), all.end(), better);
  std::copy(all.begin(), all.begin() + k, idx);
  return k;
}

}  // namespace weir::kernels
