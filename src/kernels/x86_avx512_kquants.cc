// AVX-512 kernels of the K types (see internal/avx512_kquants.h): the prepared activation of Q4_K
// and Q6_K, and the Q6_K products (Q4_K's products are the 16-row passes of
// x86_avx512_rows16.cc, which read the Q4_K activation prepared here). Compiled with the AVX-512
// F/BW/VL + VNNI flags (src/kernels/CMakeLists.txt) and reached only through x86_avx512.cc's table
// after isa.cc found those features, so, like the other SIMD files, it calls no inline code from
// other headers (see internal/isa_kernels.h).
//
// Q6_K runs on vpdpbusd (u8 weights x s8 activation -> s32, four products per lane), one 512-bit
// vector per 64 weights, each 32-bit lane summing four products of one sub-block: 16 sub-blocks
// of 16, x = (d sc) (q - 32), q = 0..63 from 4 low bits (ql) and 2 high bits (qh). The activation
// is in natural order; each lane's integer sum starts at -32 * (its four activation values),
// prepared once, so the sums are exact. Each lane's integer sum is converted to f32 and
// multiplied by its sub-block's scale times the activation block's scale (d_w * d_x), the terms of
// the reference up to the order of additions.
//
// A kernel instance handles R rows x NT tokens (R = 1 with several tokens for prefill, R up to 4
// with one token for decode); every (row, token) pair runs the same operations in the same order,
// so a row's result does not depend on what it was computed with.
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/internal/avx512_kquants.h"
#include "kernels/internal/isa_kernels.h"

namespace weir::kernels::internal {
namespace {

constexpr int kQ = 32;             // values per activation block
constexpr int64_t kSuper = 256;    // values per super-block
constexpr size_t kQ6KBytes = 210;  // u8 ql[128], u8 qh[64], i8 scales[16], f16 d
// Look-ahead of the dense products, as in x86_avx512.cc.
constexpr size_t kPrefetchBytes = 2048;

inline int64_t Pad16(int64_t n) { return (n + 15) / 16 * 16; }

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// ---------------------------------------------------------------------------------------------
// Prepared activation (nb = cols / 32 blocks, ns = cols / 256 super-blocks):
//   Q4_K: int8 q[cols], each super-block's sub-blocks in the order 0 2 1 3 4 6 5 7;
//         f32 dx[Pad16(nb)]; f32 sx[Pad16(nb)] = dx[b] * sum(q of block b).
//   Q6_K: int8 q[cols] in natural order; int32 bias[cols / 4], lane l = -32 * (q[4l] + ... +
//         q[4l + 3]); f32 dx[Pad16(nb)].
// q and dx are ref::QuantizeActivation's numbers.

bool IsQ4K(DType t) { return t == DType::kQ4_K; }

size_t PrepBytesK(DType t, int64_t cols) {
  const size_t n = static_cast<size_t>(cols);
  const size_t scales = static_cast<size_t>(Pad16(cols / kQ)) * 4;
  return IsQ4K(t) ? n + 2 * scales : 2 * n + scales;
}

// Quantizes x[0..31] to q[0..31] (ref::QuantizeActivation's arithmetic: cvtps rounds half to even
// like nearbyint); returns the scale, and the sum of the q in *sum.
inline float QuantizeBlock32(const float* x, int8_t* q, int32_t* sum) {
  const __m512 a = _mm512_loadu_ps(x);
  const __m512 b = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float d = amax / 127.0f;
  const __m512 id = _mm512_set1_ps(d != 0 ? 1.0f / d : 0.0f);
  const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, id));
  const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, id));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(qb));
  *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
  return d;
}

void PrepK(DType t, const float* x, int64_t cols, void* out) {
  auto* q = static_cast<int8_t*>(out);
  const int64_t nb = cols / kQ;
  if (IsQ4K(t)) {
    auto* dx = reinterpret_cast<float*>(static_cast<uint8_t*>(out) + cols);
    float* sx = dx + Pad16(nb);
    // Sub-block j of a super-block goes to slot j with 1 <-> 2 and 5 <-> 6 swapped.
    constexpr int kSlot[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t s = b / 8, j = b % 8;
      int32_t sum;
      dx[b] = QuantizeBlock32(x + b * kQ, q + s * kSuper + kSlot[j] * kQ, &sum);
      sx[b] = dx[b] * static_cast<float>(sum);
    }
    for (int64_t b = nb; b < Pad16(nb); ++b) dx[b] = sx[b] = 0;
    return;
  }
  auto* bias = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(out) + cols);
  auto* dx = reinterpret_cast<float*>(static_cast<uint8_t*>(out) + 2 * cols);
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sum;
    dx[b] = QuantizeBlock32(x + b * kQ, q + b * kQ, &sum);
  }
  for (int64_t b = nb; b < Pad16(nb); ++b) dx[b] = 0;
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t i = 0; i < cols; i += 64) {
    const __m512i sum4 =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(q + i));
    _mm512_storeu_si512(bias + i / 4,
                        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum4, 5)));
  }
}

// ---------------------------------------------------------------------------------------------
// Lane patterns: which of a super-block's sub-block scales each of the 16 lanes of vector k takes.

// Q6_K, scales in lanes 0..15 (sub-blocks of 16): vector k holds sub-blocks 4k .. 4k + 3.
alignas(64) constexpr int32_t kQ6KLanes[4][16] = {
    {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
    {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
    {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
    {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}};
// Q6_K: sub-block i (of 16) lies in activation block i / 2.
alignas(64) constexpr int32_t kHalfLanes[16] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7};

// Values 128 h + 0 .. 63 (w[2h]) and 128 h + 64 .. 127 (w[2h + 1]) of a Q6_K super-block as
// unsigned 0..63: ql bytes 64 h + l hold values l (low nibble) and 64 + l (high), bytes
// 64 h + 32 + l values 32 + l and 96 + l; qh byte 32 h + l holds the top bits of values
// l, 32 + l, 64 + l, 96 + l at shifts 0, 2, 4, 6.
inline void WeightsQ6K(const uint8_t* blk, __m512i* w) {
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const __m512i top = _mm512_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    const __m512i l = _mm512_loadu_si512(blk + 64 * h);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    // Bytes 0..31: qh; bytes 32..63: qh >> 2 (the bits of values 32 + l and 96 + l at 0 and 4).
    const __m512i hx = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    w[2 * h] =
        _mm512_or_si512(_mm512_and_si512(l, nib), _mm512_and_si512(_mm512_slli_epi16(hx, 4), top));
    w[2 * h + 1] =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), nib), _mm512_and_si512(hx, top));
  }
}

// Requests the kBytes bytes at p (one super-block's lines): into L1 with hint 0, else into L2.
template <size_t kBytes>
inline void PrefetchBlock(const uint8_t* p, int hint) {
  for (size_t off = 0; off < kBytes; off += 64) {
    if (hint == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
    } else {
      _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T1);
    }
  }
}

// R rows x NT tokens of Q6_K. rows[i]: row i; x: token 0's prepared activation, xs bytes between
// tokens; y[i][t * ys]: result of row i, token t. Look-ahead: ahead_end (dense rows: each row's
// kPrefetchBytes-ahead lines below it) or pf (R other rows, read at the same offsets).
template <int R, int NT>
void DotQ6K(const uint8_t* const* rows, int64_t cols, const uint8_t* x, size_t xs, float* const* y,
            size_t ys, const uint8_t* ahead_end, const uint8_t* const* pf) {
  const int64_t ns = cols / kSuper;
  const auto* dx = reinterpret_cast<const float*>(x + 2 * cols);
  const __m512i half_lanes = _mm512_load_si512(kHalfLanes);
  __m512 acc0[R][NT], acc1[R][NT];
  for (int i = 0; i < R; ++i) {
    for (int t = 0; t < NT; ++t) acc0[i][t] = acc1[i][t] = _mm512_setzero_ps();
  }
  for (int64_t s = 0; s < ns; ++s) {
    for (int i = 0; i < R; ++i) {
      const uint8_t* blk = rows[i] + static_cast<size_t>(s) * kQ6KBytes;
      if (pf != nullptr) PrefetchBlock<kQ6KBytes>(pf[i] + s * kQ6KBytes, 0);
      if (ahead_end != nullptr && blk + kPrefetchBytes < ahead_end) {
        PrefetchBlock<kQ6KBytes>(blk + kPrefetchBytes, 1);
      }
      const __m512 sc = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192))));
      const __m512 d1 = _mm512_mul_ps(_mm512_set1_ps(HalfAt(blk + 208)), sc);
      __m512i w[4];
      WeightsQ6K(blk, w);
      for (int t = 0; t < NT; ++t) {
        const uint8_t* xt = x + t * xs + s * kSuper;
        const uint8_t* bt = x + t * xs + cols + s * kSuper;  // 4-byte bias per 4 values
        const __m256 dxt = _mm256_loadu_ps(dx + t * xs / 4 + 8 * s);
        const __m512 sv =
            _mm512_mul_ps(d1, _mm512_permutexvar_ps(half_lanes, _mm512_castps256_ps512(dxt)));
        for (int k = 0; k < 4; ++k) {
          const __m512i isum = _mm512_dpbusd_epi32(_mm512_loadu_si512(bt + 64 * k), w[k],
                                                   _mm512_loadu_si512(xt + 64 * k));
          const __m512 lanes = _mm512_permutexvar_ps(_mm512_load_si512(kQ6KLanes[k]), sv);
          __m512& acc = (k & 1) ? acc1[i][t] : acc0[i][t];
          acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), lanes, acc);
        }
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int t = 0; t < NT; ++t) {
      y[i][t * ys] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i][t], acc1[i][t]));
    }
  }
}

template <int R, int NT>
inline void DotK(DType, const uint8_t* const* rows, int64_t cols, const uint8_t* x, size_t xs,
                 float* const* y, size_t ys, const uint8_t* ahead_end, const uint8_t* const* pf) {
  DotQ6K<R, NT>(rows, cols, x, xs, y, ys, ahead_end, pf);
}

}  // namespace

bool Avx512KType(DType t) { return t == DType::kQ4_K || t == DType::kQ6_K; }

size_t Avx512KPrepBytes(DType t, int64_t cols) { return PrepBytesK(t, cols); }

void Avx512KPrep(DType t, const float* x, int64_t cols, void* out) { PrepK(t, x, cols, out); }

void Avx512KDot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                const uint8_t* pf) {
  const auto* x = static_cast<const uint8_t*>(xp);
  // Look-ahead stays inside the rows this call reads.
  const uint8_t* end = w + static_cast<size_t>(n_rows) * row_stride;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row[1] = {w + static_cast<size_t>(r) * row_stride};
    const uint8_t* shadow[1] = {pf != nullptr ? pf + static_cast<size_t>(r) * row_stride : nullptr};
    const uint8_t* const* pfr = pf != nullptr ? shadow : nullptr;
    int64_t tok = 0;
    for (; tok + 4 <= n_tok; tok += 4) {
      float* out[1] = {y + tok * y_stride + r};
      DotK<1, 4>(t, row, cols, x + tok * xp_stride, xp_stride, out, y_stride, end, pfr);
    }
    float* out[1] = {y + tok * y_stride + r};
    const uint8_t* xt = x + tok * xp_stride;
    switch (n_tok - tok) {
      case 3:
        DotK<1, 3>(t, row, cols, xt, xp_stride, out, y_stride, end, pfr);
        break;
      case 2:
        DotK<1, 2>(t, row, cols, xt, xp_stride, out, y_stride, end, pfr);
        break;
      case 1:
        DotK<1, 1>(t, row, cols, xt, xp_stride, out, y_stride, end, pfr);
        break;
      default:
        break;
    }
  }
}

void Avx512KDotRows(DType t, const uint8_t* const* rows, int n, int64_t cols, const void* xp,
                    float* const* y, const uint8_t* const* pf) {
  const auto* x = static_cast<const uint8_t*>(xp);
  switch (n) {
    case 4:
      DotK<4, 1>(t, rows, cols, x, 0, y, 0, nullptr, pf);
      break;
    case 3:
      DotK<3, 1>(t, rows, cols, x, 0, y, 0, nullptr, pf);
      break;
    case 2:
      DotK<2, 1>(t, rows, cols, x, 0, y, 0, nullptr, pf);
      break;
    default:
      DotK<1, 1>(t, rows, cols, x, 0, y, 0, nullptr, pf);
      break;
  }
}

}  // namespace weir::kernels::internal

#else  // not x86-64

#include "kernels/internal/avx512_kquants.h"

namespace weir::kernels::internal {
bool Avx512KType(DType) { return false; }
size_t Avx512KPrepBytes(DType, int64_t) { return 0; }
void Avx512KPrep(DType, const float*, int64_t, void*) {}
void Avx512KDot(DType, const uint8_t*, size_t, int64_t, int64_t, const void*, size_t, int64_t,
                float*, size_t, const uint8_t*) {}
void Avx512KDotRows(DType, const uint8_t* const*, int, int64_t, const void*, float* const*,
                    const uint8_t* const*) {}
}  // namespace weir::kernels::internal

#endif
