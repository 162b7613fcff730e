// AVX-512 VBMI kernel of the quantized column form (see internal/avx512_vbmi.h). Compiled with
// -mavx512vbmi on top of the AVX-512 flags, reached only when the CPU has VBMI.
//
// Four rows' blocks are loaded into one vector and their bytes transposed with vpermb (vpermt2b
// for Q8_0) so that each 32-bit lane holds one output's four weights; vpdpbusd then multiplies
// them by the group's four int8 coefficients: one instruction per 16 outputs of 4 rows, instead
// of widening every weight to f32.
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/internal/avx512_vbmi.h"

namespace weir::kernels::internal {
namespace {

constexpr int kQ = 32;
constexpr size_t kQ4Bytes = 18;
constexpr size_t kQ8Bytes = 34;

// vpermb indices: from [A0..15 | B0..15 | C0..15 | D0..15] to dwords [Aj Bj Cj Dj], j = 0..15.
inline __m512i TransposeIndex4x16() {
  alignas(64) uint8_t idx[64];
  for (int j = 0; j < 16; ++j) {
    for (int k = 0; k < 4; ++k) idx[4 * j + k] = static_cast<uint8_t>(16 * k + j);
  }
  return _mm512_load_si512(idx);
}

// vpermt2b indices over X = [A0..31 | B0..31], Y = [C0..31 | D0..31] (bytes 64.. of the pair):
// dwords [Aj Bj Cj Dj] for j = base .. base + 15.
inline __m512i TransposeIndex4x32(int base) {
  alignas(64) uint8_t idx[64];
  for (int j = 0; j < 16; ++j) {
    for (int k = 0; k < 4; ++k) idx[4 * j + k] = static_cast<uint8_t>(32 * k + base + j);
  }
  return _mm512_load_si512(idx);
}

// One block of one group: the group's four rows' weights of block b, transposed so that each
// 32-bit lane holds one output's four weights (unsigned), as two vectors of 16 outputs.
struct BlockLanes {
  __m512i lo, hi;
};

inline BlockLanes Q4Lanes(const uint8_t* const* rows, size_t off, __m512i perm) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512i v = _mm512_castsi128_si512(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[0] + off + 2)));
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[1] + off + 2)),
                         1);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[2] + off + 2)),
                         2);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[3] + off + 2)),
                         3);
  const __m512i p = _mm512_permutexvar_epi8(perm, v);
  return {_mm512_and_si512(p, low), _mm512_and_si512(_mm512_srli_epi16(p, 4), low)};
}

inline BlockLanes Q8Lanes(const uint8_t* const* rows, size_t off, __m512i perm_lo,
                          __m512i perm_hi) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i x = _mm512_inserti64x4(
      _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[0] + off + 2))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[1] + off + 2)), 1);
  const __m512i y = _mm512_inserti64x4(
      _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[2] + off + 2))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[3] + off + 2)), 1);
  return {_mm512_xor_si512(_mm512_permutex2var_epi8(x, perm_lo, y), flip),
          _mm512_xor_si512(_mm512_permutex2var_epi8(x, perm_hi, y), flip)};
}

// G groups per pass: the accumulators of a block are loaded and stored once for all of them,
// and each group is added by the same fused multiply-add, in group order, as G passes would
// (so the result is the same bits).
template <bool kQ4, int G>
void AxpyChunkGroups(const uint8_t* const* rows, const uint8_t* const* pf, int64_t c, int64_t n,
                     const float* scale, const int32_t* packed, const int32_t* bias, float* acc) {
  constexpr size_t bb = kQ4 ? kQ4Bytes : kQ8Bytes;
  const __m512i perm = TransposeIndex4x16();
  const __m512i perm_lo = TransposeIndex4x32(0);
  const __m512i perm_hi = TransposeIndex4x32(16);
  for (int64_t k = 0; k < n; ++k) {
    const size_t off = static_cast<size_t>(c + k) * bb;
    if (pf != nullptr) {
      // Each line once, by the block in which it begins (a block is 18 or 34 bytes: a request
      // per block would repeat most lines, and repeated requests still occupy the load ports).
      for (int i = 0; i < 4 * G; ++i) {
        const uintptr_t first = reinterpret_cast<uintptr_t>(pf[i] + off);
        const uintptr_t last = first + bb - 1;
        if ((first & 63) == 0 || (last >> 6) != (first >> 6)) {
          _mm_prefetch(reinterpret_cast<const char*>(last), _MM_HINT_T0);
        }
      }
    }
    float* a = acc + (c + k) * kQ;
    __m512 a0 = _mm512_loadu_ps(a), a1 = _mm512_loadu_ps(a + 16);
    for (int g = 0; g < G; ++g) {
      const BlockLanes w = kQ4 ? Q4Lanes(rows + 4 * g, off, perm)
                               : Q8Lanes(rows + 4 * g, off, perm_lo, perm_hi);
      const __m512i t = _mm512_set1_epi32(packed[16 * g + k]);
      const __m512i b = _mm512_set1_epi32(bias[16 * g + k]);
      const __m512 s = _mm512_set1_ps(scale[16 * g + k]);
      a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(b, w.lo, t)), s, a0);
      a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(b, w.hi, t)), s, a1);
    }
    _mm512_storeu_ps(a, a0);
    _mm512_storeu_ps(a + 16, a1);
  }
}

}  // namespace

void Avx512VbmiAxpyChunk(bool q4, int groups, const uint8_t* const* rows,
                         const uint8_t* const* pf, int64_t c, int64_t n, const float* scale,
                         const int32_t* packed, const int32_t* bias, float* acc) {
  if (groups == 2) {
    if (q4) {
      AxpyChunkGroups<true, 2>(rows, pf, c, n, scale, packed, bias, acc);
    } else {
      AxpyChunkGroups<false, 2>(rows, pf, c, n, scale, packed, bias, acc);
    }
    return;
  }
  if (q4) {
    AxpyChunkGroups<true, 1>(rows, pf, c, n, scale, packed, bias, acc);
  } else {
    AxpyChunkGroups<false, 1>(rows, pf, c, n, scale, packed, bias, acc);
  }
}

}  // namespace weir::kernels::internal

#else  // not x86-64

#include "kernels/internal/avx512_vbmi.h"

namespace weir::kernels::internal {
void Avx512VbmiAxpyChunk(bool, int, const uint8_t* const*, const uint8_t* const*, int64_t, int64_t,
                         const float*, const int32_t*, const int32_t*, float*) {}
}  // namespace weir::kernels::internal

#endif
