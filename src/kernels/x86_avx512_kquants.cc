// The prepared activation of the K types on the AVX-512 path (see
// internal/avx512_kquants.h); their products are the 16-row passes of x86_avx512_rows16.cc.
// Compiled with the AVX-512 F/BW/VL + VNNI flags (src/kernels/CMakeLists.txt) and reached only
// through x86_avx512.cc's table after isa.cc found those features, so, like the other SIMD files,
// it calls no inline code from other headers (see internal/isa_kernels.h).
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/internal/avx512_kquants.h"

namespace weir::kernels::internal {
namespace {

constexpr int kQ = 32;           // values per activation block
constexpr int64_t kSuper = 256;  // values per super-block

inline int64_t Pad16(int64_t n) { return (n + 15) / 16 * 16; }

// Prepared activation (nb = cols / 32 blocks):
//   Q4_K, Q5_K: int8 q[cols], each super-block's sub-blocks in the order 0 2 1 3 4 6 5 7;
//         f32 dx[Pad16(nb)]; f32 sx[Pad16(nb)] = dx[b] * sum(q of block b).
//   Q6_K, Q3_K, Q2_K: int8 q[cols] in natural order; per 16 values u (their sub-blocks) int32
//         bias[u] = -32 (Q6_K) / -4 (Q3_K) * sum(q of the 16), or (Q2_K) f32 sx16[u] =
//         dx * sum(q of the 16); f32 dx[Pad16(nb)].
// q and dx are ref::QuantizeActivation's numbers.

bool IsQ4K(DType t) { return t == DType::kQ4_K || t == DType::kQ5_K; }

size_t PrepBytesK(DType t, int64_t cols) {
  const size_t n = static_cast<size_t>(cols);
  const size_t scales = static_cast<size_t>(Pad16(cols / kQ)) * 4;
  return IsQ4K(t) ? n + 2 * scales : n + n / 4 + scales;
}

// Quantizes x[0..31] to q[0..31] (ref::QuantizeActivation's arithmetic: cvtps rounds half to even
// like nearbyint); returns the scale, and the sums of q[0..15] and q[16..31] in sum[0], sum[1].
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
  sum[0] = _mm512_reduce_add_epi32(qa);
  sum[1] = _mm512_reduce_add_epi32(qb);
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
      int32_t sum[2];
      dx[b] = QuantizeBlock32(x + b * kQ, q + s * kSuper + kSlot[j] * kQ, sum);
      sx[b] = dx[b] * static_cast<float>(sum[0] + sum[1]);
    }
    for (int64_t b = nb; b < Pad16(nb); ++b) dx[b] = sx[b] = 0;
    return;
  }
  auto* bias = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(out) + cols);
  auto* sx16 = reinterpret_cast<float*>(bias);
  auto* dx = reinterpret_cast<float*>(static_cast<uint8_t*>(out) + cols + cols / 4);
  const bool q2k = t == DType::kQ2_K;
  const int32_t offset = t == DType::kQ3_K ? 4 : 32;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sum[2];
    dx[b] = QuantizeBlock32(x + b * kQ, q + b * kQ, sum);
    if (q2k) {
      sx16[2 * b] = dx[b] * static_cast<float>(sum[0]);
      sx16[2 * b + 1] = dx[b] * static_cast<float>(sum[1]);
    } else {
      bias[2 * b] = -offset * sum[0];
      bias[2 * b + 1] = -offset * sum[1];
    }
  }
  for (int64_t b = nb; b < Pad16(nb); ++b) dx[b] = 0;
}

}  // namespace

bool Avx512KType(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K;
}

size_t Avx512KPrepBytes(DType t, int64_t cols) { return PrepBytesK(t, cols); }

void Avx512KPrep(DType t, const float* x, int64_t cols, void* out) { PrepK(t, x, cols, out); }

}  // namespace weir::kernels::internal

#else  // not x86-64

#include "kernels/internal/avx512_kquants.h"

namespace weir::kernels::internal {
bool Avx512KType(DType) { return false; }
size_t Avx512KPrepBytes(DType, int64_t) { return 0; }
void Avx512KPrep(DType, const float*, int64_t, void*) {}
}  // namespace weir::kernels::internal

#endif
