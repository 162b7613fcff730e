// Dequantizers of the K types (layouts in quant_kquants.h). Each writes values in the order of
// ggml's reference loops and evaluates the same f32 expressions, so the results are bitwise those
// of ggml and of gguf-py's numpy dequantizers.
#include "tensor/quant_kquants.h"

#include <cstring>

namespace weir {
namespace {

// Scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block: 12 bytes hold eight 6-bit
// scales and eight 6-bit mins. Sub-blocks 0..3 keep both in the low 6 bits of bytes j and j + 4;
// sub-blocks 4..7 keep their low 4 bits in the nibbles of byte j + 4 and their top 2 bits in the
// spare top bits of bytes j - 4 (scale) and j (min).
inline void GetScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace

void DequantizeRowQ2_K(const void* src, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ2_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    const uint8_t* q = b.qs;
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = b.scales[is++];
          const float dl = d * static_cast<float>(sc & 0x0f);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
          }
        }
      }
      q += 32;
    }
  }
}

void DequantizeRowQ3_K(const void* src, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ3_K& b = blocks[i];
    const float d_all = F16ToF32(b.d);
    // Unpack the sixteen 6-bit scales (stored + 32).
    int8_t scales[16];
    for (int s = 0; s < 16; ++s) {
      const int low = s < 8 ? (b.scales[s] & 0x0f) : (b.scales[s - 8] >> 4);
      const int high = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
      scales[s] = static_cast<int8_t>(low | (high << 4));
    }
    const uint8_t* q = b.qs;
    uint8_t m = 1;
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * static_cast<float>(scales[is++] - 32);
          for (int l = 0; l < 16; ++l) {
            const int idx = 16 * part + l;
            const int v = ((q[idx] >> shift) & 3) - ((b.hmask[idx] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
        m = static_cast<uint8_t>(m << 1);
      }
      q += 32;
    }
  }
}

void DequantizeRowQ4_K(const void* src, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ4_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    const uint8_t* q = b.qs;
    for (int p = 0; p < 4; ++p) {
      uint8_t sc, m;
      GetScaleMinK4(2 * p, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      GetScaleMinK4(2 * p + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
      q += 32;
    }
  }
}

void DequantizeRowQ5_K(const void* src, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ5_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    const uint8_t* ql = b.qs;
    uint8_t u1 = 1, u2 = 2;
    for (int p = 0; p < 4; ++p) {
      uint8_t sc, m;
      GetScaleMinK4(2 * p, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      GetScaleMinK4(2 * p + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0x0f) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
      }
      ql += 32;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void DequantizeRowQ6_K(const void* src, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ6_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    const uint8_t* ql = b.ql;
    const uint8_t* qh = b.qh;
    const int8_t* sc = b.scales;
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

}  // namespace weir
