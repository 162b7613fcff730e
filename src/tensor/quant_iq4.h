// The two non-linear 4-bit types, IQ4_NL and IQ4_XS: each 4-bit code indexes one table of 16
// signed levels, spaced more finely near zero than at the ends (weights cluster near zero), and
// the level is multiplied by a scale. Byte layouts (ggml's, little-endian):
//   IQ4_NL: 32 values  { f16 d; u8 qs[16]; }                                   18 B
//           x = d * kIq4Levels[q]
//   IQ4_XS: 256 values { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }   136 B
//           8 sub-blocks of 32; sub-block k's 6-bit scale code
//             ls = (scales_l[k/2] >> 4*(k%2) & 15) | (scales_h >> 2k & 3) << 4
//           gives dl = d * (ls - 32), and x = dl * kIq4Levels[q]
// In both, the 16 bytes of a 32-value (sub-)block hold value j (0..15) in the low nibble of byte
// j and value j + 16 in its high nibble, as Q4_0 does. The dequantizers evaluate these f32
// products in this order, which is gguf-py's (bit for bit: tests/reference/check_quant_types.py).
//
// The quantizers are weir's own: per 32 values, a search over candidate scales (each level of
// the table's ends mapped onto the value of largest magnitude), nearest-level codes for each,
// the least-squares scale for those codes, and the candidate of least squared error. IQ4_XS then
// quantizes the 8 sub-block scales to 6-bit codes of one f16 super-block scale and picks the
// codes again for the scale each sub-block ends up with.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace weir {

// The 16 levels of both types, ascending.
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;  // high 2 bits of the 8 sub-block scale codes, 2 bits each
  uint8_t scales_l[4];  // low 4 bits, two codes per byte
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

void DequantizeRowIQ4_NL(const void* src, float* dst, int64_t n);
void DequantizeRowIQ4_XS(const void* src, float* dst, int64_t n);
void QuantizeRowIQ4_NL(const float* src, void* dst, int64_t n);
void QuantizeRowIQ4_XS(const float* src, void* dst, int64_t n);

}  // namespace weir
