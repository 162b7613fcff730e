#include "tensor/quantize.h"

#include <cmath>
#include <cstring>

namespace weir {

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBF16(src[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* b = static_cast<BlockQ8_0*>(dst);
      for (int64_t blk = 0; blk < n / kQK; ++blk) {
        const float* x = src + blk * kQK;
        float amax = 0;
        for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        float d = amax / 127.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;
        b[blk].d = F32ToF16(d);
        for (int j = 0; j < kQK; ++j) b[blk].qs[j] = static_cast<int8_t>(std::lroundf(x[j] * id));
      }
      return;
    }
    case DType::kQ4_0: {
      auto* b = static_cast<BlockQ4_0*>(dst);
      for (int64_t blk = 0; blk < n / kQK; ++blk) {
        const float* x = src + blk * kQK;
        float amax = 0, max = 0;
        for (int j = 0; j < kQK; ++j) {
          if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
          }
        }
        float d = max / -8.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;
        b[blk].d = F32ToF16(d);
        for (int j = 0; j < kQK / 2; ++j) {
          int q0 = static_cast<int>(x[j] * id + 8.5f);
          int q1 = static_cast<int>(x[j + kQK / 2] * id + 8.5f);
          q0 = q0 < 0 ? 0 : (q0 > 15 ? 15 : q0);
          q1 = q1 < 0 ? 0 : (q1 > 15 ? 15 : q1);
          b[blk].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
  }
}

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t blk = 0; blk < n / kQK; ++blk) {
        float d = F16ToF32(b[blk].d);
        for (int j = 0; j < kQK; ++j) dst[blk * kQK + j] = d * b[blk].qs[j];
      }
      return;
    }
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t blk = 0; blk < n / kQK; ++blk) {
        float d = F16ToF32(b[blk].d);
        for (int j = 0; j < kQK / 2; ++j) {
          dst[blk * kQK + j] = d * ((b[blk].qs[j] & 0x0f) - 8);
          dst[blk * kQK + j + kQK / 2] = d * ((b[blk].qs[j] >> 4) - 8);
        }
      }
      return;
    }
  }
}

}  // namespace weir
