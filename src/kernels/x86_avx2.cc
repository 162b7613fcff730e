// The "avx2" path: AVX2 + FMA + F16C kernels (no AVX-512, no VNNI). This file is compiled with
// those -m flags (src/kernels/CMakeLists.txt) and only reached after isa.cc found the CPU
// features, so it must not call inline code from other headers (see internal/isa_kernels.h).
//
// Quantized weights use vpmaddubsw (u8 x s8 -> s16 pairs) then vpmaddwd to s32, one 32-value
// block per 256-bit vector. Q8_0 makes the weight unsigned with the sign trick
// (|w| * sign(x, w)); Q4_0 uses the raw nibble 0..15 and adds back -8 * sum(x) from a bias
// computed once per call when the activation is prepared. Q4_1 (d * q + m) multiplies its raw
// nibbles the same way, without the bias, and adds m * d_x * sum(x_q) per block from block sums
// also computed at preparation.
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/internal/avx2_rows8.h"
#include "kernels/internal/isa_kernels.h"

namespace weir::kernels::internal {
namespace {

constexpr int kQ = 32;
// How far ahead of the weights being multiplied the dense dot products ask for more (see
// x86_avx512.cc).
constexpr size_t kPrefetchBytes = 2048;

// Look-ahead to L2, Q4_0 to L1 (see x86_avx512.cc).
template <bool kToL1>
inline void PrefetchAhead(const uint8_t* p) {
  if constexpr (kToL1) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  } else {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  }
}
constexpr size_t kQ8Bytes = 34;
constexpr size_t kQ4Bytes = 18;
constexpr size_t kQ41Bytes = 20;  // Q4_1: f16 d, f16 m, 16 nibble bytes

inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline float HalfToFloat(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float BF16ToFloat(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---------------------------------------------------------------------------------------------
// Prepared activation for Q8_0 / Q4_0 / Q4_1 weights: one 64-byte record per block,
//   int8 q[32]       quantized x in natural order
//   int32 bias[8]    lane l: -8 * (q[4l] + ... + q[4l+3])   (used by Q4_0 only)
// followed by f32 dx[nb], the activation scales, zero-padded to a multiple of 8, and for Q4_1
// by f32 sx[nb] = dx[b] * sum(q of block b) (the min term's factor), padded alike. Q5_0, Q5_1
// and the K types (internal/avx2_rows8.h) use the same records and dx, followed by int32 sum16[2 nb],
// the sum of the q of each 16 values.
constexpr size_t kRecBytes = 64;

inline int64_t Pad8(int64_t n) { return (n + 7) / 8 * 8; }

size_t PrepBytes(DType t, int64_t cols) {
  const int64_t nb = cols / kQ;
  const size_t records = static_cast<size_t>(nb) * kRecBytes;
  if (Avx2Rows8Type(t)) return records + static_cast<size_t>(Pad8(nb)) * 4 + 8 * nb;
  if (t != DType::kQ8_0 && t != DType::kQ4_0 && t != DType::kQ4_1) return 0;
  const size_t scale_arrays = t == DType::kQ4_1 ? 2 : 1;
  return records + scale_arrays * static_cast<size_t>(Pad8(nb)) * 4;
}

// The f16 scales of up to 8 consecutive blocks (stride bb bytes) as f32, lanes past n zero.
// One gather instead of 8 scalar half conversions.
template <size_t bb>
inline __m256i BlockWords8(const uint8_t* first, int64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i offsets = _mm256_mullo_epi32(lane, _mm256_set1_epi32(static_cast<int>(bb)));
  const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
  return _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(first),
                                     offsets, valid, 1);
}
// The low f16 of each gathered word as f32.
inline __m256 LowHalves(__m256i words) {
  words = _mm256_and_si256(words, _mm256_set1_epi32(0xffff));
  // Narrow 8 x 32-bit to 8 x 16-bit (packus works per 128-bit lane; gather the halves).
  const __m256i packed =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(words, _mm256_setzero_si256()), 0x08);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}
// The high f16 of each word (a Q4_1 block starts with d, then m: one gather gives both).
inline __m256 HighHalves(__m256i words) { return LowHalves(_mm256_srli_epi32(words, 16)); }
template <size_t bb>
inline __m256 BlockScales8(const uint8_t* first, int64_t n) {
  return LowHalves(BlockWords8<bb>(first, n));
}

void Prep(DType t, const float* x, int64_t cols, void* out) {
  const int64_t nb = cols / kQ;
  auto* base = static_cast<uint8_t*>(out);
  auto* dx = reinterpret_cast<float*>(base + static_cast<size_t>(nb) * kRecBytes);
  float* sx = t == DType::kQ4_1 ? dx + Pad8(nb) : nullptr;
  auto* sum16 = Avx2Rows8Type(t) ? reinterpret_cast<int32_t*>(dx + Pad8(nb)) : nullptr;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = nb; b < Pad8(nb); ++b) dx[b] = 0;
  if (sx != nullptr) {
    for (int64_t b = nb; b < Pad8(nb); ++b) sx[b] = 0;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQ;
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    }
    const float amax = HMax(m);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0 ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    // Pack 32 int32 to 32 int8 (values are within [-127, 127], no saturation happens), then
    // undo the lane interleave of the pack instructions.
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    uint8_t* rec = base + static_cast<size_t>(b) * kRecBytes;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec), p);
    // Sum of each 4 consecutive q: maddubs(1, q) gives pair sums, madd(…, 1) sums the pairs.
    const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, p), ones16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 32),
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s4, 3)));
    dx[b] = d;
    if (sx != nullptr) {
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
      sx[b] = d * static_cast<float>(_mm_cvtsi128_si32(s));
    }
    if (sum16 != nullptr) {
      // Lanes 0-3 hold q[0..15]'s sums of four, lanes 4-7 q[16..31]'s.
      alignas(32) int32_t lane[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lane), s4);
      sum16[2 * b] = lane[0] + lane[1] + lane[2] + lane[3];
      sum16[2 * b + 1] = lane[4] + lane[5] + lane[6] + lane[7];
    }
  }
}

// One quantized block against NT tokens. x is the first token's record, xs the record stride
// between tokens, scale[t] the block's weight scale times token t's activation scale. kMin
// (Q4_1, with kQ4): the nibbles start at byte 4 and no bias is added (the min term is separate).
template <bool kQ4, int NT, bool kMin = false>
inline void DotBlock(const uint8_t* blk, const uint8_t* x, size_t xs, const float* scale,
                     __m256* acc) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  if constexpr (kQ4) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (kMin ? 4 : 2)));
    const __m256i w = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
        _mm256_set1_epi8(0x0f));
    for (int t = 0; t < NT; ++t) {
      const uint8_t* r = x + t * xs;
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r));
      __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(w, xq), ones16);
      if constexpr (!kMin) {
        isum = _mm256_add_epi32(isum, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + 32)));
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(scale[8 * t]), acc[t]);
    }
  } else {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i aw = _mm256_sign_epi8(w, w);
    for (int t = 0; t < NT; ++t) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + t * xs));
      const __m256i isum =
          _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, w)), ones16);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(scale[8 * t]), acc[t]);
    }
  }
}

// kMin (Q4_1, with kQ4): 20-byte blocks; sum_b m[b] * sx[b] (sx from Prep) goes into a third
// accumulator.
template <bool kQ4, int NT, bool kMin = false>
void DotQuantRow(const uint8_t* row, int64_t nb, const uint8_t* xp, size_t xs, float* y, size_t ys,
                 const uint8_t* pf_end, const uint8_t* pf_shadow) {
  constexpr size_t bb = kMin ? kQ41Bytes : (kQ4 ? kQ4Bytes : kQ8Bytes);
  const auto* dx = reinterpret_cast<const float*>(xp + static_cast<size_t>(nb) * kRecBytes);
  alignas(32) float scale[NT][8];
  __m256 acc0[NT], acc1[NT], accm[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = accm[t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < nb; c += 8) {
    const int64_t n = Min64(8, nb - c);
    const __m256i words = BlockWords8<bb>(row + c * bb, n);
    const __m256 sw = LowHalves(words);
    for (int t = 0; t < NT; ++t) {
      _mm256_store_ps(scale[t],
                      _mm256_mul_ps(sw, _mm256_loadu_ps(dx + static_cast<size_t>(t) * xs / 4 + c)));
    }
    if constexpr (kMin) {
      const __m256 mw = HighHalves(words);
      for (int t = 0; t < NT; ++t) {
        accm[t] = _mm256_fmadd_ps(
            mw, _mm256_loadu_ps(dx + static_cast<size_t>(t) * xs / 4 + Pad8(nb) + c), accm[t]);
      }
    }
    const uint8_t* a = row + c * bb;
    const uint8_t* xc = xp + static_cast<size_t>(c) * kRecBytes;
    for (size_t off = 0; off < 8 * bb; off += 64) {
      const uint8_t* p = a + off + kPrefetchBytes;
      if (p < pf_end) PrefetchAhead<kQ4>(p);
      if (pf_shadow)
        _mm_prefetch(reinterpret_cast<const char*>(pf_shadow + c * bb + off), _MM_HINT_T0);
    }
    int64_t k = 0;
    for (; k + 2 <= n; k += 2) {
      DotBlock<kQ4, NT, kMin>(a + k * bb, xc + k * kRecBytes, xs, &scale[0][k], acc0);
      DotBlock<kQ4, NT, kMin>(a + (k + 1) * bb, xc + (k + 1) * kRecBytes, xs, &scale[0][k + 1],
                              acc1);
    }
    if (k < n) DotBlock<kQ4, NT, kMin>(a + k * bb, xc + k * kRecBytes, xs, &scale[0][k], acc0);
  }
  for (int t = 0; t < NT; ++t) {
    __m256 sum = _mm256_add_ps(acc0[t], acc1[t]);
    if constexpr (kMin) sum = _mm256_add_ps(sum, accm[t]);
    y[t * ys] = HSum(sum);
  }
}

template <DType T>
inline __m256 Load8(const uint8_t* row, int64_t j) {
  if constexpr (T == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + j);
  } else if constexpr (T == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * j)));
  } else {
    const __m256i v =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * j)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
}

template <DType T>
inline float Load1(const uint8_t* row, int64_t j) {
  if constexpr (T == DType::kF32) {
    float f;
    __builtin_memcpy(&f, row + 4 * j, 4);
    return f;
  } else if constexpr (T == DType::kF16) {
    return HalfToFloat(row + 2 * j);
  } else {
    return BF16ToFloat(row + 2 * j);
  }
}

template <DType T, int NT>
void DotFloatRow(const uint8_t* row, int64_t cols, const float* x, size_t xs, float* y, size_t ys,
                 const uint8_t* pf_end, const uint8_t* pf_shadow) {
  __m256 acc0[NT], acc1[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  constexpr int64_t kBpe = T == DType::kF32 ? 4 : 2;
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    const uint8_t* p = row + j * kBpe + kPrefetchBytes;
    if (((j * kBpe) & 63) == 0) {
      if (p < pf_end) PrefetchAhead<false>(p);
      if (pf_shadow) _mm_prefetch(reinterpret_cast<const char*>(pf_shadow + j * kBpe), _MM_HINT_T0);
    }
    const __m256 w0 = Load8<T>(row, j);
    const __m256 w1 = Load8<T>(row, j + 8);
    for (int t = 0; t < NT; ++t) {
      acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * xs + j), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * xs + j + 8), acc1[t]);
    }
  }
  if (j + 8 <= cols) {
    const __m256 w0 = Load8<T>(row, j);
    for (int t = 0; t < NT; ++t) {
      acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * xs + j), acc0[t]);
    }
    j += 8;
  }
  for (int t = 0; t < NT; ++t) {
    float s = HSum(_mm256_add_ps(acc0[t], acc1[t]));
    for (int64_t k = j; k < cols; ++k) s += Load1<T>(row, k) * x[t * xs + k];
    y[t * ys] = s;
  }
}

template <int NT>
void DotRowTokens(DType t, const uint8_t* row, int64_t cols, const uint8_t* xp, size_t xs, float* y,
                  size_t ys, const uint8_t* pf_end, const uint8_t* pf_shadow) {
  switch (t) {
    case DType::kQ8_0:
      DotQuantRow<false, NT>(row, cols / kQ, xp, xs, y, ys, pf_end, pf_shadow);
      return;
    case DType::kQ4_0:
      DotQuantRow<true, NT>(row, cols / kQ, xp, xs, y, ys, pf_end, pf_shadow);
      return;
    case DType::kQ4_1:
      DotQuantRow<true, NT, true>(row, cols / kQ, xp, xs, y, ys, pf_end, pf_shadow);
      return;
    case DType::kF32:
      DotFloatRow<DType::kF32, NT>(row, cols, reinterpret_cast<const float*>(xp), xs / 4, y, ys,
                                   pf_end, pf_shadow);
      return;
    case DType::kF16:
      DotFloatRow<DType::kF16, NT>(row, cols, reinterpret_cast<const float*>(xp), xs / 4, y, ys,
                                   pf_end, pf_shadow);
      return;
    case DType::kBF16:
      DotFloatRow<DType::kBF16, NT>(row, cols, reinterpret_cast<const float*>(xp), xs / 4, y, ys,
                                    pf_end, pf_shadow);
      return;
    default:  // not in direct_types: internal/typed_dispatch.h never sends it
      __builtin_trap();
  }
}

void Dot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows, const void* xp,
         size_t xp_stride, int64_t n_tok, float* y, size_t y_stride, const uint8_t* pf) {
  if (Avx2Rows8Type(t)) {
    Avx2Rows8Dot(t, w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    return;
  }
  const auto* x = static_cast<const uint8_t*>(xp);
  // Prefetches stay inside the rows this call reads: a gathered row's neighbours are not wanted.
  const uint8_t* end = w + static_cast<size_t>(n_rows) * row_stride;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_stride;
    int64_t tok = 0;
    for (; tok + 4 <= n_tok; tok += 4) {
      DotRowTokens<4>(t, row, cols, x + tok * xp_stride, xp_stride, y + tok * y_stride + r,
                      y_stride, end, pf ? pf + static_cast<size_t>(r) * row_stride : nullptr);
    }
    switch (n_tok - tok) {
      case 3:
        DotRowTokens<3>(t, row, cols, x + tok * xp_stride, xp_stride, y + tok * y_stride + r,
                        y_stride, end, pf ? pf + static_cast<size_t>(r) * row_stride : nullptr);
        break;
      case 2:
        DotRowTokens<2>(t, row, cols, x + tok * xp_stride, xp_stride, y + tok * y_stride + r,
                        y_stride, end, pf ? pf + static_cast<size_t>(r) * row_stride : nullptr);
        break;
      case 1:
        DotRowTokens<1>(t, row, cols, x + tok * xp_stride, xp_stride, y + tok * y_stride + r,
                        y_stride, end, pf ? pf + static_cast<size_t>(r) * row_stride : nullptr);
        break;
      default:
        break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Row form of the gathered product (see x86_avx512.cc): R gathered rows per pass against one
// token. Each row goes through exactly the operations of DotQuantRow<kQ4, 1> / DotFloatRow<T, 1>
// in the same order (so the same bits as MatVec); the activation is loaded once for the R rows,
// R independent rows are in flight, and one call covers the whole index list. pf: R rows of a
// later group (or nullptr), requested line by line at the offsets being read.

// Block k of the chunk at byte offset `at` of each row into acc[i], as DotBlock<kQ4, 1, kMin>.
template <bool kQ4, int R, bool kMin = false>
inline void DotBlockRows(const uint8_t* const* rows, size_t at, const uint8_t* x,
                         const float (*scale)[8], int64_t k, __m256* acc) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  if constexpr (kQ4) {
    const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32));
    for (int i = 0; i < R; ++i) {
      const __m128i v =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + at + (kMin ? 4 : 2)));
      const __m256i w = _mm256_and_si256(
          _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
          _mm256_set1_epi8(0x0f));
      __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(w, xq), ones16);
      if constexpr (!kMin) isum = _mm256_add_epi32(isum, bias);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(scale[i][k]), acc[i]);
    }
  } else {
    for (int i = 0; i < R; ++i) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + at + 2));
      const __m256i isum = _mm256_madd_epi16(
          _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xq, w)), ones16);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(scale[i][k]), acc[i]);
    }
  }
}

template <bool kQ4, int R, bool kMin = false>
void DotQuantRowsGathered(const uint8_t* const* rows, int64_t nb, const uint8_t* xp,
                          float* const* y, const uint8_t* const* pf) {
  constexpr size_t bb = kMin ? kQ41Bytes : (kQ4 ? kQ4Bytes : kQ8Bytes);
  const auto* dx = reinterpret_cast<const float*>(xp + static_cast<size_t>(nb) * kRecBytes);
  alignas(32) float scale[R][8];
  __m256 acc0[R], acc1[R], accm[R];
  for (int i = 0; i < R; ++i) acc0[i] = acc1[i] = accm[i] = _mm256_setzero_ps();
  for (int64_t c = 0; c < nb; c += 8) {
    const int64_t n = Min64(8, nb - c);
    const __m256 dxc = _mm256_loadu_ps(dx + c);
    __m256i words[R];
    for (int i = 0; i < R; ++i) {
      words[i] = BlockWords8<bb>(rows[i] + c * bb, n);
      _mm256_store_ps(scale[i], _mm256_mul_ps(LowHalves(words[i]), dxc));
    }
    if constexpr (kMin) {
      const __m256 sxc = _mm256_loadu_ps(dx + Pad8(nb) + c);
      for (int i = 0; i < R; ++i) accm[i] = _mm256_fmadd_ps(HighHalves(words[i]), sxc, accm[i]);
    }
    if (pf != nullptr) {
      for (size_t off = 0; off < 8 * bb; off += 64) {
        for (int i = 0; i < R; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(pf[i] + c * bb + off), _MM_HINT_T0);
        }
      }
    }
    const size_t at = static_cast<size_t>(c) * bb;
    const uint8_t* xc = xp + static_cast<size_t>(c) * kRecBytes;
    int64_t k = 0;
    for (; k + 2 <= n; k += 2) {
      DotBlockRows<kQ4, R, kMin>(rows, at + k * bb, xc + k * kRecBytes, scale, k, acc0);
      DotBlockRows<kQ4, R, kMin>(rows, at + (k + 1) * bb, xc + (k + 1) * kRecBytes, scale, k + 1,
                                 acc1);
    }
    if (k < n) DotBlockRows<kQ4, R, kMin>(rows, at + k * bb, xc + k * kRecBytes, scale, k, acc0);
  }
  for (int i = 0; i < R; ++i) {
    __m256 sum = _mm256_add_ps(acc0[i], acc1[i]);
    if constexpr (kMin) sum = _mm256_add_ps(sum, accm[i]);
    *y[i] = HSum(sum);
  }
}

template <DType T, int R>
void DotFloatRowsGathered(const uint8_t* const* rows, int64_t cols, const float* x, float* const* y,
                          const uint8_t* const* pf) {
  constexpr int64_t kBpe = T == DType::kF32 ? 4 : 2;
  __m256 acc0[R], acc1[R];
  for (int i = 0; i < R; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    if (pf != nullptr && ((j * kBpe) & 63) == 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(pf[i] + j * kBpe), _MM_HINT_T0);
      }
    }
    const __m256 x0 = _mm256_loadu_ps(x + j);
    const __m256 x1 = _mm256_loadu_ps(x + j + 8);
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm256_fmadd_ps(Load8<T>(rows[i], j), x0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(Load8<T>(rows[i], j + 8), x1, acc1[i]);
    }
  }
  if (j + 8 <= cols) {
    const __m256 x0 = _mm256_loadu_ps(x + j);
    for (int i = 0; i < R; ++i) acc0[i] = _mm256_fmadd_ps(Load8<T>(rows[i], j), x0, acc0[i]);
    j += 8;
  }
  for (int i = 0; i < R; ++i) {
    float s = HSum(_mm256_add_ps(acc0[i], acc1[i]));
    for (int64_t k = j; k < cols; ++k) s += Load1<T>(rows[i], k) * x[k];
    *y[i] = s;
  }
}

template <int R>
void DotRowsGathered(DType t, const uint8_t* const* rows, int64_t cols, const void* xp,
                     float* const* y, const uint8_t* const* pf) {
  const auto* xb = static_cast<const uint8_t*>(xp);
  const auto* xf = static_cast<const float*>(xp);
  switch (t) {
    case DType::kQ8_0:
      DotQuantRowsGathered<false, R>(rows, cols / kQ, xb, y, pf);
      return;
    case DType::kQ4_0:
      DotQuantRowsGathered<true, R>(rows, cols / kQ, xb, y, pf);
      return;
    case DType::kQ4_1:
      DotQuantRowsGathered<true, R, true>(rows, cols / kQ, xb, y, pf);
      return;
    case DType::kF32:
      DotFloatRowsGathered<DType::kF32, R>(rows, cols, xf, y, pf);
      return;
    case DType::kF16:
      DotFloatRowsGathered<DType::kF16, R>(rows, cols, xf, y, pf);
      return;
    case DType::kBF16:
      DotFloatRowsGathered<DType::kBF16, R>(rows, cols, xf, y, pf);
      return;
    default:  // not in direct_types: internal/typed_dispatch.h never sends it
      __builtin_trap();
  }
}

// The rows of a later group are requested while this group runs, about 4 KiB ahead, at least one
// group (as x86_avx512.cc).
constexpr size_t kGatherLeadBytes = 4096;

void DotGather(DType t, const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
               int64_t n_idx, const void* xp, float* y) {
  if (Avx2Rows8Type(t)) {
    Avx2Rows8Gather(t, w, row_stride, cols, idx, n_idx, xp, y);
    return;
  }
  constexpr int R = 4;
  const int64_t groups_ahead =
      static_cast<int64_t>((kGatherLeadBytes + R * row_stride - 1) / (R * row_stride));
  auto row_at = [&](int64_t k) { return w + static_cast<size_t>(idx[k]) * row_stride; };
  const uint8_t* rows[R];
  const uint8_t* ahead[R];
  float* out[R];
  for (int64_t i = 0; i < Min64(groups_ahead * R, n_idx); ++i) {
    for (size_t off = 0; off < row_stride; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(row_at(i) + off), _MM_HINT_T0);
    }
  }
  int64_t k = 0;
  for (; k + R <= n_idx; k += R) {
    for (int i = 0; i < R; ++i) {
      rows[i] = row_at(k + i);
      out[i] = y + idx[k + i];
    }
    // The group groups_ahead later (near the end: its rows that exist, the last one repeated).
    const int64_t next = k + groups_ahead * R;
    const bool stream = next < n_idx;
    if (stream) {
      for (int i = 0; i < R; ++i) ahead[i] = row_at(Min64(next + i, n_idx - 1));
    }
    DotRowsGathered<R>(t, rows, cols, xp, out, stream ? ahead : nullptr);
  }
  const int rest = static_cast<int>(n_idx - k);
  for (int i = 0; i < rest; ++i) {
    rows[i] = row_at(k + i);
    out[i] = y + idx[k + i];
  }
  if (rest == 3) DotRowsGathered<3>(t, rows, cols, xp, out, nullptr);
  if (rest == 2) DotRowsGathered<2>(t, rows, cols, xp, out, nullptr);
  if (rest == 1) DotRowsGathered<1>(t, rows, cols, xp, out, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Column form of the gathered product (see x86_avx512.cc).

template <DType T, int R>
void AxpyFloatRows(const uint8_t* const* rows, const float* xs, int64_t n_out, float* acc,
                   const uint8_t* const* pf) {
  constexpr int64_t kBpe = T == DType::kF32 ? 4 : 2;
  __m256 xv[R];
  for (int i = 0; i < R; ++i) xv[i] = _mm256_set1_ps(xs[i]);
  int64_t j = 0;
  for (; j + 8 <= n_out; j += 8) {
    if (pf != nullptr && (j * kBpe) % 64 == 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(pf[i] + j * kBpe), _MM_HINT_T0);
      }
    }
    __m256 a = _mm256_loadu_ps(acc + j);
    for (int i = 0; i < R; ++i) a = _mm256_fmadd_ps(xv[i], Load8<T>(rows[i], j), a);
    _mm256_storeu_ps(acc + j, a);
  }
  for (; j < n_out; ++j) {
    for (int i = 0; i < R; ++i) acc[j] += xs[i] * Load1<T>(rows[i], j);
  }
}

// One block of a full group in integers: the four rows' 32 weights of block b transposed so
// that each 32-bit lane holds one output's four weights (unsigned nibbles for Q4_0, signed bytes
// for Q8_0), multiplied by the group's four int8 coefficients (vpmaddubsw, then vpmaddwd adds
// the two pairs) and scaled into acc. The integer sums are the exact sums the float form
// computes, so the bits are the same. Byte-pair sums stay within int16: Q4_0 2 x 15 x 127,
// Q8_0 (by the sign trick, |w| x sign(t, w)) 2 x 128 x 127.
template <bool kQ4>
inline void AxpyQuantBlock4(const uint8_t* const* rows, size_t off, int32_t packed, int32_t bias,
                            float scale, float* acc) {
  __m256i w[4];
  for (int i = 0; i < 4; ++i) {
    if constexpr (kQ4) {
      // Both lanes get the 16 bytes; the low lane keeps the low nibbles (outputs 0-15), the
      // high lane the high ones (outputs 16-31).
      const __m256i v =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
              rows[i] + off + 2)));
      w[i] = _mm256_and_si256(_mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xf0),
                              _mm256_set1_epi8(0x0f));
    } else {
      w[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + off + 2));
    }
  }
  // Per 128-bit lane: a/b pair rows 0 and 1, c/d rows 2 and 3; t[j] then holds, lane by lane,
  // outputs [4j, 4j + 4) of the lane's 16 for j = 0, 1 (from a, c) and 2, 3 (from b, d).
  const __m256i a = _mm256_unpacklo_epi8(w[0], w[1]), b = _mm256_unpackhi_epi8(w[0], w[1]);
  const __m256i c = _mm256_unpacklo_epi8(w[2], w[3]), d = _mm256_unpackhi_epi8(w[2], w[3]);
  const __m256i t[4] = {_mm256_unpacklo_epi16(a, c), _mm256_unpackhi_epi16(a, c),
                        _mm256_unpacklo_epi16(b, d), _mm256_unpackhi_epi16(b, d)};
  const __m256i coef = _mm256_set1_epi32(packed);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i sum[4];
  for (int j = 0; j < 4; ++j) {
    __m256i pairs;
    if constexpr (kQ4) {
      pairs = _mm256_maddubs_epi16(t[j], coef);
    } else {
      pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(t[j]), _mm256_sign_epi8(coef, t[j]));
    }
    sum[j] = _mm256_madd_epi16(pairs, ones);
    if constexpr (kQ4) sum[j] = _mm256_add_epi32(sum[j], _mm256_set1_epi32(bias));
  }
  // sum[j] holds outputs [4j, 4j + 4) in the low lane and [16 + 4j, 20 + 4j) in the high one.
  const __m256 cb = _mm256_set1_ps(scale);
  const __m256i o[4] = {_mm256_permute2x128_si256(sum[0], sum[1], 0x20),   // 0-7
                        _mm256_permute2x128_si256(sum[2], sum[3], 0x20),   // 8-15
                        _mm256_permute2x128_si256(sum[0], sum[1], 0x31),   // 16-23
                        _mm256_permute2x128_si256(sum[2], sum[3], 0x31)};  // 24-31
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(acc + 8 * j,
                     _mm256_fmadd_ps(_mm256_cvtepi32_ps(o[j]), cb, _mm256_loadu_ps(acc + 8 * j)));
  }
}

// Quantized column form for a group of R <= 4 rows (gather.h): per output block the R
// coefficients x[i] * d[i, b] are rounded to int8 with one scale C; the products t * q are exact
// integers, summed (exact below 2^24) and scaled once by C. A full group sums them in integers
// (AxpyQuantBlock4); the last, shorter group of a list in f32.
template <bool kQ4, int R>
void AxpyQuantRows(const uint8_t* const* rows, const float* xs, int64_t n_out, float* acc,
                   const uint8_t* const* pf) {
  constexpr size_t bb = kQ4 ? kQ4Bytes : kQ8Bytes;
  const int64_t nb = n_out / kQ;
  alignas(32) float t[R][8];   // rounded coefficients of the chunk's blocks, row by row (R < 4)
  alignas(32) float scale[8];  // C per block
  alignas(32) int32_t packed[8], bias[8];  // R == 4: row i's int8 coefficient in byte i; -8 sum t
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t c = 0; c < nb; c += 8) {
    const int64_t n = Min64(8, nb - c);
    __m256 coef[R];
    __m256 cmax = _mm256_setzero_ps();
    for (int i = 0; i < R; ++i) {
      coef[i] = _mm256_mul_ps(BlockScales8<bb>(rows[i] + c * bb, n), _mm256_set1_ps(xs[i]));
      cmax = _mm256_max_ps(cmax, _mm256_andnot_ps(sign, coef[i]));
    }
    const __m256 cs = _mm256_div_ps(cmax, _mm256_set1_ps(127.0f));
    const __m256 nonzero = _mm256_cmp_ps(cs, _mm256_setzero_ps(), _CMP_NEQ_OQ);
    const __m256 inv = _mm256_and_ps(nonzero, _mm256_div_ps(_mm256_set1_ps(1.0f), cs));
    _mm256_store_ps(scale, cs);
    __m256i tsum = _mm256_setzero_si256(), tpack = _mm256_setzero_si256();
    for (int i = 0; i < R; ++i) {
      const __m256 ti = _mm256_round_ps(_mm256_mul_ps(coef[i], inv),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      if constexpr (R < 4) _mm256_store_ps(t[i], ti);
      const __m256i tint = _mm256_cvtps_epi32(ti);
      tsum = _mm256_add_epi32(tsum, tint);
      tpack = _mm256_or_si256(
          tpack, _mm256_slli_epi32(_mm256_and_si256(tint, _mm256_set1_epi32(0xff)), 8 * i));
    }
    if constexpr (R == 4) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(packed), tpack);
      _mm256_store_si256(reinterpret_cast<__m256i*>(bias),
                         _mm256_mullo_epi32(tsum, _mm256_set1_epi32(-8)));
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t b = c + k;
      if (pf != nullptr) {
        for (int i = 0; i < R; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(pf[i] + b * bb), _MM_HINT_T0);
        }
      }
      if constexpr (R == 4) {
        AxpyQuantBlock4<kQ4>(rows, static_cast<size_t>(b) * bb, packed[k], bias[k], scale[k],
                             acc + b * kQ);
        continue;
      }
      __m256 sum[4];
      for (int j = 0; j < 4; ++j) sum[j] = _mm256_setzero_ps();
      for (int i = 0; i < R; ++i) {
        const uint8_t* blk = rows[i] + static_cast<size_t>(b) * bb;
        const __m256 ti = _mm256_set1_ps(t[i][k]);
        __m256i q[4];
        if constexpr (kQ4) {
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
          const __m256i lo = _mm256_cvtepu8_epi32(v);
          const __m256i hi = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
          const __m256i eight = _mm256_set1_epi32(8), mask = _mm256_set1_epi32(15);
          q[0] = _mm256_sub_epi32(_mm256_and_si256(lo, mask), eight);
          q[1] = _mm256_sub_epi32(_mm256_and_si256(hi, mask), eight);
          q[2] = _mm256_sub_epi32(_mm256_srli_epi32(lo, 4), eight);
          q[3] = _mm256_sub_epi32(_mm256_srli_epi32(hi, 4), eight);
        } else {
          for (int j = 0; j < 4; ++j) {
            q[j] = _mm256_cvtepi8_epi32(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * j)));
          }
        }
        for (int j = 0; j < 4; ++j) sum[j] = _mm256_fmadd_ps(ti, _mm256_cvtepi32_ps(q[j]), sum[j]);
      }
      const __m256 cb = _mm256_set1_ps(scale[k]);
      float* ab = acc + b * kQ;
      for (int j = 0; j < 4; ++j) {
        _mm256_storeu_ps(ab + 8 * j, _mm256_fmadd_ps(sum[j], cb, _mm256_loadu_ps(ab + 8 * j)));
      }
    }
  }
}

template <int R>
void AxpyRows(DType t, const uint8_t* const* rows, const float* xs, int64_t n_out, float* acc,
              const uint8_t* const* pf) {
  switch (t) {
    case DType::kF32:
      AxpyFloatRows<DType::kF32, R>(rows, xs, n_out, acc, pf);
      return;
    case DType::kF16:
      AxpyFloatRows<DType::kF16, R>(rows, xs, n_out, acc, pf);
      return;
    case DType::kBF16:
      AxpyFloatRows<DType::kBF16, R>(rows, xs, n_out, acc, pf);
      return;
    case DType::kQ8_0:
      AxpyQuantRows<false, R>(rows, xs, n_out, acc, pf);
      return;
    case DType::kQ4_0:
      AxpyQuantRows<true, R>(rows, xs, n_out, acc, pf);
      return;
    default:  // not in direct_types: internal/typed_dispatch.h never sends it
      __builtin_trap();
  }
}

void AxpyGather(DType t, const uint8_t* wt, size_t row_stride, int64_t n_out, const int32_t* idx,
                int64_t n_idx, const float* x, float* acc) {
  constexpr int R = 4;
  constexpr int kGroupsAhead = 2;  // rows requested while the group this far before them runs
  const uint8_t* rows[R];
  const uint8_t* ahead[R];
  float xs[R];
  for (int64_t i = 0; i < Min64(kGroupsAhead * R, n_idx); ++i) {
    const uint8_t* p = wt + static_cast<size_t>(idx[i]) * row_stride;
    for (size_t off = 0; off < row_stride; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
    }
  }
  int64_t k = 0;
  for (; k + R <= n_idx; k += R) {
    for (int i = 0; i < R; ++i) {
      rows[i] = wt + static_cast<size_t>(idx[k + i]) * row_stride;
      xs[i] = x[idx[k + i]];
    }
    const int64_t next = k + kGroupsAhead * R;
    const bool stream = next + R <= n_idx;
    if (stream) {
      for (int i = 0; i < R; ++i) ahead[i] = wt + static_cast<size_t>(idx[next + i]) * row_stride;
    }
    AxpyRows<R>(t, rows, xs, n_out, acc, stream ? ahead : nullptr);
  }
  // The last, shorter group (one group for the coefficient rounding of Q8_0 / Q4_0).
  const int rest = static_cast<int>(n_idx - k);
  for (int i = 0; i < rest; ++i) {
    rows[i] = wt + static_cast<size_t>(idx[k + i]) * row_stride;
    xs[i] = x[idx[k + i]];
  }
  if (rest == 3) AxpyRows<3>(t, rows, xs, n_out, acc, nullptr);
  if (rest == 2) AxpyRows<2>(t, rows, xs, n_out, acc, nullptr);
  if (rest == 1) AxpyRows<1>(t, rows, xs, n_out, acc, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Elementwise operations.

// e^x as in x86_avx512.cc, with 2^n built in the exponent bits; results below e^-87.3 are 0.
inline __m256 Exp(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504089f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    s0 = _mm256_fmadd_ps(a, a, s0);
    s1 = _mm256_fmadd_ps(b, b, s1);
  }
  float ss = HSum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps);
  const __m256 vs = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
                                            _mm256_loadu_ps(weight + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// Scalar e^x for the tails, with the same polynomial.
inline float Exp1(float x) {
  float buf[8] = {x, 0, 0, 0, 0, 0, 0, 0};
  _mm256_storeu_ps(buf, Exp(_mm256_loadu_ps(buf)));
  return buf[0];
}

// Keys stored by blocks of 16 positions (internal/isa_kernels.h, attn_scores16), as two halves of
// 8 lanes: B blocks of Q queries per pass, each loaded key vector shared by the Q queries. Each
// lane's sum is the same chain of fused multiply-adds over d whatever B and Q are.
template <DType T, int Q, int B>
void AttnScoreBlocks(const uint8_t* kb, size_t stride, int64_t hd, const float* const* q,
                     float* const* s, int64_t at) {
  __m256 acc[Q][2 * B];
  for (int i = 0; i < Q; ++i)
    for (int b = 0; b < 2 * B; ++b) acc[i][b] = _mm256_setzero_ps();
  constexpr int64_t kElem = T == DType::kF32 ? 4 : 2;
  for (int64_t d = 0; d < hd; ++d) {
    __m256 k[2 * B];
    for (int b = 0; b < B; ++b) {
      const uint8_t* e = kb + static_cast<size_t>(b) * stride + d * 16 * kElem;
      k[2 * b] = Load8<T>(e, 0);
      k[2 * b + 1] = Load8<T>(e, 8);
    }
    for (int i = 0; i < Q; ++i) {
      const __m256 qd = _mm256_set1_ps(q[i][d]);
      for (int b = 0; b < 2 * B; ++b) acc[i][b] = _mm256_fmadd_ps(qd, k[b], acc[i][b]);
    }
  }
  for (int i = 0; i < Q; ++i)
    for (int b = 0; b < 2 * B; ++b) _mm256_storeu_ps(s[i] + at + 8 * b, acc[i][b]);
}

template <DType T, int Q>
void AttnScores16Q(const uint8_t* kb, size_t stride, int64_t n_blocks, int64_t hd,
                   const float* const* q, float* const* s) {
  constexpr int kB = Q == 1 ? 4 : 2;
  int64_t b = 0;
  for (; b + kB <= n_blocks; b += kB) AttnScoreBlocks<T, Q, kB>(kb + b * stride, stride, hd, q, s, 16 * b);
  for (; b < n_blocks; ++b) AttnScoreBlocks<T, Q, 1>(kb + b * stride, stride, hd, q, s, 16 * b);
}

template <DType T>
void AttnScores16T(const uint8_t* kb, size_t stride, int64_t n_blocks, int64_t hd,
                   const float* const* q, int nq, float* const* s) {
  int i = 0;
  for (; i + 2 <= nq; i += 2) AttnScores16Q<T, 2>(kb, stride, n_blocks, hd, q + i, s + i);
  for (; i < nq; ++i) AttnScores16Q<T, 1>(kb, stride, n_blocks, hd, q + i, s + i);
}

void AttnScores16(DType t, const uint8_t* kb, size_t stride, int64_t n_blocks, int64_t hd,
                  const float* const* q, int nq, float* const* s) {
  switch (t) {
    case DType::kF32: AttnScores16T<DType::kF32>(kb, stride, n_blocks, hd, q, nq, s); return;
    case DType::kF16: AttnScores16T<DType::kF16>(kb, stride, n_blocks, hd, q, nq, s); return;
    case DType::kBF16: AttnScores16T<DType::kBF16>(kb, stride, n_blocks, hd, q, nq, s); return;
    default:  // the cache tiles only the float types (model/kv_cache.h)
      __builtin_trap();
  }
}

// acc_i[hd] += sum_j p_i[j] * v_j for Q queries sharing each loaded row, the accumulators in
// registers for the whole run (one fused multiply-add per row, vector and query, rows in order).
template <DType T, int C, int Q>
void AttnValuesT(const uint8_t* v, size_t stride, int64_t n, const float* const* p, float* const* acc) {
  __m256 a[Q][C];
  for (int i = 0; i < Q; ++i)
    for (int c = 0; c < C; ++c) a[i][c] = _mm256_loadu_ps(acc[i] + 8 * c);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = v + static_cast<size_t>(j) * stride;
    __m256 w[C];
    for (int c = 0; c < C; ++c) w[c] = Load8<T>(row, 8 * c);
    for (int i = 0; i < Q; ++i) {
      const __m256 pj = _mm256_set1_ps(p[i][j]);
      for (int c = 0; c < C; ++c) a[i][c] = _mm256_fmadd_ps(pj, w[c], a[i][c]);
    }
  }
  for (int i = 0; i < Q; ++i)
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(acc[i] + 8 * c, a[i][c]);
}

template <DType T, int C>
void AttnValuesC(const uint8_t* v, size_t stride, int64_t n, const float* const* p, int nq,
                 float* const* acc) {
  constexpr int kQ = C >= 8 ? 1 : 2;
  int i = 0;
  for (; i + kQ <= nq; i += kQ) AttnValuesT<T, C, kQ>(v, stride, n, p + i, acc + i);
  for (; i < nq; ++i) AttnValuesT<T, C, 1>(v, stride, n, p + i, acc + i);
}

template <DType T>
bool AttnValuesOf(const uint8_t* v, size_t stride, int64_t n, int64_t hd, const float* const* p,
                  int nq, float* const* acc) {
  switch (hd) {
    case 32: AttnValuesC<T, 4>(v, stride, n, p, nq, acc); return true;
    case 64: AttnValuesC<T, 8>(v, stride, n, p, nq, acc); return true;
    case 128: AttnValuesC<T, 16>(v, stride, n, p, nq, acc); return true;
    default: return false;  // 256 would not fit the 16 registers: axpy_gather instead
  }
}

bool AttnValues(DType t, const uint8_t* v, size_t stride, int64_t n, int64_t hd,
                const float* const* p, int nq, float* const* acc) {
  switch (t) {
    case DType::kF32: return AttnValuesOf<DType::kF32>(v, stride, n, hd, p, nq, acc);
    case DType::kF16: return AttnValuesOf<DType::kF16>(v, stride, n, hd, p, nq, acc);
    case DType::kBF16: return AttnValuesOf<DType::kBF16>(v, stride, n, hd, p, nq, acc);
    default: return false;
  }
}

float ExpSum(float* x, int64_t n, float max) {
  const __m256 vmax = _mm256_set1_ps(max);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(x + i, e);
  }
  float s = HSum(sum);
  for (; i < n; ++i) {
    x[i] = Exp1(x[i] - max);
    s += x[i];
  }
  return s;
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  __m256 mx = _mm256_set1_ps(-__builtin_inff());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  float m = HMax(mx);
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  const float inv = 1.0f / ExpSum(x, n, m);
  const __m256 vinv = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
  for (; i < n; ++i) x[i] *= inv;
}

void SiluMul(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(
        gate + i, _mm256_div_ps(_mm256_mul_ps(g, _mm256_loadu_ps(up + i)), _mm256_add_ps(one, e)));
  }
  for (; i < n; ++i) gate[i] = gate[i] * up[i] / (1.0f + Exp1(-gate[i]));
}

// gelu(g) u = g u / (1 + exp(-2z)), z = sqrt(2/pi) (g + 0.044715 g^3) (ops.h).
void GeluMul(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 k = _mm256_set1_ps(-2.0f * 0.79788456080286535588f);
  const __m256 c = _mm256_set1_ps(0.044715f);
  const __m256 lo = _mm256_set1_ps(-88.0f), hi = _mm256_set1_ps(88.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    // -2z within [-88, 88]: Exp's range (beyond it the result is 0 or g u / 1.7e38 ~ 0 anyway).
    const __m256 z2 = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(c, g), _mm256_mul_ps(g, g), g)), lo), hi);
    _mm256_storeu_ps(gate + i, _mm256_div_ps(_mm256_mul_ps(g, _mm256_loadu_ps(up + i)),
                                             _mm256_add_ps(one, Exp(z2))));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    const float z2 = -2.0f * 0.79788456080286535588f * (g + 0.044715f * g * g * g);
    gate[i] = g * up[i] / (1.0f + Exp1(std::min(std::max(z2, -88.0f), 88.0f)));
  }
}

// ---------------------------------------------------------------------------------------------
// Tiled dense product (tiled.h): each 64-byte quant vector holds 4 inputs of 16 rows; its two
// 256-bit halves are rows 0-7 and 8-15, one row per 32-bit lane. The activation is prepared by
// the scalar ScalarPrepTiled (records of 64 bytes: q[32], bias, d). Q4_0 multiplies the raw
// nibbles and starts each block's sum at the record's bias (-8 * sum q); Q8_0 uses the sign
// trick, whose sums need no bias. Both give the exact integer block sums, so the f32 steps below
// (fma(float(isum), d_w * d_x, acc), blocks in order) reproduce ScalarDotTiled bit for bit.

constexpr size_t kTiledRecord = 64;  // == kTiledRecordBytes (tiled.h, not included here)

template <bool kQ4, int NT>
void DotTiledGroup(const uint8_t* scales, size_t scale_stride, const uint8_t* quants,
                   size_t quant_stride, int64_t nb, const uint8_t* xp, size_t xs, float* y,
                   size_t ys, const uint8_t* pf_end) {
  constexpr size_t kQuantTile = kQ4 ? 256 : 512;
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  __m256 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  // 2 KiB ahead: 8 blocks on in a tiled tensor; in a tiled bundle pack's down pieces (blocks a
  // chunk apart) the same chunk's tiles 7 groups on, so each chunk's piece streams in order.
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* qt = quants + static_cast<size_t>(b) * quant_stride;
    for (size_t off = 0; off < kQuantTile; off += 64) {
      const uint8_t* p = qt + off + kPrefetchBytes;
      if (p < pf_end) PrefetchAhead<false>(p);
    }
    __m256i isum[NT][2];
    for (int t = 0; t < NT; ++t) {
      int32_t bias = 0;
      if constexpr (kQ4) __builtin_memcpy(&bias, xp + t * xs + static_cast<size_t>(b) * kTiledRecord + 32, 4);
      isum[t][0] = isum[t][1] = _mm256_set1_epi32(bias);
    }
    auto word = [&](int t, int k) {
      int32_t v;
      __builtin_memcpy(&v, xp + t * xs + static_cast<size_t>(b) * kTiledRecord + 4 * k, 4);
      return _mm256_set1_epi32(v);
    };
    for (int h = 0; h < 2; ++h) {
      if constexpr (kQ4) {
        for (int v = 0; v < 4; ++v) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qt + 64 * v + 32 * h));
          const __m256i wl = _mm256_and_si256(w, nibble);
          const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
          for (int t = 0; t < NT; ++t) {
            const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(wl, word(t, v)), ones16);
            const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(wh, word(t, 4 + v)), ones16);
            isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_add_epi32(pl, ph));
          }
        }
      } else {
        for (int v = 0; v < 8; ++v) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qt + 64 * v + 32 * h));
          const __m256i aw = _mm256_abs_epi8(w);
          for (int t = 0; t < NT; ++t) {
            const __m256i sx = _mm256_sign_epi8(word(t, v), w);
            isum[t][h] = _mm256_add_epi32(isum[t][h],
                                          _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones16));
          }
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + static_cast<size_t>(b) * scale_stride + 16 * h)));
      for (int t = 0; t < NT; ++t) {
        float dx;
        __builtin_memcpy(&dx, xp + t * xs + static_cast<size_t>(b) * kTiledRecord + 36, 4);
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][h]),
                                    _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc[t][h]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    _mm256_storeu_ps(y + t * ys, acc[t][0]);
    _mm256_storeu_ps(y + t * ys + 8, acc[t][1]);
  }
}

template <bool kQ4>
void DotTiledQuant(const uint8_t* groups, const TiledGeometry& geo, const uint8_t* xp, size_t xs,
                   int64_t n_tok, float* y, size_t ys) {
  // Look-ahead stays inside the groups read (the last block of the last group).
  const uint8_t* end = groups + static_cast<size_t>(geo.n_groups - 1) * geo.group_bytes +
                       geo.quant_offset + static_cast<size_t>(geo.nb) * geo.quant_stride;
  for (int64_t g = 0; g < geo.n_groups; ++g) {
    const uint8_t* scales = groups + static_cast<size_t>(g) * geo.group_bytes;
    const uint8_t* quants = scales + geo.quant_offset;
    float* yg = y + 16 * g;
    int64_t tok = 0;
    for (; tok + 2 <= n_tok; tok += 2) {
      DotTiledGroup<kQ4, 2>(scales, geo.scale_stride, quants, geo.quant_stride, geo.nb, xp + tok * xs, xs,
                            yg + tok * ys, ys, end);
    }
    if (tok < n_tok) DotTiledGroup<kQ4, 1>(scales, geo.scale_stride, quants, geo.quant_stride, geo.nb, xp + tok * xs, xs,
                            yg + tok * ys, ys, end);
  }
}

void DotTiled(DType t, const uint8_t* groups, const TiledGeometry& geo, const void* xp,
              size_t xp_stride, int64_t n_tok, float* y, size_t y_stride) {
  const auto* x = static_cast<const uint8_t*>(xp);
  if (t == DType::kQ4_0) {
    DotTiledQuant<true>(groups, geo, x, xp_stride, n_tok, y, y_stride);
  } else {
    DotTiledQuant<false>(groups, geo, x, xp_stride, n_tok, y, y_stride);
  }
}

// The float types, Q8_0, Q4_0, Q4_1, and x86_avx2_rows8.cc's (Q5_0, Q5_1, the K types).
constexpr uint64_t kDirectTypes = kFloatQ8Q4Q41Types | kAvx2Rows8Types;

const IsaKernels kTable = {kDirectTypes, kFloatQ8Q4Types,
                           PrepBytes, Prep,    Dot,     DotGather, AxpyGather,
                           RmsNorm,   Softmax, SiluMul, nullptr, nullptr,
                           nullptr,   DotTiled, GeluMul,
                           0,         ExpSum,   AttnScores16, AttnValues};

}  // namespace

const IsaKernels* Avx2Kernels() { return &kTable; }

}  // namespace weir::kernels::internal

#else  // not x86-64

#include "kernels/internal/avx2_rows8.h"
#include "kernels/internal/isa_kernels.h"

namespace weir::kernels::internal {
const IsaKernels* Avx2Kernels() { return nullptr; }
}  // namespace weir::kernels::internal

#endif
