#include "tensor/quant_legacy.h"

#include <cmath>
#include <cstring>

#include "tensor/dtype.h"

namespace weir {
namespace {

// Value of largest magnitude in x[0..n) (the first one on a tie), and that magnitude.
inline float SignedAbsMax(const float* x, int n, float* amax_out) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  *amax_out = amax;
  return max;
}

inline void MinMax(const float* x, int n, float* lo, float* hi) {
  float mn = x[0], mx = x[0];
  for (int j = 1; j < n; ++j) {
    if (x[j] < mn) mn = x[j];
    if (x[j] > mx) mx = x[j];
  }
  *lo = mn;
  *hi = mx;
}

// 1/d, or 0 when d is 0 or so small (f32 denormal) that 1/d is not finite: then every q is the
// zero point, where a cast of an infinite x/d would be undefined.
inline float InverseScale(float d) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  return std::isfinite(id) ? id : 0.0f;
}

inline uint32_t LoadQh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

}  // namespace

// ---- float types ----

void DequantizeRowF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}
void DequantizeRowF16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
}
void DequantizeRowBF16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(s[i]);
}
void QuantizeRowF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}
void QuantizeRowF16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
}
void QuantizeRowBF16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = F32ToBF16(src[i]);
}

// ---- Q8_0 ----

void DequantizeRowQ8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float d = F16ToF32(b[blk].d);
    for (int j = 0; j < kQK; ++j) dst[blk * kQK + j] = static_cast<float>(b[blk].qs[j]) * d;
  }
}

void QuantizeRowQ8_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float* x = src + blk * kQK;
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = InverseScale(d);
    b[blk].d = F32ToF16(d);
    for (int j = 0; j < kQK; ++j) b[blk].qs[j] = static_cast<int8_t>(std::lroundf(x[j] * id));
  }
}

// ---- Q4_0 ----

void DequantizeRowQ4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float d = F16ToF32(b[blk].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[blk * kQK + j] = static_cast<float>((b[blk].qs[j] & 0x0f) - 8) * d;
      dst[blk * kQK + j + kQK / 2] = static_cast<float>((b[blk].qs[j] >> 4) - 8) * d;
    }
  }
}

void QuantizeRowQ4_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float* x = src + blk * kQK;
    float amax;
    const float max = SignedAbsMax(x, kQK, &amax);
    const float d = max / -8.0f;
    const float id = InverseScale(d);
    b[blk].d = F32ToF16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      int q0 = static_cast<int>(x[j] * id + 8.5f);
      int q1 = static_cast<int>(x[j + kQK / 2] * id + 8.5f);
      q0 = q0 < 0 ? 0 : (q0 > 15 ? 15 : q0);
      q1 = q1 < 0 ? 0 : (q1 > 15 ? 15 : q1);
      b[blk].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// ---- Q4_1 ----

void DequantizeRowQ4_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float d = F16ToF32(b[blk].d);
    const float m = F16ToF32(b[blk].m);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[blk * kQK + j] = static_cast<float>(b[blk].qs[j] & 0x0f) * d + m;
      dst[blk * kQK + j + kQK / 2] = static_cast<float>(b[blk].qs[j] >> 4) * d + m;
    }
  }
}

void QuantizeRowQ4_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float* x = src + blk * kQK;
    float mn, mx;
    MinMax(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 15.0f;
    const float id = InverseScale(d);
    b[blk].d = F32ToF16(d);
    b[blk].m = F32ToF16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      int q0 = static_cast<int>((x[j] - mn) * id + 0.5f);
      int q1 = static_cast<int>((x[j + kQK / 2] - mn) * id + 0.5f);
      q0 = q0 > 15 ? 15 : (q0 < 0 ? 0 : q0);
      q1 = q1 > 15 ? 15 : (q1 < 0 ? 0 : q1);
      b[blk].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// ---- Q5_0 ----

void DequantizeRowQ5_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float d = F16ToF32(b[blk].d);
    const uint32_t qh = LoadQh(b[blk].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1) << 4;
      const int h1 = static_cast<int>((qh >> (j + kQK / 2)) & 1) << 4;
      dst[blk * kQK + j] = static_cast<float>(((b[blk].qs[j] & 0x0f) | h0) - 16) * d;
      dst[blk * kQK + j + kQK / 2] = static_cast<float>(((b[blk].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void QuantizeRowQ5_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_0*>(dst);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float* x = src + blk * kQK;
    float amax;
    const float max = SignedAbsMax(x, kQK, &amax);
    const float d = max / -16.0f;
    const float id = InverseScale(d);
    b[blk].d = F32ToF16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      int q0 = static_cast<int>(x[j] * id + 16.5f);
      int q1 = static_cast<int>(x[j + kQK / 2] * id + 16.5f);
      q0 = q0 < 0 ? 0 : (q0 > 31 ? 31 : q0);
      q1 = q1 < 0 ? 0 : (q1 > 31 ? 31 : q1);
      b[blk].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK / 2);
    }
    std::memcpy(b[blk].qh, &qh, 4);
  }
}

// ---- Q5_1 ----

void DequantizeRowQ5_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float d = F16ToF32(b[blk].d);
    const float m = F16ToF32(b[blk].m);
    const uint32_t qh = LoadQh(b[blk].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1) << 4;
      const int h1 = static_cast<int>((qh >> (j + kQK / 2)) & 1) << 4;
      dst[blk * kQK + j] = static_cast<float>((b[blk].qs[j] & 0x0f) | h0) * d + m;
      dst[blk * kQK + j + kQK / 2] = static_cast<float>((b[blk].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void QuantizeRowQ5_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_1*>(dst);
  for (int64_t blk = 0; blk < n / kQK; ++blk) {
    const float* x = src + blk * kQK;
    float mn, mx;
    MinMax(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 31.0f;
    const float id = InverseScale(d);
    b[blk].d = F32ToF16(d);
    b[blk].m = F32ToF16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      int q0 = static_cast<int>((x[j] - mn) * id + 0.5f);
      int q1 = static_cast<int>((x[j + kQK / 2] - mn) * id + 0.5f);
      q0 = q0 > 31 ? 31 : (q0 < 0 ? 0 : q0);
      q1 = q1 > 31 ? 31 : (q1 < 0 ? 0 : q1);
      b[blk].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK / 2);
    }
    std::memcpy(b[blk].qh, &qh, 4);
  }
}

}  // namespace weir
