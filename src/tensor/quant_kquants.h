// The K types: super-blocks of 256 values (kQK_K) made of sub-blocks whose scales (and mins) are
// themselves quantized against one or two f16 super-block scales. Byte layouts (ggml's, all
// little-endian; "f16" is an IEEE half):
//
//   Q2_K  84 B: u8 scales[16]; u8 qs[64]; f16 d; f16 dmin;
//         16 sub-blocks of 16. scales[i]: low nibble = scale, high nibble = min of sub-block i.
//         2-bit q; x = d * sc * q - dmin * m.
//         qs bytes 32*h .. 32*h+31 (h = 0, 1, the two 128-value halves) hold, at bit shift 2*s
//         (s = 0..3), values 128*h + 32*s + l (l = 0..31).
//   Q3_K 110 B: u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d;
//         16 sub-blocks of 16, 6-bit signed scales (stored + 32) packed into 12 bytes: scale i
//         has its low 4 bits in the nibbles of bytes 0..7 (byte i % 8, high nibble when i >= 8)
//         and its top 2 bits in bytes 8..11 (byte 8 + i % 4, shift 2 * (i / 4)).
//         q = low 2 bits (laid out as Q2_K's qs) - 4 when the hmask bit is clear: value
//         128*h + 32*s + l has its hmask bit at hmask[l], bit 4*h + s. x = d * (sc - 32) * q.
//   Q4_K 144 B: f16 d; f16 dmin; u8 scales[12]; u8 qs[128];
//         8 sub-blocks of 32, 6-bit scale and 6-bit min each (packed as described in
//         quant_kquants.cc, GetScaleMinK4). 4-bit q: qs bytes 32*p .. 32*p+31 hold values
//         64*p + l (low nibble) and 64*p + 32 + l (high nibble). x = d * sc * q - dmin * m.
//   Q5_K 176 B: f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128];
//         as Q4_K, plus a fifth bit: value 64*p + l has it at qh[l] bit 2p, value 64*p + 32 + l
//         at bit 2p + 1.
//   Q6_K 210 B: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d;
//         16 sub-blocks of 16 with signed 8-bit scales; q = (4 low bits | 2 high bits << 4) - 32.
//         For each half h (values 128*h ..): ql bytes 64*h + l (l < 32) hold values
//         128*h + l (low nibble) and 128*h + 64 + l (high); ql bytes 64*h + 32 + l hold
//         128*h + 32 + l (low) and 128*h + 96 + l (high); qh[32*h + l] holds the top bits of
//         values 128*h + 32*s + l at shift 2*s. x = d * scale[i] * q.
//
// Dequantizers follow ggml's arithmetic exactly (the same f32 operations in the same order), so
// they agree with gguf-py's numpy dequantizers bit for bit. Quantizers pick scales by a small
// search that minimises the squared error of each sub-block (see quant_kquants.cc).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace weir {

struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// n is a multiple of kQK_K.
void DequantizeRowQ2_K(const void* src, float* dst, int64_t n);
void DequantizeRowQ3_K(const void* src, float* dst, int64_t n);
void DequantizeRowQ4_K(const void* src, float* dst, int64_t n);
void DequantizeRowQ5_K(const void* src, float* dst, int64_t n);
void DequantizeRowQ6_K(const void* src, float* dst, int64_t n);

void QuantizeRowQ2_K(const float* src, void* dst, int64_t n);
void QuantizeRowQ3_K(const float* src, void* dst, int64_t n);
void QuantizeRowQ4_K(const float* src, void* dst, int64_t n);
void QuantizeRowQ5_K(const float* src, void* dst, int64_t n);
void QuantizeRowQ6_K(const float* src, void* dst, int64_t n);

}  // namespace weir
