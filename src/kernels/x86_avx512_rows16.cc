// AVX-512 kernels of Q5_0 over 16 rows at a time (see internal/avx512_rows16.h). Compiled with the
// AVX-512 F/BW/VL + VNNI flags (src/kernels/CMakeLists.txt) and reached only through
// x86_avx512.cc's table after isa.cc found those features, so, like the other SIMD files, it calls
// no inline code from other headers (see internal/isa_kernels.h).
//
// A Q5_0 block (22 bytes): f16 d, u32 qh (bit i: the fifth bit of value i), u8 qs[16] (value i in
// the low nibble of qs[i], value 16 + i in the high one); value = d (q - 16), q = 0..31.
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/internal/avx512_rows16.h"

namespace weir::kernels::internal {
namespace {

constexpr int kRows = 16;          // rows per pass, one per 32-bit lane
constexpr int kMaxTokens = 8;      // tokens sharing one unpacked block
constexpr size_t kBlockBytes = 22;
constexpr size_t kPairBytes = 128;  // one prepared record per pair of blocks

inline int64_t Pad16(int64_t n) { return (n + 15) / 16 * 16; }
inline int64_t PairCount(int64_t nb) { return (nb + 1) / 2; }
inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline int32_t Load32(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}
inline __m512i Load128x4(const uint8_t* a, const uint8_t* b, const uint8_t* c, const uint8_t* d) {
  __m512i z = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(c)), 2);
  return _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(d)), 3);
}

// In each 128-bit lane k, the 4 x 4 dword transpose of in[0..3]: out[j] lane k dword g =
// in[g] lane k dword j.
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

// The block at byte offset off of the 16 rows as 8 vectors of unsigned q (0..31): lane r of v[j]
// holds values 4j .. 4j + 3 of row r. The loads put row 4k + g in 128-bit lane k of vector g, so
// the in-lane transposes leave row 4k + g in dword 4k + g: rows in lane order, no lane crossing.
// *d: the rows' scales as f32, lane r = row r.
inline void Unpack(const uint8_t* const* row, size_t off, __m512i* v, __m512* d) {
  const __m512i nib = _mm512_set1_epi8(0x0f);
  __m512i lo[4], hi[4], head[4];
  for (int g = 0; g < 4; ++g) {
    const __m512i z = Load128x4(row[g] + off + 6, row[4 + g] + off + 6, row[8 + g] + off + 6,
                                row[12 + g] + off + 6);
    lo[g] = _mm512_and_si512(z, nib);
    hi[g] = _mm512_and_si512(_mm512_srli_epi16(z, 4), nib);
    // Bytes 0..7 of the block: d, qh, qs[0..1].
    head[g] = Load128x4(row[g] + off, row[4 + g] + off, row[8 + g] + off, row[12 + g] + off);
  }
  Transpose4(lo, v);
  Transpose4(hi, v + 4);
  // Dwords 0 and 1 of each row's block, lane r = row r: w0 = d | qh << 16, w1 = qh >> 16 | ...
  const __m512i t0 = _mm512_unpacklo_epi32(head[0], head[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(head[2], head[3]);
  const __m512i w0 = _mm512_unpacklo_epi64(t0, t2);
  const __m512i w1 = _mm512_unpackhi_epi64(t0, t2);
  *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0));
  const __m512i qh = _mm512_or_si512(_mm512_srli_epi32(w0, 16), _mm512_slli_epi32(w1, 16));
  // Vector j's values 4j + b sit in byte j / 2 of qh, bit 4 (j & 1) + b: that byte copied to the
  // four bytes of its dword, tested against 1 << (4 (j & 1) + b) per byte.
  const __m512i bits_even = _mm512_set1_epi32(0x08040201);
  const __m512i bits_odd = _mm512_set1_epi32(static_cast<int>(0x80402010u));
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i dword_base = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
  for (int s = 0; s < 4; ++s) {
    const __m512i spread = _mm512_shuffle_epi8(
        qh, _mm512_add_epi8(dword_base, _mm512_set1_epi8(static_cast<char>(s))));
    const __mmask64 e = _mm512_test_epi8_mask(spread, bits_even);
    const __mmask64 o = _mm512_test_epi8_mask(spread, bits_odd);
    v[2 * s] = _mm512_mask_add_epi8(v[2 * s], e, v[2 * s], sixteen);
    v[2 * s + 1] = _mm512_mask_add_epi8(v[2 * s + 1], o, v[2 * s + 1], sixteen);
  }
}

// Where values 4j .. 4j + 3 of block b lie in a token's prepared records (the Q4_0 order of
// x86_avx512.cc: A[0..15] B[0..15] A[16..31] B[16..31]).
constexpr int kActDword[8] = {0, 4, 8, 12, 32, 36, 40, 44};
inline size_t BlockRecordOffset(int64_t b) {
  return static_cast<size_t>(b / 2) * kPairBytes + static_cast<size_t>(b & 1) * 16;
}

// Rows row[0..15] (blocks 0 .. nb - 1) against NT tokens prepared at xp + t * xs: acc[t] lane r
// = row r · x_t. ahead (or nullptr): 16 rows requested meanwhile into L2; shadow (or nullptr): 16
// rows requested into L1 at the offsets being read.
template <int NT>
void Group(const uint8_t* const* row, int64_t nb, const uint8_t* xp, size_t xs,
           const uint8_t* const* ahead, const uint8_t* const* shadow, __m512* acc) {
  constexpr bool kTwoChains = NT < 4;  // enough independent vpdpbusd in flight
  const size_t dx_off = static_cast<size_t>(PairCount(nb)) * kPairBytes;
  const size_t bias_off = dx_off + static_cast<size_t>(Pad16(nb)) * 4;
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    // Two blocks are 44 bytes: requesting every other block start, and the last byte, touches
    // every line of the rows.
    if ((b & 1) == 0 || b == nb - 1) {
      const size_t at = (b & 1) == 0 ? off : off + kBlockBytes - 1;
      if (ahead != nullptr) {
        for (int i = 0; i < kRows; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead[i] + at), _MM_HINT_T1);
        }
      }
      if (shadow != nullptr) {
        for (int i = 0; i < kRows; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(shadow[i] + at), _MM_HINT_T0);
        }
      }
    }
    __m512i v[8];
    __m512 d;
    Unpack(row, off, v, &d);
    const size_t xoff = BlockRecordOffset(b);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
      const uint8_t* q = xt + xoff;
      __m512i s0 = _mm512_set1_epi32(Load32(xt + bias_off + 4 * static_cast<size_t>(b)));
      __m512i s1 = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        __m512i& s = (kTwoChains && (j & 1)) ? s1 : s0;
        s = _mm512_dpbusd_epi32(s, v[j], _mm512_set1_epi32(Load32(q + kActDword[j])));
      }
      if constexpr (kTwoChains) s0 = _mm512_add_epi32(s0, s1);
      float dx;
      __builtin_memcpy(&dx, xt + dx_off + 4 * static_cast<size_t>(b), 4);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(d, _mm512_set1_ps(dx)),
                               acc[t]);
    }
  }
}

// Group<NT> for nt = 1 .. kMaxTokens tokens.
void GroupTokens(int nt, const uint8_t* const* row, int64_t nb, const uint8_t* xp, size_t xs,
                 const uint8_t* const* ahead, const uint8_t* const* shadow, __m512* acc) {
  switch (nt) {
    case 8: Group<8>(row, nb, xp, xs, ahead, shadow, acc); return;
    case 7: Group<7>(row, nb, xp, xs, ahead, shadow, acc); return;
    case 6: Group<6>(row, nb, xp, xs, ahead, shadow, acc); return;
    case 5: Group<5>(row, nb, xp, xs, ahead, shadow, acc); return;
    case 4: Group<4>(row, nb, xp, xs, ahead, shadow, acc); return;
    case 3: Group<3>(row, nb, xp, xs, ahead, shadow, acc); return;
    case 2: Group<2>(row, nb, xp, xs, ahead, shadow, acc); return;
    default: Group<1>(row, nb, xp, xs, ahead, shadow, acc); return;
  }
}

}  // namespace

void Avx512Q50Dot(const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                  const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                  const uint8_t* pf) {
  const auto* x = static_cast<const uint8_t*>(xp);
  const int64_t nb = cols / 32;
  const uint8_t* row[kRows];
  const uint8_t* ahead[kRows];
  const uint8_t* shadow[kRows];
  __m512 acc[kMaxTokens];
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const int64_t n = Min64(kRows, n_rows - r0);
    // Lanes past the last row repeat it (read, never stored).
    for (int i = 0; i < kRows; ++i) {
      const size_t r = static_cast<size_t>(r0 + Min64(i, n - 1));
      row[i] = w + r * row_stride;
      if (pf != nullptr) shadow[i] = pf + r * row_stride;
    }
    // The next group, requested while this one runs (the look-ahead stays inside the rows of
    // this call).
    const int64_t next = r0 + kRows;
    if (next < n_rows) {
      for (int i = 0; i < kRows; ++i) {
        ahead[i] = w + static_cast<size_t>(Min64(next + i, n_rows - 1)) * row_stride;
      }
    }
    const __mmask16 m = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
    for (int64_t t0 = 0; t0 < n_tok; t0 += kMaxTokens) {
      const int nt = static_cast<int>(Min64(kMaxTokens, n_tok - t0));
      const bool first = t0 == 0;
      GroupTokens(nt, row, nb, x + static_cast<size_t>(t0) * xp_stride, xp_stride,
                  first && next < n_rows ? ahead : nullptr,
                  first && pf != nullptr ? shadow : nullptr, acc);
      for (int t = 0; t < nt; ++t) {
        _mm512_mask_storeu_ps(y + static_cast<size_t>(t0 + t) * y_stride + r0, m, acc[t]);
      }
    }
  }
}

void Avx512Q50DotGather(const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
                        int64_t n_idx, const void* xp, float* y) {
  const auto* x = static_cast<const uint8_t*>(xp);
  const int64_t nb = cols / 32;
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
    __m512 acc;
    Group<1>(row, nb, x, 0, next < n_idx ? ahead : nullptr, nullptr, &acc);
    _mm512_store_ps(out, acc);
    for (int i = 0; i < n; ++i) y[idx[k0 + i]] = out[i];
  }
}

}  // namespace weir::kernels::internal

#else  // not x86-64

#include "kernels/internal/avx512_rows16.h"

namespace weir::kernels::internal {
void Avx512Q50Dot(const uint8_t*, size_t, int64_t, int64_t, const void*, size_t, int64_t, float*,
                  size_t, const uint8_t*) {}
void Avx512Q50DotGather(const uint8_t*, size_t, int64_t, const int32_t*, int64_t, const void*,
                        float*) {}
}  // namespace weir::kernels::internal

#endif
