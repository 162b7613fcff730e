// AVX-512 kernels of Q8_0, Q5_0, Q5_1, the K types and IQ4_NL / IQ4_XS over 16 rows at a time (see
// internal/avx512_rows16.h). Compiled with the AVX-512 F/BW/VL + VNNI flags
// (src/kernels/CMakeLists.txt) and reached only through x86_avx512.cc's table after isa.cc found
// those features, so, like the other SIMD files, it calls no inline code from other headers (see
// internal/isa_kernels.h).
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/internal/avx512_rows16.h"
#include "tensor/quant_iq4.h"  // kIq4Levels (data only)

namespace weir::kernels::internal {
namespace {

constexpr int kRows = 16;           // rows per pass, one per 32-bit lane
constexpr int kMaxTokens = 8;       // tokens sharing one unpacked block
constexpr size_t kPairBytes = 128;  // one prepared record per pair of blocks

inline int64_t Pad16(int64_t n) { return (n + 15) / 16 * 16; }
inline int64_t PairCount(int64_t nb) { return (nb + 1) / 2; }
inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline int32_t Load32(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}
__attribute__((always_inline))
inline __m512i Load128x4(const uint8_t* a, const uint8_t* b, const uint8_t* c, const uint8_t* d) {
  __m512i z = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(c)), 2);
  return _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(d)), 3);
}

// In each 128-bit lane k, the 4 x 4 dword transpose of in[0..3]: out[j] lane k dword g =
// in[g] lane k dword j.
__attribute__((always_inline))
inline void Transpose4(const __m512i* in, __m512i* out) {
  const __m512i t0 = _mm512_unpacklo_epi32(in[0], in[1]);
  const __m512i t1 = _mm512_unpackhi_epi32(in[0], in[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(in[2], in[3]);
  const __m512i t3 = _mm512_unpackhi_epi32(in[2], in[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// The 16 bytes at off + at of the 16 rows, nibbles split: lo[0..3] (low nibbles) and hi[0..3]
// (high), lane r of vector j holding bytes 4j .. 4j + 3 of row r. The loads put row 4k + g in
// 128-bit lane k of vector g, so the in-lane transposes leave row 4k + g in dword 4k + g: rows in
// lane order, no lane crossing.
__attribute__((always_inline))
inline void UnpackNibbles(const uint8_t* const* row, size_t at, __m512i* lo, __m512i* hi) {
  const __m512i nib = _mm512_set1_epi8(0x0f);
  __m512i l[4], h[4];
  for (int g = 0; g < 4; ++g) {
    const __m512i z = Load128x4(row[g] + at, row[4 + g] + at, row[8 + g] + at, row[12 + g] + at);
    l[g] = _mm512_and_si512(z, nib);
    h[g] = _mm512_and_si512(_mm512_srli_epi16(z, 4), nib);
  }
  Transpose4(l, lo);
  Transpose4(h, hi);
}

// Dwords 0 and 1 of the 16 bytes at off + at of each row: lane r = row r.
__attribute__((always_inline))
inline void HeadWords(const uint8_t* const* row, size_t at, __m512i* w0, __m512i* w1) {
  __m512i head[4];
  for (int g = 0; g < 4; ++g) {
    head[g] = Load128x4(row[g] + at, row[4 + g] + at, row[8 + g] + at, row[12 + g] + at);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(head[0], head[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(head[2], head[3]);
  *w0 = _mm512_unpacklo_epi64(t0, t2);
  *w1 = _mm512_unpackhi_epi64(t0, t2);
}

// Adds 16 to value i of each lane's 32 (v[0..7] as UnpackNibbles leaves them, values 0..15 then
// 16..31) where bit i of the lane's qh is set: the fifth bit of Q5_0 / Q5_1.
__attribute__((always_inline))
inline void AddFifthBits(__m512i qh, __m512i* v) {
  // Vector j's values 4j + b sit in byte j / 2 of qh, bit 4 (j & 1) + b: that byte copied to the
  // four bytes of its dword, tested against 1 << (4 (j & 1) + b) per byte.
  const __m512i bits_even = _mm512_set1_epi32(0x08040201);
  const __m512i bits_odd = _mm512_set1_epi32(static_cast<int>(0x80402010u));
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i dword_base =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
  for (int s = 0; s < 4; ++s) {
    const __m512i spread = _mm512_shuffle_epi8(
        qh, _mm512_add_epi8(dword_base, _mm512_set1_epi8(static_cast<char>(s))));
    const __mmask64 e = _mm512_test_epi8_mask(spread, bits_even);
    const __mmask64 o = _mm512_test_epi8_mask(spread, bits_odd);
    v[2 * s] = _mm512_mask_add_epi8(v[2 * s], e, v[2 * s], sixteen);
    v[2 * s + 1] = _mm512_mask_add_epi8(v[2 * s + 1], o, v[2 * s + 1], sixteen);
  }
}

// The Q5_0 block at byte offset off of the 16 rows as 8 vectors of unsigned q (0..31): lane r of
// v[j] holds values 4j .. 4j + 3 of row r; *d: the rows' scales as f32, lane r = row r.
inline void UnpackQ50(const uint8_t* const* row, size_t off, __m512i* v, __m512* d, __m512*) {
  UnpackNibbles(row, off + 6, v, v + 4);
  // Bytes 0..7 of the block: d, qh, qs[0..1]: w0 = d | qh << 16, w1 = qh >> 16 | ...
  __m512i w0, w1;
  HeadWords(row, off, &w0, &w1);
  *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0));
  AddFifthBits(_mm512_or_si512(_mm512_srli_epi32(w0, 16), _mm512_slli_epi32(w1, 16)), v);
}

// Q5_1 (24 bytes: f16 d, f16 m, u32 qh, u8 qs[16]; value = d q + m, q = 0..31) as UnpackQ50;
// *m: the rows' offsets.
inline void UnpackQ51(const uint8_t* const* row, size_t off, __m512i* v, __m512* d, __m512* m) {
  UnpackNibbles(row, off + 8, v, v + 4);
  __m512i w0, w1;  // d | m << 16, qh
  HeadWords(row, off, &w0, &w1);
  *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0));
  *m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w0, 16)));
  AddFifthBits(w1, v);
}

// The Q8_0 block at byte offset off of the 16 rows as 8 vectors of unsigned q + 128 (0..255),
// laid out as UnpackQ50's; *d: the rows' scales.
inline void UnpackQ80(const uint8_t* const* row, size_t off, __m512i* v, __m512* d, __m512*) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i lo[4], hi[4], head[4];
  for (int g = 0; g < 4; ++g) {
    // Values 0..15 at bytes 2..17, 16..31 at bytes 18..33; d at bytes 0..1.
    lo[g] = _mm512_xor_si512(Load128x4(row[g] + off + 2, row[4 + g] + off + 2,
                                       row[8 + g] + off + 2, row[12 + g] + off + 2),
                             flip);
    hi[g] = _mm512_xor_si512(Load128x4(row[g] + off + 18, row[4 + g] + off + 18,
                                       row[8 + g] + off + 18, row[12 + g] + off + 18),
                             flip);
    head[g] = Load128x4(row[g] + off, row[4 + g] + off, row[8 + g] + off, row[12 + g] + off);
  }
  Transpose4(lo, v);
  Transpose4(hi, v + 4);
  const __m512i t0 = _mm512_unpacklo_epi32(head[0], head[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(head[2], head[3]);
  *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_unpacklo_epi64(t0, t2)));
}

// Where values 4j .. 4j + 3 of block b lie in a token's prepared records (the Q4_0 order of
// x86_avx512.cc: A[0..15] B[0..15] A[16..31] B[16..31]).
constexpr int kActDword[8] = {0, 4, 8, 12, 32, 36, 40, 44};
inline size_t BlockRecordOffset(int64_t b) {
  return static_cast<size_t>(b / 2) * kPairBytes + static_cast<size_t>(b & 1) * 16;
}

// How a pass gets its weights: unpacks them, unpacks and keeps them in a buffer, or reads them
// back from it (a group's later token passes, when the unpacked row fits in kKeptBytes). The kept
// vectors are read where they lie (pointers into the buffer, loaded at their use), not copied
// into local arrays first: GCC spilled those copies to the stack and read them back.
enum class From { kRows, kRowsKeep, kKept };
constexpr size_t kKeptBytes = 147456;  // 144 KiB: rows of 5632 values of every type (Q2_K: 135 KiB)

// Requests byte at of the 16 rows into L2 (hint 1) or L1 (hint 0).
inline void Request16(const uint8_t* const* rows, size_t at, int hint) {
  for (int i = 0; i < kRows; ++i) {
    if (hint == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[i] + at), _MM_HINT_T0);
    } else {
      _mm_prefetch(reinterpret_cast<const char*>(rows[i] + at), _MM_HINT_T1);
    }
  }
}

// The dpbusd of NT tokens against one unit of 4 kDwords values (32; Q6_K's 16): s[t] += v[j] .
// x_t(dword j), x_t's dword j at q[t] + dword[j], s[t] starting at init[t]; two chains per token
// when there are few tokens.
template <int NT, int kDwords = 8>
inline void UnitSums(const __m512i* v, const uint8_t* const* q, const int* dword,
                     const __m512i* init, __m512i* s) {
  constexpr bool kTwoChains = NT < 4;  // enough independent vpdpbusd in flight
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    __m512i s0 = init[t];
    __m512i s1 = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int j = 0; j < kDwords; ++j) {
      __m512i& a = (kTwoChains && (j & 1)) ? s1 : s0;
      a = _mm512_dpbusd_epi32(a, v[j], _mm512_set1_epi32(Load32(q[t] + dword[j])));
    }
    s[t] = kTwoChains ? _mm512_add_epi32(s0, s1) : s0;
  }
}

inline float LoadF32(const uint8_t* p) {
  float f;
  __builtin_memcpy(&f, p, 4);
  return f;
}

// IQ4_NL / IQ4_XS: the 8 vectors of nibbles as UnpackNibbles leaves them, replaced by their
// levels + 128 (1..241, tensor/quant_iq4.h), looked up by a byte shuffle inside each 128-bit
// lane; the prepared activation's block bias -128 * sum(x_q) takes the 128 back out, as for Q8_0.
__attribute__((always_inline))
inline void LevelsOfNibbles(__m512i* v) {
  alignas(16) int8_t lut[16];
  for (int i = 0; i < 16; ++i) lut[i] = static_cast<int8_t>(kIq4Levels[i] + 128);
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(lut)));
  for (int j = 0; j < 8; ++j) v[j] = _mm512_shuffle_epi8(table, v[j]);
}

// The IQ4_NL block (18 bytes: f16 d, u8 qs[16]) at off, laid out as UnpackQ50's.
inline void UnpackIQ4NL(const uint8_t* const* row, size_t off, __m512i* v, __m512* d, __m512*) {
  UnpackNibbles(row, off + 2, v, v + 4);
  LevelsOfNibbles(v);
  __m512i w0, w1;  // d | qs[0..1] << 16, qs[2..5]
  HeadWords(row, off, &w0, &w1);
  *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0));
}

// Sub-block k of an IQ4_XS super-block (136 bytes: f16 d, u16 scales_h, u8 scales_l[4], u8
// qs[128], sub-block k's codes at qs[16 k]) as a 32-value block: Block32 steps through it as
// blocks of 136 / 8 = 17 bytes, so off = 17 b for sub-block b of the row, which is super-block
// b / 8's sub-block b % 8. *d: d * (ls - 32), the sub-block's scale, per row.
inline void UnpackIQ4XS(const uint8_t* const* row, size_t off, __m512i* v, __m512* d, __m512*) {
  const size_t b = off / 17;
  const size_t base = (b / 8) * 136;
  const int k = static_cast<int>(b % 8);
  UnpackNibbles(row, base + 8 + 16 * static_cast<size_t>(k), v, v + 4);
  LevelsOfNibbles(v);
  __m512i w0, w1;  // d | scales_h << 16, scales_l[0..3]
  HeadWords(row, base, &w0, &w1);
  const __m512i low = _mm512_and_si512(_mm512_srlv_epi32(w1, _mm512_set1_epi32(4 * k)),
                                       _mm512_set1_epi32(15));
  const __m512i high = _mm512_and_si512(_mm512_srlv_epi32(w0, _mm512_set1_epi32(16 + 2 * k)),
                                        _mm512_set1_epi32(3));
  const __m512i ls = _mm512_or_si512(low, _mm512_slli_epi32(high, 4));
  *d = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0)),
                     _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
}

// ---------------------------------------------------------------------------------------------
// The 32-value block types, one block per step (the unpacking is the type's: UnpackQ50/Q80).
// Q5_0: a block (22 bytes): f16 d, u32 qh (bit i: the fifth bit of value i), u8 qs[16] (value i in
// the low nibble of qs[i], value 16 + i in the high one); value = d (q - 16), q = 0..31; the
// prepared activation's block bias -16 * sum(x_q) takes the offset back out. kMin (Q5_1): the
// type has an offset m per block (value = d q + m); no bias, and after the block's FMA a second one
// adds m * sx, sx = dx * sum(x_q) from the prepared activation (where the others keep the bias).
template <size_t kBytes, void (*kUnpack)(const uint8_t* const*, size_t, __m512i*, __m512*, __m512*),
          bool kMin = false>
struct Block32 {
  static constexpr size_t kBlockBytes = kBytes;
  static constexpr int64_t kBlockValues = 32;
  struct Unpacked {
    __m512i v[8];
    __m512 d;
    __m512 m[kMin ? 1 : 0];
  };

  // Requesting the line of every block start (Q5_0: every other one, two blocks being 44
  // bytes) and the last byte touches every line of the rows.
  static void Request(const uint8_t* const* rows, int64_t b, int64_t nb, int hint) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    if (kBlockBytes > 32 || (b & 1) == 0) Request16(rows, off, hint);
    if (b == nb - 1) Request16(rows, off + kBlockBytes - 1, hint);
  }

  // Block b of the 16 rows against NT tokens prepared at xp + t * xs, into acc[t].
  template <int NT, From kFrom>
  __attribute__((always_inline)) static void Step(const uint8_t* const* row, int64_t b, int64_t nb,
                                                  const uint8_t* xp, size_t xs, Unpacked* kept,
                                                  __m512* acc) {
    __m512i v[8];
    __m512 d, m = _mm512_setzero_ps();
    if constexpr (kFrom == From::kKept) {
      for (int j = 0; j < 8; ++j) v[j] = _mm512_load_si512(&kept[b].v[j]);
      d = _mm512_load_ps(&kept[b].d);
      if constexpr (kMin) m = _mm512_load_ps(&kept[b].m[0]);
    } else {
      kUnpack(row, static_cast<size_t>(b) * kBlockBytes, v, &d, &m);
      if constexpr (kFrom == From::kRowsKeep) {
        for (int j = 0; j < 8; ++j) _mm512_store_si512(&kept[b].v[j], v[j]);
        _mm512_store_ps(&kept[b].d, d);
        if constexpr (kMin) _mm512_store_ps(&kept[b].m[0], m);
      }
    }
    const size_t dx_off = static_cast<size_t>(PairCount(nb)) * kPairBytes;
    // The second array: int32 bias[b], or (kMin) f32 sx[b].
    const size_t second_off = dx_off + static_cast<size_t>(Pad16(nb)) * 4;
    const uint8_t* q[NT];
    __m512i init[NT], s[NT];
    for (int t = 0; t < NT; ++t) {
      const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
      q[t] = xt + BlockRecordOffset(b);
      init[t] = kMin ? _mm512_setzero_si512()
                     : _mm512_set1_epi32(Load32(xt + second_off + 4 * static_cast<size_t>(b)));
    }
    UnitSums<NT>(v, q, kActDword, init, s);
    for (int t = 0; t < NT; ++t) {
      const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
      const float dx = LoadF32(xt + dx_off + 4 * static_cast<size_t>(b));
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc[t]);
      if constexpr (kMin) {
        acc[t] = _mm512_fmadd_ps(
            m, _mm512_set1_ps(LoadF32(xt + second_off + 4 * static_cast<size_t>(b))), acc[t]);
      }
    }
  }
};
// Q5_0 (above) and Q8_0: a block (34 bytes) of f16 d and int8 q[32], value = d q; the kernel takes
// the unsigned q + 128 and the prepared activation's block bias -128 * sum(x_q) takes it back out.
using Q50 = Block32<22, UnpackQ50>;
using Q80 = Block32<34, UnpackQ80>;
using Q51 = Block32<24, UnpackQ51, true>;
using IQ4NL = Block32<18, UnpackIQ4NL>;
using IQ4XS = Block32<17, UnpackIQ4XS>;  // 17 = 136 / 8: see UnpackIQ4XS

// ---------------------------------------------------------------------------------------------
// Q4_K: one 256-value super-block (8 sub-blocks of 32) per step. A super-block (144 bytes): f16 d,
// f16 dmin, u8 scales[12] (6-bit scale and min per sub-block), u8 qs[128]: bytes 32p .. 32p + 31
// hold sub-block 2p's values in their low nibbles and 2p + 1's in the high ones; value =
// (d sc) q - (dmin m). The prepared activation is x86_avx512_kquants.cc's: int8 q[cols] with each
// super-block's sub-blocks in the order 0 2 1 3 4 6 5 7, f32 dx[Pad16(nb)], f32 sx[Pad16(nb)] =
// dx * sum(q of the block).
// kFive (Q5_K, 176 bytes): u8 qh[32] between the scales and qs (which start at 48): value l of
// sub-block j has its fifth bit at qh[l] bit j; the rest, and the prepared activation, as Q4_K.
template <bool kFive>
struct Q4KT {
  static constexpr size_t kBlockBytes = kFive ? 176 : 144;
  static constexpr size_t kQsOffset = kFive ? 48 : 16;
  static constexpr int64_t kBlockValues = 256;
  struct Unpacked {
    __m512i v[64];  // sub-block s: v[8 s .. 8 s + 7]
    __m512 d1[8];   // d sc per sub-block
    __m512 m1[8];   // dmin m per sub-block
  };

  static void Request(const uint8_t* const* rows, int64_t b, int64_t, int hint) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    for (size_t at = 0; at < kBlockBytes; at += 64) Request16(rows, off + at, hint);
    Request16(rows, off + kBlockBytes - 1, hint);
  }

  // Q5_K: the qh bytes of the super-block at off, h5[4 h + j] lane r = qh[16 h + 4 j .. + 3] of
  // row r (the layout UnpackPair gives the values).
  static void UnpackHigh(const uint8_t* const* row, size_t off, __m512i* h5) {
    __m512i z[4];
    for (int h = 0; h < 2; ++h) {
      const size_t at = off + 16 + 16 * static_cast<size_t>(h);
      for (int g = 0; g < 4; ++g) {
        z[g] = Load128x4(row[g] + at, row[4 + g] + at, row[8 + g] + at, row[12 + g] + at);
      }
      Transpose4(z, h5 + 4 * h);
    }
  }

  // Sub-blocks 2p and 2p + 1 of the super-block at off: v[0..7] and v[8..15] (h5: UnpackHigh's,
  // Q5_K only).
  static void UnpackPair(const uint8_t* const* row, size_t off, int p, const __m512i* h5,
                         __m512i* v) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    __m512i z[4], t[4];
    for (int h = 0; h < 2; ++h) {
      const size_t at = off + kQsOffset + 32 * static_cast<size_t>(p) + 16 * static_cast<size_t>(h);
      for (int g = 0; g < 4; ++g) {
        z[g] = Load128x4(row[g] + at, row[4 + g] + at, row[8 + g] + at, row[12 + g] + at);
      }
      Transpose4(z, t);
      for (int j = 0; j < 4; ++j) {
        v[4 * h + j] = _mm512_and_si512(t[j], nib);
        v[8 + 4 * h + j] = _mm512_and_si512(_mm512_srli_epi16(t[j], 4), nib);
        if constexpr (kFive) {
          const __m512i sixteen = _mm512_set1_epi8(16);
          const __m512i hb = h5[4 * h + j];
          const __mmask64 lo = _mm512_test_epi8_mask(hb, _mm512_set1_epi8(1 << (2 * p)));
          const __mmask64 hi =
              _mm512_test_epi8_mask(hb, _mm512_set1_epi8(static_cast<char>(2 << (2 * p))));
          v[4 * h + j] = _mm512_mask_add_epi8(v[4 * h + j], lo, v[4 * h + j], sixteen);
          v[8 + 4 * h + j] = _mm512_mask_add_epi8(v[8 + 4 * h + j], hi, v[8 + 4 * h + j], sixteen);
        }
      }
    }
  }

  // d sc and dmin m of the 8 sub-blocks of the super-block at off.
  static void UnpackScales(const uint8_t* const* row, size_t off, __m512* d1, __m512* m1) {
    __m512i z[4], t[4];
    // Bytes 0..15: d | dmin << 16, then the scale words u0, u1, u2 (lane r = row r).
    for (int g = 0; g < 4; ++g) {
      z[g] = Load128x4(row[g] + off, row[4 + g] + off, row[8 + g] + off, row[12 + g] + off);
    }
    Transpose4(z, t);
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(t[0]));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(t[0], 16)));
    const __m512i six = _mm512_set1_epi32(0x3f3f3f3f);
    const __m512i four = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i two = _mm512_set1_epi32(0x03030303);
    // Sub-blocks 0..3: low 6 bits of bytes 0..3 (scales, u0) and 4..7 (mins, u1); 4..7: low 4
    // bits in the nibbles of u2, top 2 bits in the top bits of u0 (scales) and u1 (mins).
    const __m512i sc_lo = _mm512_and_si512(t[1], six);
    const __m512i m_lo = _mm512_and_si512(t[2], six);
    const __m512i sc_hi =
        _mm512_or_si512(_mm512_and_si512(t[3], four),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(t[1], 6), two), 4));
    const __m512i m_hi =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(t[3], 4), four),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(t[2], 6), two), 4));
    const __m512i byte = _mm512_set1_epi32(0xff);
    for (int k = 0; k < 4; ++k) {
      const auto field = [&](__m512i w) {
        return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(w, 8 * k), byte));
      };
      d1[k] = _mm512_mul_ps(d, field(sc_lo));
      d1[4 + k] = _mm512_mul_ps(d, field(sc_hi));
      m1[k] = _mm512_mul_ps(dmin, field(m_lo));
      m1[4 + k] = _mm512_mul_ps(dmin, field(m_hi));
    }
  }

  template <int NT, From kFrom>
  __attribute__((always_inline)) static void Step(const uint8_t* const* row, int64_t b, int64_t nb,
                                                  const uint8_t* xp, size_t xs, Unpacked* kept,
                                                  __m512* acc) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    // A later pass reads the kept vectors where they lie (see KeptOrLocal).
    __m512 d1_local[8], m1_local[8];
    const __m512* d1 = d1_local;
    const __m512* m1 = m1_local;
    if constexpr (kFrom == From::kKept) {
      d1 = kept[b].d1;
      m1 = kept[b].m1;
    } else {
      UnpackScales(row, off, d1_local, m1_local);
      if constexpr (kFrom == From::kRowsKeep) {
        for (int k = 0; k < 8; ++k) {
          _mm512_store_ps(&kept[b].d1[k], d1[k]);
          _mm512_store_ps(&kept[b].m1[k], m1[k]);
        }
      }
    }
    const int64_t cols = nb * kBlockValues;
    const size_t dx_off = static_cast<size_t>(cols);
    const size_t sx_off = dx_off + static_cast<size_t>(Pad16(cols / 32)) * 4;
    constexpr int kSlot[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    constexpr int kDword[8] = {0, 4, 8, 12, 16, 20, 24, 28};
    __m512i h5[8];
    if constexpr (kFive && kFrom != From::kKept) UnpackHigh(row, off, h5);
    for (int p = 0; p < 4; ++p) {
      __m512i v_local[16];
      const __m512i* v = v_local;
      if constexpr (kFrom == From::kKept) {
        v = kept[b].v + 16 * p;
      } else {
        UnpackPair(row, off, p, h5, v_local);
        if constexpr (kFrom == From::kRowsKeep) {
          for (int j = 0; j < 16; ++j) _mm512_store_si512(&kept[b].v[16 * p + j], v_local[j]);
        }
      }
      for (int h = 0; h < 2; ++h) {
        const int k = 2 * p + h;  // sub-block
        const uint8_t* q[NT];
        __m512i init[NT], s[NT];
        for (int t = 0; t < NT; ++t) {
          q[t] = xp + static_cast<size_t>(t) * xs + static_cast<size_t>(b) * 256 + 32 * kSlot[k];
          init[t] = _mm512_setzero_si512();
        }
        UnitSums<NT>(v + 8 * h, q, kDword, init, s);
        const size_t at = 4 * static_cast<size_t>(8 * b + k);
        for (int t = 0; t < NT; ++t) {
          const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]),
                                   _mm512_mul_ps(d1[k], _mm512_set1_ps(LoadF32(xt + dx_off + at))),
                                   acc[t]);
          acc[t] = _mm512_fnmadd_ps(m1[k], _mm512_set1_ps(LoadF32(xt + sx_off + at)), acc[t]);
        }
      }
    }
  }
};
using Q4K = Q4KT<false>;
using Q5K = Q4KT<true>;

// ---------------------------------------------------------------------------------------------
// Q6_K: one 256-value super-block (16 sub-blocks of 16) per step. A super-block (210 bytes):
// u8 ql[128], u8 qh[64], i8 scales[16], f16 d; value = (d sc) (q - 32), q = 0..63 from 4 low bits
// and 2 high bits. Half h (values 128h ..) has ql bytes 64h + l holding values 128h + l (low
// nibble) and 128h + 64 + l (high), ql bytes 64h + 32 + l values 128h + 32 + l and 128h + 96 + l,
// and qh byte 32h + l the top bits of values 128h + l, + 32, + 64, + 96 at shifts 0, 2, 4, 6
// (l < 32). The prepared activation (x86_avx512_kquants.cc): int8 q[cols] in natural order, int32
// bias[cols / 16] = -32 * sum(q of the 16 values), f32 dx[Pad16(nb)].
struct Q6K {
  static constexpr size_t kBlockBytes = 210;
  static constexpr int64_t kBlockValues = 256;
  struct Unpacked {
    __m512i v[64];  // sub-block u: v[4 u .. 4 u + 3]
    __m512 d1[16];  // d sc per sub-block
  };

  static void Request(const uint8_t* const* rows, int64_t b, int64_t, int hint) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    for (size_t at = 0; at < kBlockBytes; at += 64) Request16(rows, off + at, hint);
    Request16(rows, off + kBlockBytes - 1, hint);
  }

  // The four sub-blocks of half h whose values start at 128h + 16 m (m = 0, 1): sub-blocks
  // 8h + m, 8h + 2 + m, 8h + 4 + m, 8h + 6 + m into v[0..3], v[4..7], v[8..11], v[12..15].
  static void UnpackQuarter(const uint8_t* const* row, size_t off, int h, int m, __m512i* v) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const __m512i top = _mm512_set1_epi8(0x30);
    __m512i z[4], a[4], b[4], q[4];
    const size_t at_a = off + 64 * static_cast<size_t>(h) + 16 * static_cast<size_t>(m);
    const size_t at_b = at_a + 32;
    const size_t at_q = off + 128 + 32 * static_cast<size_t>(h) + 16 * static_cast<size_t>(m);
    for (int g = 0; g < 4; ++g) {
      z[g] = Load128x4(row[g] + at_a, row[4 + g] + at_a, row[8 + g] + at_a, row[12 + g] + at_a);
    }
    Transpose4(z, a);
    for (int g = 0; g < 4; ++g) {
      z[g] = Load128x4(row[g] + at_b, row[4 + g] + at_b, row[8 + g] + at_b, row[12 + g] + at_b);
    }
    Transpose4(z, b);
    for (int g = 0; g < 4; ++g) {
      z[g] = Load128x4(row[g] + at_q, row[4 + g] + at_q, row[8 + g] + at_q, row[12 + g] + at_q);
    }
    Transpose4(z, q);
    for (int j = 0; j < 4; ++j) {
      // 16-bit shifts: the masks drop the bits that cross into the neighbouring byte.
      v[j] = _mm512_or_si512(_mm512_and_si512(a[j], nib),
                             _mm512_and_si512(_mm512_slli_epi16(q[j], 4), top));
      v[4 + j] = _mm512_or_si512(_mm512_and_si512(b[j], nib),
                                 _mm512_and_si512(_mm512_slli_epi16(q[j], 2), top));
      v[8 + j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a[j], 4), nib),
                                 _mm512_and_si512(q[j], top));
      v[12 + j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b[j], 4), nib),
                                  _mm512_and_si512(_mm512_srli_epi16(q[j], 2), top));
    }
  }

  // d sc of the 16 sub-blocks of the super-block at off.
  static void UnpackScales(const uint8_t* const* row, size_t off, __m512* d1) {
    __m512i z[4], t[4];
    const size_t at = off + 192;
    for (int g = 0; g < 4; ++g) {
      z[g] = Load128x4(row[g] + at, row[4 + g] + at, row[8 + g] + at, row[12 + g] + at);
    }
    Transpose4(z, t);  // t[j] lane r: scales 4j .. 4j + 3 of row r
    // d: bytes 14, 15 of the 16 at off + 194 (the last 16 bytes of the block), dword 3.
    const size_t at_d = off + 194;
    for (int g = 0; g < 4; ++g) {
      z[g] = Load128x4(row[g] + at_d, row[4 + g] + at_d, row[8 + g] + at_d, row[12 + g] + at_d);
    }
    const __m512i w3 =
        _mm512_unpackhi_epi64(_mm512_unpackhi_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[2], z[3]));
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w3, 16)));
    for (int u = 0; u < 16; ++u) {
      const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(t[u / 4], 24 - 8 * (u % 4)), 24);
      d1[u] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
    }
  }

  template <int NT, From kFrom>
  __attribute__((always_inline)) static void Step(const uint8_t* const* row, int64_t b, int64_t nb,
                                                  const uint8_t* xp, size_t xs, Unpacked* kept,
                                                  __m512* acc) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    __m512 d1_local[16];
    const __m512* d1 = d1_local;
    if constexpr (kFrom == From::kKept) {
      d1 = kept[b].d1;
    } else {
      UnpackScales(row, off, d1_local);
      if constexpr (kFrom == From::kRowsKeep) {
        for (int u = 0; u < 16; ++u) _mm512_store_ps(&kept[b].d1[u], d1[u]);
      }
    }
    const int64_t cols = nb * kBlockValues;
    const size_t bias_off = static_cast<size_t>(cols);
    const size_t dx_off = bias_off + static_cast<size_t>(cols / 16) * 4;
    constexpr int kDword[4] = {0, 4, 8, 12};
    for (int h = 0; h < 2; ++h) {
      for (int m = 0; m < 2; ++m) {
        const int quarter = 2 * h + m;
        __m512i v_local[16];
        const __m512i* v = v_local;
        if constexpr (kFrom == From::kKept) {
          v = kept[b].v + 16 * quarter;
        } else {
          UnpackQuarter(row, off, h, m, v_local);
          if constexpr (kFrom == From::kRowsKeep) {
            for (int j = 0; j < 16; ++j) {
              _mm512_store_si512(&kept[b].v[16 * quarter + j], v_local[j]);
            }
          }
        }
        for (int k = 0; k < 4; ++k) {
          const int u = 8 * h + 2 * k + m;  // sub-block of v[4k .. 4k + 3]
          const uint8_t* q[NT];
          __m512i init[NT], s[NT];
          for (int t = 0; t < NT; ++t) {
            const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
            q[t] = xt + static_cast<size_t>(b) * 256 + 16 * static_cast<size_t>(u);
            init[t] = _mm512_set1_epi32(
                Load32(xt + bias_off + 4 * (16 * static_cast<size_t>(b) + static_cast<size_t>(u))));
          }
          UnitSums<NT, 4>(v + 4 * k, q, kDword, init, s);
          const size_t at = dx_off + 4 * (8 * static_cast<size_t>(b) + static_cast<size_t>(u / 2));
          for (int t = 0; t < NT; ++t) {
            const float dx = LoadF32(xp + static_cast<size_t>(t) * xs + at);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]),
                                     _mm512_mul_ps(d1[u], _mm512_set1_ps(dx)), acc[t]);
          }
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Q3_K and Q2_K: 16 sub-blocks of 16 per 256-value super-block, 2-bit q laid out alike: half h
// (values 128h ..) has qs bytes 32h + l (l < 32) holding values 128h + 32s + l at bit shift 2s,
// s = 0..3; sub-block u = 8h + 2s + l / 16. They are unpacked a part at a time (part = l / 16:
// the 16 qs bytes 32h + 16 part .. serve the four sub-blocks 8h + 2s + part), vector j of a
// sub-block holding its values 4j .. 4j + 3 of every row. The prepared activation
// (x86_avx512_kquants.cc): int8 q[cols] in natural order, then per 16 values an int32 bias
// (Q3_K: -4 * sum(q)) or an f32 sx = dx * sum(q) (Q2_K), then f32 dx[Pad16(nb)].

// The 16 bytes at `at` of the 16 rows, transposed: t[j] lane r = bytes 4j .. 4j + 3 of row r.
__attribute__((always_inline))
inline void Load16Rows(const uint8_t* const* row, size_t at, __m512i* t) {
  __m512i z[4];
  for (int g = 0; g < 4; ++g) {
    z[g] = Load128x4(row[g] + at, row[4 + g] + at, row[8 + g] + at, row[12 + g] + at);
  }
  Transpose4(z, t);
}

// Q3_K (110 bytes): u8 hmask[32], u8 qs[64], u8 scales[12], f16 d; value = d (sc - 32) (q - 4),
// the kernel's unsigned q = 2 low bits | hmask bit << 2 (0..7; hmask[l] bit 4h + s for value
// 128h + 32s + l), the offset 4 taken back out by the prepared bias.
// Q2_K (84 bytes): u8 scales[16] (low nibble scale, high nibble min), u8 qs[64],
// f16 d, f16 dmin; value = (d sc) q - (dmin m), q = 0..3 unsigned.
template <bool kQ2>
struct Q23K {
  static constexpr size_t kBlockBytes = kQ2 ? 84 : 110;
  static constexpr size_t kQsOffset = kQ2 ? 16 : 32;
  static constexpr int64_t kBlockValues = 256;
  struct Unpacked {
    __m512i v[64];             // sub-block u: v[4 u .. 4 u + 3]
    __m512 d1[16];             // d sc per sub-block (Q3_K: d (sc - 32))
    __m512 m1[kQ2 ? 16 : 0];   // dmin m per sub-block (Q2_K)
  };

  static void Request(const uint8_t* const* rows, int64_t b, int64_t, int hint) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    for (size_t at = 0; at < kBlockBytes; at += 64) Request16(rows, off + at, hint);
    Request16(rows, off + kBlockBytes - 1, hint);
  }

  // The scales of the 16 sub-blocks of the super-block at off (and Q2_K's mins).
  static void UnpackScales(const uint8_t* const* row, size_t off, __m512* d1, __m512* m1) {
    const __m512i byte = _mm512_set1_epi32(0xff);
    __m512i t[4];
    if constexpr (kQ2) {
      Load16Rows(row, off, t);  // t[j] lane r: scales 4j .. 4j + 3 of row r
      // d | dmin << 16: dword 3 of the 16 bytes at off + 68.
      __m512i z[4];
      const size_t at = off + 68;
      for (int g = 0; g < 4; ++g) {
        z[g] = Load128x4(row[g] + at, row[4 + g] + at, row[8 + g] + at, row[12 + g] + at);
      }
      const __m512i w3 = _mm512_unpackhi_epi64(_mm512_unpackhi_epi32(z[0], z[1]),
                                               _mm512_unpackhi_epi32(z[2], z[3]));
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w3));
      const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w3, 16)));
      const __m512i nib = _mm512_set1_epi32(0x0f);
      for (int u = 0; u < 16; ++u) {
        const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(t[u / 4], 8 * (u % 4)), byte);
        d1[u] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(sc, nib)));
        m1[u] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)));
      }
    } else {
      // Bytes 94..109 (the block's last 16): t[0] = bytes 94..97, ..., t[3] = 106..109. Then
      // a = scales[0..3], bb = scales[4..7], c = scales[8..11] (the top bits), d in t[3]'s top.
      Load16Rows(row, off + 94, t);
      const __m512i a = _mm512_or_si512(_mm512_srli_epi32(t[0], 16), _mm512_slli_epi32(t[1], 16));
      const __m512i bb = _mm512_or_si512(_mm512_srli_epi32(t[1], 16), _mm512_slli_epi32(t[2], 16));
      const __m512i c = _mm512_or_si512(_mm512_srli_epi32(t[2], 16), _mm512_slli_epi32(t[3], 16));
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(t[3], 16)));
      const __m512i four = _mm512_set1_epi32(0x0f0f0f0f);
      const __m512i two = _mm512_set1_epi32(0x03030303);
      // Scales 4g .. 4g + 3: low 4 bits from a, bb, a >> 4, bb >> 4; top 2 bits c >> 2g.
      const __m512i low[4] = {_mm512_and_si512(a, four), _mm512_and_si512(bb, four),
                              _mm512_and_si512(_mm512_srli_epi32(a, 4), four),
                              _mm512_and_si512(_mm512_srli_epi32(bb, 4), four)};
      const __m512i thirty_two = _mm512_set1_epi32(32);
      for (int g = 0; g < 4; ++g) {
        const __m512i sc = _mm512_or_si512(
            low[g], _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(c, 2 * g), two), 4));
        for (int k = 0; k < 4; ++k) {
          const __m512i f = _mm512_and_si512(_mm512_srli_epi32(sc, 8 * k), byte);
          d1[4 * g + k] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(f, thirty_two)));
        }
      }
    }
  }

  // The four sub-blocks 8h + 2s + part (s = 0..3) into v[4s .. 4s + 3]; hm: Q3_K's hmask bytes
  // 16 part .. 16 part + 15, transposed.
  static void UnpackPart(const uint8_t* const* row, size_t off, int h, int part, const __m512i* hm,
                         __m512i* v) {
    __m512i t[4];
    Load16Rows(row, off + kQsOffset + 32 * static_cast<size_t>(h) + 16 * static_cast<size_t>(part),
               t);
    const __m512i three = _mm512_set1_epi8(3);
    for (int s = 0; s < 4; ++s) {
      for (int j = 0; j < 4; ++j) {
        // 16-bit shifts: the mask drops the bits that cross from the neighbouring byte.
        __m512i q = _mm512_and_si512(s == 0 ? t[j] : _mm512_srli_epi16(t[j], 2 * s), three);
        if constexpr (!kQ2) {
          const __mmask64 set =
              _mm512_test_epi8_mask(hm[j], _mm512_set1_epi8(static_cast<char>(1 << (4 * h + s))));
          q = _mm512_mask_add_epi8(q, set, q, _mm512_set1_epi8(4));
        }
        v[4 * s + j] = q;
      }
    }
  }

  template <int NT, From kFrom>
  __attribute__((always_inline)) static void Step(const uint8_t* const* row, int64_t b, int64_t nb,
                                                  const uint8_t* xp, size_t xs, Unpacked* kept,
                                                  __m512* acc) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    __m512 d1_local[16], m1_local[16];
    const __m512* d1 = d1_local;
    const __m512* m1 = m1_local;
    if constexpr (kFrom == From::kKept) {
      d1 = kept[b].d1;
      if constexpr (kQ2) m1 = kept[b].m1;
    } else {
      UnpackScales(row, off, d1_local, m1_local);
      if constexpr (kFrom == From::kRowsKeep) {
        for (int u = 0; u < 16; ++u) {
          _mm512_store_ps(&kept[b].d1[u], d1[u]);
          if constexpr (kQ2) _mm512_store_ps(&kept[b].m1[u], m1[u]);
        }
      }
    }
    const int64_t cols = nb * kBlockValues;
    const size_t per16_off = static_cast<size_t>(cols);  // bias (Q3_K) or sx (Q2_K) per 16
    const size_t dx_off = per16_off + static_cast<size_t>(cols / 16) * 4;
    constexpr int kDword[4] = {0, 4, 8, 12};
    for (int part = 0; part < 2; ++part) {
      __m512i hm[4];
      if constexpr (!kQ2 && kFrom != From::kKept) Load16Rows(row, off + 16 * part, hm);
      for (int h = 0; h < 2; ++h) {
        __m512i v_local[16];
        const __m512i* v = v_local;
        const int first = 16 * (2 * h + part);  // kept[b].v index of this part's vectors
        if constexpr (kFrom == From::kKept) {
          v = kept[b].v + first;
        } else {
          UnpackPart(row, off, h, part, hm, v_local);
          if constexpr (kFrom == From::kRowsKeep) {
            for (int j = 0; j < 16; ++j) _mm512_store_si512(&kept[b].v[first + j], v_local[j]);
          }
        }
        for (int s = 0; s < 4; ++s) {
          const int u = 8 * h + 2 * s + part;  // sub-block of v[4s .. 4s + 3]
          const size_t at16 = 4 * (16 * static_cast<size_t>(b) + static_cast<size_t>(u));
          const uint8_t* q[NT];
          __m512i init[NT], sums[NT];
          for (int t = 0; t < NT; ++t) {
            const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
            q[t] = xt + static_cast<size_t>(b) * 256 + 16 * static_cast<size_t>(u);
            init[t] = kQ2 ? _mm512_setzero_si512()
                          : _mm512_set1_epi32(Load32(xt + per16_off + at16));
          }
          UnitSums<NT, 4>(v + 4 * s, q, kDword, init, sums);
          const size_t at = dx_off + 4 * (8 * static_cast<size_t>(b) + static_cast<size_t>(u / 2));
          for (int t = 0; t < NT; ++t) {
            const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[t]),
                                     _mm512_mul_ps(d1[u], _mm512_set1_ps(LoadF32(xt + at))),
                                     acc[t]);
            if constexpr (kQ2) {
              acc[t] = _mm512_fnmadd_ps(m1[u], _mm512_set1_ps(LoadF32(xt + per16_off + at16)),
                                        acc[t]);
            }
          }
        }
      }
    }
  }
};
using Q3K = Q23K<false>;
using Q2K = Q23K<true>;

// ---------------------------------------------------------------------------------------------
// The 16-row passes, for any of the types above (K).

// What a pass requests for later while it runs, spread evenly over its blocks: a span of lines
// (the next rows of a dense product), or 16 rows of row_lines lines each (the next rows of a
// gather), row after row. Whole rows in order, not the 16 rows at the offset being read: that
// interleaving of 16 streams ran at half the speed (kernels_bench GatherRows, Q6_K 5632x2048,
// density 0.5, 1 thread: 5.6 GB/s; dense decode alike before it used the span).
struct Ahead {
  const uint8_t* span = nullptr;
  const uint8_t* const* rows = nullptr;
  int64_t row_lines = 0;
  int64_t row_end = 0;  // offset of a row's last byte
  int64_t lines = 0;    // all of them: span's, or 16 row_lines
};

// Rows row[0..15] (nb blocks) against NT tokens prepared at xp + t * xs: acc[t] lane r =
// row r · x_t. ahead (or nullptr): 16 rows requested meanwhile into L2; shadow (or nullptr): 16
// rows requested into L1 at the offsets being read. kept: the buffer of From::kRowsKeep / kKept.
template <class K, int NT, From kFrom>
void Group(const uint8_t* const* row, int64_t nb, const uint8_t* xp, size_t xs, const Ahead& ahead,
           const uint8_t* const* shadow, typename K::Unpacked* kept, __m512* acc) {
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // This block's share of the lines ahead.
    for (int64_t l = b * ahead.lines / nb; l < (b + 1) * ahead.lines / nb; ++l) {
      // A row's last request is its last byte (rows need not start on a line).
      const uint8_t* p =
          ahead.span != nullptr
              ? ahead.span + 64 * l
              : ahead.rows[l / ahead.row_lines] + Min64(64 * (l % ahead.row_lines), ahead.row_end);
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
    }
    if (shadow != nullptr) K::Request(shadow, b, nb, 0);
    K::template Step<NT, kFrom>(row, b, nb, xp, xs, kept, acc);
  }
}

// Group<K, NT, kFrom> for nt = 1 .. kMaxTokens tokens.
template <class K, From kFrom>
void GroupTokens(int nt, const uint8_t* const* row, int64_t nb, const uint8_t* xp, size_t xs,
                 const Ahead& ahead, const uint8_t* const* shadow, typename K::Unpacked* kept,
                 __m512* acc) {
  switch (nt) {
    case 8:
      Group<K, 8, kFrom>(row, nb, xp, xs, ahead, shadow, kept, acc);
      return;
    case 7:
      Group<K, 7, kFrom>(row, nb, xp, xs, ahead, shadow, kept, acc);
      return;
    case 6:
      Group<K, 6, kFrom>(row, nb, xp, xs, ahead, shadow, kept, acc);
      return;
    case 5:
      Group<K, 5, kFrom>(row, nb, xp, xs, ahead, shadow, kept, acc);
      return;
    case 4:
      Group<K, 4, kFrom>(row, nb, xp, xs, ahead, shadow, kept, acc);
      return;
    case 3:
      Group<K, 3, kFrom>(row, nb, xp, xs, ahead, shadow, kept, acc);
      return;
    case 2:
      Group<K, 2, kFrom>(row, nb, xp, xs, ahead, shadow, kept, acc);
      return;
    default:
      Group<K, 1, kFrom>(row, nb, xp, xs, ahead, shadow, kept, acc);
      return;
  }
}

// The dense rows; kept: a buffer of nb unpacked blocks, or nullptr (every pass unpacks).
template <class K>
void Rows16DotWith(const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                   const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                   const uint8_t* pf, typename K::Unpacked* kept) {
  const auto* x = static_cast<const uint8_t*>(xp);
  const int64_t nb = cols / K::kBlockValues;
  const uint8_t* row[kRows];
  const uint8_t* shadow[kRows];
  __m512 acc[kMaxTokens];
  const bool keep = kept != nullptr;
  const uint8_t* end = w + static_cast<size_t>(n_rows) * row_stride;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const int64_t n = Min64(kRows, n_rows - r0);
    // Lanes past the last row repeat it (read, never stored).
    for (int i = 0; i < kRows; ++i) {
      const size_t r = static_cast<size_t>(r0 + Min64(i, n - 1));
      row[i] = w + r * row_stride;
      if (pf != nullptr) shadow[i] = pf + r * row_stride;
    }
    // The next group's bytes, requested while this one runs (the look-ahead stays inside the
    // rows of this call).
    Ahead ahead;
    if (r0 + kRows < n_rows) {
      ahead.span = w + static_cast<size_t>(r0 + kRows) * row_stride;
      const size_t bytes = static_cast<size_t>(end - ahead.span);
      ahead.lines = static_cast<int64_t>(
          ((bytes < kRows * row_stride ? bytes : kRows * row_stride) + 63) / 64);
    }
    const __mmask16 m = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
    for (int64_t t0 = 0; t0 < n_tok; t0 += kMaxTokens) {
      const int nt = static_cast<int>(Min64(kMaxTokens, n_tok - t0));
      const uint8_t* xt = x + static_cast<size_t>(t0) * xp_stride;
      if (t0 == 0) {
        const uint8_t* const* sh = pf != nullptr ? shadow : nullptr;
        if (keep) {
          GroupTokens<K, From::kRowsKeep>(nt, row, nb, xt, xp_stride, ahead, sh, kept, acc);
        } else {
          GroupTokens<K, From::kRows>(nt, row, nb, xt, xp_stride, ahead, sh, nullptr, acc);
        }
      } else if (keep) {
        GroupTokens<K, From::kKept>(nt, row, nb, xt, xp_stride, Ahead{}, nullptr, kept, acc);
      } else {
        GroupTokens<K, From::kRows>(nt, row, nb, xt, xp_stride, Ahead{}, nullptr, nullptr, acc);
      }
      for (int t = 0; t < nt; ++t) {
        _mm512_mask_storeu_ps(y + static_cast<size_t>(t0 + t) * y_stride + r0, m, acc[t]);
      }
    }
  }
}

// The keep buffer lives in this frame only, so a call that does not keep (decode, a row too
// long) does not carry (and probe) 144 KiB of stack.
template <class K>
__attribute__((noinline)) void Rows16DotKept(const uint8_t* w, size_t row_stride, int64_t cols,
                                             int64_t n_rows, const void* xp, size_t xp_stride,
                                             int64_t n_tok, float* y, size_t y_stride,
                                             const uint8_t* pf) {
  using U = typename K::Unpacked;
  alignas(64) U kept[kKeptBytes / sizeof(U)];
  Rows16DotWith<K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf, kept);
}

// With more tokens than one pass takes, the first pass keeps the unpacked blocks for the others
// (when they fit).
template <class K>
void Rows16Dot(const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows, const void* xp,
               size_t xp_stride, int64_t n_tok, float* y, size_t y_stride, const uint8_t* pf) {
  constexpr int64_t kKeptBlocks = static_cast<int64_t>(kKeptBytes / sizeof(typename K::Unpacked));
  if (n_tok > kMaxTokens && cols / K::kBlockValues <= kKeptBlocks) {
    Rows16DotKept<K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
  } else {
    Rows16DotWith<K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf, nullptr);
  }
}

template <class K>
void Rows16Gather(const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
                  int64_t n_idx, const void* xp, float* y) {
  const auto* x = static_cast<const uint8_t*>(xp);
  const int64_t nb = cols / K::kBlockValues;
  const uint8_t* row[kRows];
  const uint8_t* ahead[kRows];
  alignas(64) float out[kRows];
  for (int64_t k0 = 0; k0 < n_idx; k0 += kRows) {
    const int64_t n = Min64(kRows, n_idx - k0);
    for (int i = 0; i < kRows; ++i) {
      row[i] = w + static_cast<size_t>(idx[k0 + Min64(i, n - 1)]) * row_stride;
    }
    const int64_t next = k0 + kRows;
    if (next < n_idx) {
      for (int i = 0; i < kRows; ++i) {
        ahead[i] = w + static_cast<size_t>(idx[Min64(next + i, n_idx - 1)]) * row_stride;
      }
    }
    Ahead a;
    if (next < n_idx) {
      a.rows = ahead;
      const int64_t bytes = nb * static_cast<int64_t>(K::kBlockBytes);
      a.row_lines = (bytes + 63) / 64 + 1;
      a.row_end = bytes - 1;
      a.lines = kRows * a.row_lines;
    }
    __m512 acc;
    Group<K, 1, From::kRows>(row, nb, x, 0, a, nullptr, nullptr, &acc);
    _mm512_store_ps(out, acc);
    for (int i = 0; i < n; ++i) y[idx[k0 + i]] = out[i];
  }
}

}  // namespace

bool Avx512Rows16Type(DType t) {
  return ((kAvx512Rows16Types >> static_cast<uint32_t>(t)) & 1u) != 0;
}

void Avx512Rows16Dot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                     const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                     const uint8_t* pf) {
  switch (t) {
    case DType::kQ8_0:
      return Rows16Dot<Q80>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ5_0:
      return Rows16Dot<Q50>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ5_1:
      return Rows16Dot<Q51>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ2_K:
      return Rows16Dot<Q2K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ3_K:
      return Rows16Dot<Q3K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ4_K:
      return Rows16Dot<Q4K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ5_K:
      return Rows16Dot<Q5K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ6_K:
      return Rows16Dot<Q6K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kIQ4_NL:
      return Rows16Dot<IQ4NL>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kIQ4_XS:
      return Rows16Dot<IQ4XS>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    default:  // not in kAvx512Rows16Types: never sent here
      __builtin_trap();
  }
}

void Avx512Rows16Gather(DType t, const uint8_t* w, size_t row_stride, int64_t cols,
                        const int32_t* idx, int64_t n_idx, const void* xp, float* y) {
  switch (t) {
    case DType::kQ8_0:
      return Rows16Gather<Q80>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ5_0:
      return Rows16Gather<Q50>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ5_1:
      return Rows16Gather<Q51>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ2_K:
      return Rows16Gather<Q2K>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ3_K:
      return Rows16Gather<Q3K>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ4_K:
      return Rows16Gather<Q4K>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ5_K:
      return Rows16Gather<Q5K>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ6_K:
      return Rows16Gather<Q6K>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kIQ4_NL:
      return Rows16Gather<IQ4NL>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kIQ4_XS:
      return Rows16Gather<IQ4XS>(w, row_stride, cols, idx, n_idx, xp, y);
    default:  // not in kAvx512Rows16Types: never sent here
      __builtin_trap();
  }
}

}  // namespace weir::kernels::internal

#else  // not x86-64

#include "kernels/internal/avx512_rows16.h"

namespace weir::kernels::internal {
bool Avx512Rows16Type(DType) { return false; }
void Avx512Rows16Dot(DType, const uint8_t*, size_t, int64_t, int64_t, const void*, size_t, int64_t,
                     float*, size_t, const uint8_t*) {}
void Avx512Rows16Gather(DType, const uint8_t*, size_t, int64_t, const int32_t*, int64_t,
                        const void*, float*) {}
}  // namespace weir::kernels::internal

#endif
