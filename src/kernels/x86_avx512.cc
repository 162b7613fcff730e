// The "avx512" path: AVX-512 F/BW/VL + VNNI kernels. This file is compiled with those -m flags
// (src/kernels/CMakeLists.txt) and only reached after isa.cc found the CPU features, so it must
// not call inline code from other headers (see internal/isa_kernels.h).
//
// Quantized weights use vpdpbusd (u8 x s8 -> s32, four products per lane). The weight bytes are
// made unsigned (Q8_0: q + 128 by flipping the sign bit; Q4_0: the raw nibble 0..15) and the
// offset is taken back out by starting each block's integer accumulator at -offset * sum(x), a
// bias computed once per call when the activation is prepared. Two blocks fill one 512-bit vector.
// Q8_0, Q5_0, Q5_1 and the K types are multiplied 16 rows at a time, one row per lane
// (x86_avx512_rows16.cc, internal/avx512_rows16.h; the K types' activation is prepared by
// x86_avx512_kquants.cc).
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#include "kernels/internal/avx512_kquants.h"
#include "kernels/internal/avx512_rows16.h"
#include "kernels/internal/avx512_vbmi.h"
#include "kernels/internal/isa_kernels.h"

namespace weir::kernels::internal {
namespace {

constexpr int kQ = 32;
// How far ahead of the weights being multiplied the dense dot products ask for more. The hardware
// prefetchers alone leave the compute-heavier kernels (Q4_0) at ~75% of the read bandwidth of one
// core; 2 KiB ahead brings them to ~95% (1-4 KiB measured alike).
constexpr size_t kPrefetchBytes = 2048;

// Rows of a later group are requested while this group runs: far enough ahead that about 4 KiB
// is in flight (rows of a gather start at unrelated addresses, where the hardware prefetchers
// need a few misses of their own to lock on), at least one group.
constexpr size_t kGatherLeadBytes = 4096;
// The dense decode product (consecutive rows) asks for 8 KiB ahead: with 4 KiB, short rows
// (one group of 4 rows of 2048 Q4_K / Q4_0 / Q4_1 values is 4.5-5 KiB) lost up to a quarter of
// their speed at one thread (kernels_bench, 5632x2048, 1 thread: Q4_K 25.5 -> 33.3 GB/s, Q4_0
// 27.8 -> 31.6, Q4_1 28.4 -> 31.6; the long rows of 2048x5632 and Q6_K / Q8_0 alike).
constexpr size_t kDenseLeadBytes = 8192;

// The dense products' look-ahead goes to L2 (at 2 threads F16 reads ~20% faster than with an L1
// hint, Q8_0 ~5%), except for Q4_0, whose weights are consumed fastest per byte and do slightly
// better straight into L1.
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

inline __mmask16 TailMask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

// ---------------------------------------------------------------------------------------------
// Prepared activation for Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 weights: one 128-byte record per pair of
// weight blocks,
//   int8  q[64]     both blocks' quantized x, in the order the weight vector is unpacked:
//                   A[0..15] B[0..15] A[16..31] B[16..31] (lanes 0-3 A, 4-7 B, 8-11 A, 12-15 B),
//                   matching Q4_0's unpacked weights [A.qs & 15 | B.qs & 15 | A.qs >> 4 |
//                   B.qs >> 4] (the 16-row kernels of Q8_0 and Q5_0 read values 4j..4j+3 of a
//                   block from it too)
//   int32 bias[16]  lane l: -offset * (q[4l] + q[4l+1] + q[4l+2] + q[4l+3]); offset 8 (Q4_0) or
//                   0 (Q4_1, Q5_1); unused for Q5_0 and Q8_0
// With an odd number of blocks the last record's B half is all zeros. The records are followed
// by f32 dx[nb] (the activation scales), zero-padded to a multiple of 16; for Q4_1 / Q5_1 then f32
// sx[b] = dx[b] * sum(q of block b), for Q5_0 / Q8_0 (and IQ4_NL / IQ4_XS, per 32 values) int32
// bias[b] = -16 / -128 * sum(q of block b) (the 16-row kernel's per-block offset), both padded
// alike.
constexpr size_t kPairBytes = 128;

inline int64_t PairCount(int64_t nb) { return (nb + 1) / 2; }
inline int64_t Pad16(int64_t n) { return (n + 15) / 16 * 16; }

size_t PrepBytes(DType t, int64_t cols) {
  if (Avx512KType(t)) return Avx512KPrepBytes(t, cols);
  if (t != DType::kQ8_0 && t != DType::kQ4_0 && t != DType::kQ4_1 && t != DType::kQ5_0 &&
      t != DType::kQ5_1 && t != DType::kIQ4_NL && t != DType::kIQ4_XS) {
    return 0;
  }
  const int64_t nb = cols / kQ;
  // Q4_1 / Q5_1 also keep sx[b] = dx[b] * sum(x_q in block b) for their min term, Q5_0 / Q8_0
  // the int32 block biases of their 16-row kernel (internal/avx512_rows16.h).
  const size_t scale_arrays = t == DType::kQ4_0 ? 1 : 2;
  return static_cast<size_t>(PairCount(nb)) * kPairBytes +
         scale_arrays * static_cast<size_t>(Pad16(nb)) * 4;
}

// Quantizes x[0..31]: values 0..15 to lo, 16..31 to hi. Same arithmetic as
// ref::QuantizeActivation (cvtps rounds half to even like nearbyint). Returns the scale.
inline float QuantizeBlock(const float* x, int8_t* lo, int8_t* hi) {
  const __m512 a = _mm512_loadu_ps(x);
  const __m512 b = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float d = amax / 127.0f;
  const __m512 id = _mm512_set1_ps(d != 0 ? 1.0f / d : 0.0f);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lo),
                   _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(a, id))));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hi),
                   _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(b, id))));
  return d;
}

void Prep(DType t, const float* x, int64_t cols, void* out) {
  if (Avx512KType(t)) {
    Avx512KPrep(t, x, cols, out);
    return;
  }
  // Every type uses Q4_0's records. Q4_1's nibbles are unsigned already, so no offset: bias 0;
  // Q5_0 and Q8_0 (the 16-row kernel) keep one bias per block instead of the per-lane ones.
  // IQ4_NL / IQ4_XS: the 16-row kernel's levels + 128, as Q8_0's q + 128.
  const bool block_bias = t == DType::kQ5_0 || t == DType::kQ8_0 || t == DType::kIQ4_NL ||
                          t == DType::kIQ4_XS;
  const int32_t block_offset = t == DType::kQ5_0 ? 16 : 128;
  const bool with_min = t == DType::kQ4_1 || t == DType::kQ5_1;
  const int64_t nb = cols / kQ;
  const __m512i ones = _mm512_set1_epi8(1);
  float* dx = reinterpret_cast<float*>(static_cast<uint8_t*>(out) +
                                       static_cast<size_t>(PairCount(nb)) * kPairBytes);
  for (int64_t p = 0; p < PairCount(nb); ++p) {
    uint8_t* rec = static_cast<uint8_t*>(out) + static_cast<size_t>(p) * kPairBytes;
    int8_t* q = reinterpret_cast<int8_t*>(rec);
    const int64_t a = 2 * p, b = 2 * p + 1;
    dx[a] = QuantizeBlock(x + a * kQ, q, q + 32);
    if (b < nb) {
      dx[b] = QuantizeBlock(x + b * kQ, q + 16, q + 48);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm_setzero_si128());
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 48), _mm_setzero_si128());
    }
    const __m512i qv = _mm512_loadu_si512(q);
    const __m512i sum4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, qv);
    if (with_min) {
      _mm512_storeu_si512(rec + 64, _mm512_setzero_si512());
      // Lanes 0-3 and 8-11 hold block a's values, 4-7 and 12-15 block b's (see above).
      alignas(64) int32_t lane[16];
      _mm512_store_si512(lane, sum4);
      int32_t sum_a = 0, sum_b = 0;
      for (int l = 0; l < 16; ++l) ((l & 4) ? sum_b : sum_a) += lane[l];
      float* sx = dx + Pad16(nb);
      sx[a] = dx[a] * static_cast<float>(sum_a);
      if (b < nb) sx[b] = dx[b] * static_cast<float>(sum_b);
      continue;
    }
    if (block_bias) {
      // Lanes 0-3 and 8-11 hold block a's values, 4-7 and 12-15 block b's.
      auto* bias = reinterpret_cast<int32_t*>(dx + Pad16(nb));
      bias[a] = -block_offset * _mm512_mask_reduce_add_epi32(0x0f0f, sum4);
      if (b < nb) bias[b] = -block_offset * _mm512_mask_reduce_add_epi32(0xf0f0, sum4);
      continue;
    }
    // Q4_0: offset 8.
    const __m512i bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum4, 3));
    _mm512_storeu_si512(rec + 64, bias);
  }
  for (int64_t b = nb; b < Pad16(nb); ++b) dx[b] = 0;
  if (with_min) {
    for (int64_t b = nb; b < Pad16(nb); ++b) dx[Pad16(nb) + b] = 0;
  }
  if (block_bias) {
    auto* bias = reinterpret_cast<int32_t*>(dx + Pad16(nb));
    for (int64_t b = nb; b < Pad16(nb); ++b) bias[b] = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Quantized dot products.

// The 64 unsigned weight bytes of blocks a and b in the order described above.
template <bool kQ4>
inline __m512i LoadPair(const uint8_t* a, const uint8_t* b) {
  if constexpr (kQ4) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)), 1);
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    return _mm512_and_si512(w, _mm512_set1_epi8(0x0f));
  } else {
    const __m512i w = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), 1);
    return _mm512_xor_si512(w, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
}

// A lone final block (the B half is zero; its activation bytes are zero too).
template <bool kQ4>
inline __m512i LoadSingle(const uint8_t* a) {
  if constexpr (kQ4) {
    const __m256i v =
        _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2)));
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    return _mm512_and_si512(w, _mm512_set1_epi8(0x0f));
  } else {
    const __m512i w =
        _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2)));
    return _mm512_xor_si512(w, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
}

// Whether the quantized column form may use the VBMI kernel: the CPU has AVX-512 VBMI and tests
// have not turned it off (internal/avx512_vbmi.h). A plain int with __atomic builtins, because
// this file must not instantiate std::atomic (see internal/isa_kernels.h).
int vbmi_allowed = 1;
int vbmi_pairs_allowed = 1;

bool Avx512VbmiEnabled() {
  static const bool has = __builtin_cpu_supports("avx512vbmi");
  return has && __atomic_load_n(&vbmi_allowed, __ATOMIC_RELAXED) != 0;
}

// Where two consecutive 16-bit words (from word `first` on) of each of 16 consecutive blocks of
// bb bytes lie in the chunk's bytes read as 3 pairs of 512-bit vectors (32 words each): output
// word o (block o / 2, word first + o % 2) comes from word idx[p][o] of pair p, where bit o of
// mask[p] is set.
struct ChunkWordTable {
  alignas(64) uint16_t idx[3][32];
  uint32_t mask[3];
};
constexpr ChunkWordTable MakeChunkWordTable(size_t bb, int first) {
  ChunkWordTable t{};
  for (int o = 0; o < 32; ++o) {
    const int src = static_cast<int>(bb / 2) * (o / 2) + first + (o & 1);
    t.idx[src / 64][o] = static_cast<uint16_t>(src % 64);
    t.mask[src / 64] |= 1u << o;
  }
  return t;
}
template <size_t bb, int first>
constexpr ChunkWordTable kChunkWords = MakeChunkWordTable(bb, first);

// The bytes of the blocks of a chunk (m: the blocks present, a run of low bits) of bb <= 22 bytes
// per block, zero past them, in six vectors (masked loads read nothing past the last block).
template <size_t bb>
inline void LoadChunk(const uint8_t* first, __mmask16 m, __m512i* z) {
  const size_t bytes = static_cast<size_t>(__builtin_popcount(m)) * bb;
  for (int v = 0; v < 6; ++v) {
    const size_t off = static_cast<size_t>(64 * v);
    if (off + 64 <= bytes) {
      z[v] = _mm512_loadu_si512(first + off);
    } else if (off < bytes) {
      z[v] = _mm512_maskz_loadu_epi8((~uint64_t{0}) >> (64 - (bytes - off)), first + off);
    } else {
      z[v] = _mm512_setzero_si512();
    }
  }
}

// The 32-bit words at word `first` of each block of a chunk loaded by LoadChunk.
template <size_t bb, int first>
inline __m512i PickWords(const __m512i* z) {
  const ChunkWordTable& t = kChunkWords<bb, first>;
  __m512i r = _mm512_permutex2var_epi16(z[0], _mm512_load_si512(t.idx[0]), z[1]);
  r = _mm512_mask_mov_epi16(r, t.mask[1],
                            _mm512_permutex2var_epi16(z[2], _mm512_load_si512(t.idx[1]), z[3]));
  return _mm512_mask_mov_epi16(r, t.mask[2],
                               _mm512_permutex2var_epi16(z[4], _mm512_load_si512(t.idx[2]), z[5]));
}

// The first 32-bit word of each of up to 16 consecutive blocks (stride bb bytes), lanes past the
// mask (a run of low bits) zero. The 4-bit types (blocks of 18-20 bytes) read the chunk's
// bytes with up to six vector loads and pick the words out with three vpermt2w: on the AMD EPYC
// (Zen 5) this was measured on, vpgatherdd zmm cost more than the nibble arithmetic around it,
// and 16 scalar loads stored and reloaded as a vector stalled on the store forwarding
// (kernels_bench, 1 thread, 2048x5632: Q4_0 29-30 -> 34-35 GB/s, Q4_1 24 -> 37-40 (also one
// word for d and m), Q5_0 27 -> 29; docs/performance.md). Q8_0 (34-byte blocks, closer to the
// memory bound) keeps the gather, which ran ~8% faster than scalar loads.
template <size_t bb>
inline __m512i BlockWords16(const uint8_t* first, __mmask16 m) {
  if constexpr (bb <= 22) {
    __m512i z[6];
    LoadChunk<bb>(first, m, z);
    return PickWords<bb, 0>(z);
  } else {
    const __m512i offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(static_cast<int>(bb)));
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, offsets, first, 1);
  }
}

// The low / high f16 of each gathered word as f32 (a Q4_1 block starts with d, then m: one
// gather gives both).
inline __m512 LowHalves(__m512i words) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)); }
inline __m512 HighHalves(__m512i words) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
}
// The f16 scales of up to 16 consecutive blocks (stride bb bytes) as f32, lanes past m zero.
template <size_t bb>
inline __m512 BlockScales16(const uint8_t* first, __mmask16 m) {
  return LowHalves(BlockWords16<bb>(first, m));
}

// For pair k (0..7) of a 16-block chunk: which of the 16 chunk scales each lane takes.
alignas(64) constexpr int32_t kPairLanesQ8[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};
alignas(64) constexpr int32_t kPairLanesQ4[8][16] = {
    {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1},
    {2, 2, 2, 2, 3, 3, 3, 3, 2, 2, 2, 2, 3, 3, 3, 3},
    {4, 4, 4, 4, 5, 5, 5, 5, 4, 4, 4, 4, 5, 5, 5, 5},
    {6, 6, 6, 6, 7, 7, 7, 7, 6, 6, 6, 6, 7, 7, 7, 7},
    {8, 8, 8, 8, 9, 9, 9, 9, 8, 8, 8, 8, 9, 9, 9, 9},
    {10, 10, 10, 10, 11, 11, 11, 11, 10, 10, 10, 10, 11, 11, 11, 11},
    {12, 12, 12, 12, 13, 13, 13, 13, 12, 12, 12, 12, 13, 13, 13, 13},
    {14, 14, 14, 14, 15, 15, 15, 15, 14, 14, 14, 14, 15, 15, 15, 15}};

// One weight pair (chunk position k) against NT tokens: records at x (stride xs), chunk scales
// (weight * activation) in s[NT], into acc[NT].
template <bool kQ4, int NT>
inline void DotPair(__m512i wv, int k, const uint8_t* x, size_t xs, const __m512* s, __m512* acc) {
  const __m512i lanes = _mm512_load_si512(kQ4 ? kPairLanesQ4[k] : kPairLanesQ8[k]);
  for (int t = 0; t < NT; ++t) {
    const uint8_t* r = x + t * xs;
    const __m512i isum = _mm512_dpbusd_epi32(_mm512_loadu_si512(r + 64), wv, _mm512_loadu_si512(r));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_permutexvar_ps(lanes, s[t]), acc[t]);
  }
}

// kMin (Q4_1, kQ4 set too): 20-byte blocks whose nibbles start at byte 4 and whose min m adds
// sum_b m[b] * sx[b] (sx from Prep) in a third accumulator.
template <bool kQ4, int NT, bool kMin = false>
void DotQuantRow(const uint8_t* row, int64_t nb, const uint8_t* xp, size_t xs, float* y, size_t ys,
                 const uint8_t* pf_end, const uint8_t* pf_shadow) {
  constexpr size_t bb = kMin ? kQ41Bytes : (kQ4 ? kQ4Bytes : kQ8Bytes);
  constexpr size_t qs_shift = kMin ? 2 : 0;  // LoadPair reads from +2
  const float* dx =
      reinterpret_cast<const float*>(xp + static_cast<size_t>(PairCount(nb)) * kPairBytes);
  __m512 acc0[NT], acc1[NT], accm[NT], s[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = accm[t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < nb; c += 16) {
    const int64_t n = Min64(16, nb - c);
    const __m512i words = BlockWords16<bb>(row + c * bb, TailMask(n));
    const __m512 sw = LowHalves(words);
    for (int t = 0; t < NT; ++t) {
      s[t] = _mm512_mul_ps(sw, _mm512_loadu_ps(dx + static_cast<size_t>(t) * xs / 4 + c));
    }
    if constexpr (kMin) {
      const __m512 mw = HighHalves(words);
      for (int t = 0; t < NT; ++t) {
        accm[t] = _mm512_fmadd_ps(
            mw, _mm512_loadu_ps(dx + static_cast<size_t>(t) * xs / 4 + Pad16(nb) + c), accm[t]);
      }
    }
    const uint8_t* a = row + c * bb + qs_shift;
    const uint8_t* xc = xp + static_cast<size_t>(c / 2) * kPairBytes;
    if (n == 16) {
      for (size_t off = 0; off < 16 * bb; off += 64) {
        const uint8_t* p = a + off + kPrefetchBytes;
        if (p < pf_end) PrefetchAhead<kQ4>(p);
        if (pf_shadow)
          _mm_prefetch(reinterpret_cast<const char*>(pf_shadow + c * bb + off), _MM_HINT_T0);
      }
      for (int k = 0; k < 8; k += 2) {
        DotPair<kQ4, NT>(LoadPair<kQ4>(a + 2 * k * bb, a + (2 * k + 1) * bb), k,
                         xc + k * kPairBytes, xs, s, acc0);
        DotPair<kQ4, NT>(LoadPair<kQ4>(a + (2 * k + 2) * bb, a + (2 * k + 3) * bb), k + 1,
                         xc + (k + 1) * kPairBytes, xs, s, acc1);
      }
    } else {
      int k = 0;
      for (; 2 * k + 1 < n; ++k) {
        DotPair<kQ4, NT>(LoadPair<kQ4>(a + 2 * k * bb, a + (2 * k + 1) * bb), k,
                         xc + k * kPairBytes, xs, s, (k & 1) ? acc1 : acc0);
      }
      if (n & 1) {
        DotPair<kQ4, NT>(LoadSingle<kQ4>(a + 2 * k * bb), k, xc + k * kPairBytes, xs, s, acc1);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    __m512 sum = _mm512_add_ps(acc0[t], acc1[t]);
    if constexpr (kMin) sum = _mm512_add_ps(sum, accm[t]);
    y[t * ys] = _mm512_reduce_add_ps(sum);
  }
}

// ---------------------------------------------------------------------------------------------
// Float-weight dot products: 16 weights widened to f32 per step.

template <DType T>
inline __m512 Load16(const uint8_t* row, int64_t j) {
  if constexpr (T == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + j);
  } else if constexpr (T == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j)));
  } else {
    const __m512i v =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
}

template <DType T>
inline __m512 Load16Masked(const uint8_t* row, int64_t j, __mmask16 m) {
  if constexpr (T == DType::kF32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + j);
  } else if constexpr (T == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * j));
  } else {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * j));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
}

template <DType T, int NT>
void DotFloatRow(const uint8_t* row, int64_t cols, const float* x, size_t xs, float* y, size_t ys,
                 const uint8_t* pf_end, const uint8_t* pf_shadow) {
  __m512 acc0[NT], acc1[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
  constexpr int64_t kBpe = T == DType::kF32 ? 4 : 2;
  int64_t j = 0;
  for (; j + 32 <= cols; j += 32) {
    for (int64_t off = 0; off < 32 * kBpe; off += 64) {
      const uint8_t* p = row + j * kBpe + off + kPrefetchBytes;
      if (p < pf_end) PrefetchAhead<false>(p);
      if (pf_shadow)
        _mm_prefetch(reinterpret_cast<const char*>(pf_shadow + j * kBpe + off), _MM_HINT_T0);
    }
    const __m512 w0 = Load16<T>(row, j);
    const __m512 w1 = Load16<T>(row, j + 16);
    for (int t = 0; t < NT; ++t) {
      acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * xs + j), acc0[t]);
      acc1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * xs + j + 16), acc1[t]);
    }
  }
  for (; j < cols; j += 16) {
    const __mmask16 m = TailMask(cols - j);
    const __m512 w0 = Load16Masked<T>(row, j, m);
    for (int t = 0; t < NT; ++t) {
      acc0[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x + t * xs + j), acc0[t]);
    }
  }
  for (int t = 0; t < NT; ++t) y[t * ys] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
}

// Row r against up to four tokens at once (the weight row is loaded once for all of them).
template <int NT>
void DotRowTokens(DType t, const uint8_t* row, int64_t cols, const uint8_t* xp, size_t xs, float* y,
                  size_t ys, const uint8_t* pf_end, const uint8_t* pf_shadow) {
  switch (t) {  // Q8_0, Q5_0 and the K types: the 16-row kernels
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

// Below, with the row form of the gathered product.
template <class RowAt, class OutAt>
void DotRowsInGroups(DType t, size_t row_bytes, int64_t cols, int64_t n, const RowAt& row_at,
                     const OutAt& out_at, const void* xp, size_t lead_bytes);

void Dot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows, const void* xp,
         size_t xp_stride, int64_t n_tok, float* y, size_t y_stride, const uint8_t* pf) {
  const auto* x = static_cast<const uint8_t*>(xp);
  if (Avx512Rows16Type(t)) {
    Avx512Rows16Dot(t, w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    return;
  }
  if (n_tok == 1 && pf == nullptr) {
    // One token (decode): 4 rows per pass with the activation loaded once for them, each row
    // computed by the same operations as DotRowTokens<1> (the gathered row form's contract).
    // Measured: llama-1b Q4_0 decode 28.3-28.7 -> 34.4-34.8 tok/s (docs/performance.md).
    DotRowsInGroups(
        t, row_stride, cols, n_rows,
        [&](int64_t k) { return w + static_cast<size_t>(k) * row_stride; },
        [&](int64_t k) { return y + k; }, xp, kDenseLeadBytes);
    return;
  }
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
// Row form of the gathered product: R gathered rows per pass against one token. Each row goes
// through exactly the operations of DotQuantRow<kQ4, 1> / DotFloatRow<T, 1> in the same order
// (so the same bits as MatVec); what changes is that the activation is loaded once for R rows,
// R independent rows are in flight at once, and there is one call for the whole index list.
// pf: R rows of a later group (or nullptr), requested line by line at the offsets being read.

template <bool kQ4, int R, bool kMin = false>
void DotQuantRowsGathered(const uint8_t* const* rows, int64_t nb, const uint8_t* xp,
                          float* const* y, const uint8_t* const* pf) {
  constexpr size_t bb = kMin ? kQ41Bytes : (kQ4 ? kQ4Bytes : kQ8Bytes);
  constexpr size_t qs_shift = kMin ? 2 : 0;  // LoadPair reads from +2
  const float* dx =
      reinterpret_cast<const float*>(xp + static_cast<size_t>(PairCount(nb)) * kPairBytes);
  __m512 acc0[R], acc1[R], accm[R], s[R];
  for (int i = 0; i < R; ++i) acc0[i] = acc1[i] = accm[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < nb; c += 16) {
    const int64_t n = Min64(16, nb - c);
    const __mmask16 m = TailMask(n);
    const __m512 dxc = _mm512_loadu_ps(dx + c);
    __m512i words[R];
    for (int i = 0; i < R; ++i) {
      words[i] = BlockWords16<bb>(rows[i] + c * bb, m);
      s[i] = _mm512_mul_ps(LowHalves(words[i]), dxc);
    }
    if constexpr (kMin) {
      const __m512 sxc = _mm512_loadu_ps(dx + Pad16(nb) + c);
      for (int i = 0; i < R; ++i) accm[i] = _mm512_fmadd_ps(HighHalves(words[i]), sxc, accm[i]);
    }
    const uint8_t* xc = xp + static_cast<size_t>(c / 2) * kPairBytes;
    // Pair k of the chunk into acc (acc0 for even k, acc1 for odd, as DotQuantRow does).
    auto pair = [&](int k, __m512* acc) {
      const __m512i lanes = _mm512_load_si512(kQ4 ? kPairLanesQ4[k] : kPairLanesQ8[k]);
      const uint8_t* r = xc + k * kPairBytes;
      const __m512i xq = _mm512_loadu_si512(r);
      const __m512i bias = _mm512_loadu_si512(r + 64);
      // The later rows are requested a pair of blocks at a time, at the pace they are read: a
      // burst of a whole chunk's lines (R x 4.5 for Q4_0) would queue behind the line fill
      // buffers (Q4_0 at 50%: 66% of the dense time with bursts, 58% spread out).
      if (pf != nullptr) {
        for (int i = 0; i < R; ++i) {
          const uint8_t* p = pf[i] + c * bb + 2 * k * bb;
          _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
          // A Q8_0 pair is 68 bytes: its end may lie on the next line.
          if constexpr (!kQ4) _mm_prefetch(reinterpret_cast<const char*>(p + 64), _MM_HINT_T0);
        }
      }
      for (int i = 0; i < R; ++i) {
        const uint8_t* a = rows[i] + c * bb + qs_shift;
        const __m512i wv = LoadPair<kQ4>(a + 2 * k * bb, a + (2 * k + 1) * bb);
        const __m512 sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, wv, xq));
        acc[i] = _mm512_fmadd_ps(sum, _mm512_permutexvar_ps(lanes, s[i]), acc[i]);
      }
    };
    int k = 0;
    if (n == 16) {
      for (; k < 8; k += 2) {
        pair(k, acc0);
        pair(k + 1, acc1);
      }
      continue;
    }
    for (; 2 * k + 1 < n; ++k) pair(k, (k & 1) ? acc1 : acc0);
    if (n & 1) {
      const __m512i lanes = _mm512_load_si512(kQ4 ? kPairLanesQ4[k] : kPairLanesQ8[k]);
      const uint8_t* r = xc + k * kPairBytes;
      const __m512i xq = _mm512_loadu_si512(r);
      const __m512i bias = _mm512_loadu_si512(r + 64);
      for (int i = 0; i < R; ++i) {
        const __m512i wv = LoadSingle<kQ4>(rows[i] + c * bb + qs_shift + 2 * k * bb);
        const __m512 sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, wv, xq));
        acc1[i] = _mm512_fmadd_ps(sum, _mm512_permutexvar_ps(lanes, s[i]), acc1[i]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    __m512 sum = _mm512_add_ps(acc0[i], acc1[i]);
    if constexpr (kMin) sum = _mm512_add_ps(sum, accm[i]);
    *y[i] = _mm512_reduce_add_ps(sum);
  }
}

template <DType T, int R>
void DotFloatRowsGathered(const uint8_t* const* rows, int64_t cols, const float* x, float* const* y,
                          const uint8_t* const* pf) {
  constexpr int64_t kBpe = T == DType::kF32 ? 4 : 2;
  __m512 acc0[R], acc1[R];
  for (int i = 0; i < R; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= cols; j += 32) {
    if (pf != nullptr) {
      for (int64_t off = 0; off < 32 * kBpe; off += 64) {
        for (int i = 0; i < R; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(pf[i] + j * kBpe + off), _MM_HINT_T0);
        }
      }
    }
    const __m512 x0 = _mm512_loadu_ps(x + j);
    const __m512 x1 = _mm512_loadu_ps(x + j + 16);
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm512_fmadd_ps(Load16<T>(rows[i], j), x0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(Load16<T>(rows[i], j + 16), x1, acc1[i]);
    }
  }
  for (; j < cols; j += 16) {
    const __mmask16 m = TailMask(cols - j);
    const __m512 x0 = _mm512_maskz_loadu_ps(m, x + j);
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm512_fmadd_ps(Load16Masked<T>(rows[i], j, m), x0, acc0[i]);
    }
  }
  for (int i = 0; i < R; ++i) *y[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));
}

template <int R>
void DotRowsGathered(DType t, const uint8_t* const* rows, int64_t cols, const void* xp,
                     float* const* y, const uint8_t* const* pf) {
  const auto* xb = static_cast<const uint8_t*>(xp);
  const auto* xf = static_cast<const float*>(xp);
  switch (t) {  // Q8_0, Q5_0 and the K types: the 16-row kernels
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

// rows_at(k) (k < n) against one token, R rows per pass, y at out_at(k); the rows of the group
// groups_ahead later (about lead_bytes on) are requested meanwhile.
template <class RowAt, class OutAt>
void DotRowsInGroups(DType t, size_t row_bytes, int64_t cols, int64_t n, const RowAt& row_at,
                     const OutAt& out_at, const void* xp, size_t lead_bytes) {
  constexpr int R = 4;
  const int64_t groups_ahead =
      static_cast<int64_t>((lead_bytes + R * row_bytes - 1) / (R * row_bytes));
  const uint8_t* rows[R];
  const uint8_t* ahead[R];
  float* out[R];
  for (int64_t i = 0; i < Min64(groups_ahead * R, n); ++i) {
    const uint8_t* p = row_at(i);
    for (size_t off = 0; off < row_bytes; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
    }
  }
  int64_t k = 0;
  for (; k + R <= n; k += R) {
    for (int i = 0; i < R; ++i) {
      rows[i] = row_at(k + i);
      out[i] = out_at(k + i);
    }
    // The group groups_ahead later (near the end: its rows that exist, the last one repeated).
    const int64_t next = k + groups_ahead * R;
    const bool stream = next < n;
    if (stream) {
      for (int i = 0; i < R; ++i) ahead[i] = row_at(Min64(next + i, n - 1));
    }
    DotRowsGathered<R>(t, rows, cols, xp, out, stream ? ahead : nullptr);
  }
  const int rest = static_cast<int>(n - k);
  for (int i = 0; i < rest; ++i) {
    rows[i] = row_at(k + i);
    out[i] = out_at(k + i);
  }
  if (rest == 3) DotRowsGathered<3>(t, rows, cols, xp, out, nullptr);
  if (rest == 2) DotRowsGathered<2>(t, rows, cols, xp, out, nullptr);
  if (rest == 1) DotRowsGathered<1>(t, rows, cols, xp, out, nullptr);
}

void DotGather(DType t, const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
               int64_t n_idx, const void* xp, float* y) {
  if (Avx512Rows16Type(t)) {
    Avx512Rows16Gather(t, w, row_stride, cols, idx, n_idx, xp, y);
    return;
  }
  DotRowsInGroups(
      t, row_stride, cols, n_idx,
      [&](int64_t k) { return w + static_cast<size_t>(idx[k]) * row_stride; },
      [&](int64_t k) { return y + idx[k]; }, xp, kGatherLeadBytes);
}

// ---------------------------------------------------------------------------------------------
// Column form of the gathered product: acc += x[i] * wt[i, :] for the rows i in idx, R rows per
// pass so each accumulator vector is loaded and stored once per R rows.

// pf: R rows that will be processed later (or nullptr): the loops request them line by line at
// the offset they are reading, so the prefetches stream at the pace of the work instead of in
// bursts (rows of a gather start at unrelated addresses, where the hardware prefetcher needs a
// few misses to lock on).
template <DType T, int R>
void AxpyFloatRows(const uint8_t* const* rows, const float* xs, int64_t n_out, float* acc,
                   const uint8_t* const* pf) {
  constexpr int64_t kBpe = T == DType::kF32 ? 4 : 2;
  __m512 xv[R];
  for (int i = 0; i < R; ++i) xv[i] = _mm512_set1_ps(xs[i]);
  int64_t j = 0;
  for (; j + 16 <= n_out; j += 16) {
    if (pf != nullptr && (j * kBpe) % 64 == 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(pf[i] + j * kBpe), _MM_HINT_T0);
      }
    }
    __m512 a = _mm512_loadu_ps(acc + j);
    for (int i = 0; i < R; ++i) a = _mm512_fmadd_ps(xv[i], Load16<T>(rows[i], j), a);
    _mm512_storeu_ps(acc + j, a);
  }
  if (j < n_out) {
    const __mmask16 m = TailMask(n_out - j);
    __m512 a = _mm512_maskz_loadu_ps(m, acc + j);
    for (int i = 0; i < R; ++i) a = _mm512_fmadd_ps(xv[i], Load16Masked<T>(rows[i], j, m), a);
    _mm512_mask_storeu_ps(acc + j, m, a);
  }
}

// The coefficients of one group of R <= 4 rows for blocks [c, c + 16) (m: those that exist), as
// gather.h defines them: the R values x[i] * d[i, b] of each block rounded to int8 with one scale
// C = max |x[i] d[i, b]| / 127. t: the rounded values, row by row; scale: C; packed: row i's int8
// in byte i; bias: -offset * sum_i t_i (offset 8 for Q4_0, 128 for Q8_0: the VBMI kernel's
// unsigned weights).
template <bool kQ4, int R>
void GroupCoefficients(const uint8_t* const* rows, const float* xs, int64_t c, __mmask16 m,
                       float (*t)[16], float* scale, int32_t* packed, int32_t* bias) {
  constexpr size_t bb = kQ4 ? kQ4Bytes : kQ8Bytes;
  __m512 coef[R];
  __m512 cmax = _mm512_setzero_ps();
  for (int i = 0; i < R; ++i) {
    coef[i] = _mm512_mul_ps(BlockScales16<bb>(rows[i] + c * bb, m), _mm512_set1_ps(xs[i]));
    cmax = _mm512_max_ps(cmax, _mm512_abs_ps(coef[i]));
  }
  const __m512 cs = _mm512_div_ps(cmax, _mm512_set1_ps(127.0f));
  const __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(cs, _mm512_setzero_ps(), _CMP_NEQ_OQ),
                                         _mm512_set1_ps(1.0f), cs);
  _mm512_store_ps(scale, cs);
  __m512i tsum = _mm512_setzero_si512(), tpack = _mm512_setzero_si512();
  for (int i = 0; i < R; ++i) {
    const __m512 ti = _mm512_roundscale_ps(_mm512_mul_ps(coef[i], inv),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_store_ps(t[i], ti);
    const __m512i tint = _mm512_cvtps_epi32(ti);
    tsum = _mm512_add_epi32(tsum, tint);
    tpack = _mm512_or_si512(
        tpack, _mm512_slli_epi32(_mm512_and_si512(tint, _mm512_set1_epi32(0xff)), 8 * i));
  }
  _mm512_store_si512(packed, tpack);
  _mm512_store_si512(bias, _mm512_mullo_epi32(tsum, _mm512_set1_epi32(kQ4 ? -8 : -128)));
}

// Two full groups (8 rows) per pass through the VBMI kernel, which then reads and writes each
// accumulator block once for both: the same bits as two AxpyQuantRows<kQ4, 4> calls.
// Measured (kernels_bench, Q8_0 / Q4_0 2048x5632 column form, 2 threads): docs/performance.md,
// "Two groups per pass in the quantized column form".
template <bool kQ4>
void AxpyQuantGroupPair(const uint8_t* const* rows, const float* xs, int64_t n_out, float* acc,
                        const uint8_t* const* pf) {
  const int64_t nb = n_out / kQ;
  alignas(64) float t[4][16];
  alignas(64) float scale[2][16];
  alignas(64) int32_t packed[2][16], bias[2][16];
  for (int64_t c = 0; c < nb; c += 16) {
    const int64_t n = Min64(16, nb - c);
    const __mmask16 m = TailMask(n);
    for (int g = 0; g < 2; ++g) {
      GroupCoefficients<kQ4, 4>(rows + 4 * g, xs + 4 * g, c, m, t, scale[g], packed[g], bias[g]);
    }
    Avx512VbmiAxpyChunk(kQ4, 2, rows, pf, c, n, &scale[0][0], &packed[0][0], &bias[0][0], acc);
  }
}

// Quantized column form for a group of R <= 4 rows (gather.h): per output block the R
// coefficients x[i] * d[i, b] are rounded to int8 with one scale C; the products t * q are exact
// integers, summed here in f32 (exact below 2^24) and scaled once by C. With AVX-512 VBMI and a
// full group the sums are done by vpdpbusd instead (x86_avx512_vbmi.cc), the same numbers.
template <bool kQ4, int R>
void AxpyQuantRows(const uint8_t* const* rows, const float* xs, int64_t n_out, float* acc,
                   const uint8_t* const* pf) {
  constexpr size_t bb = kQ4 ? kQ4Bytes : kQ8Bytes;
  // Q4_0 nibble -> (nibble - 8) as f32 by vpermps, which reads only the low 4 bits of each index.
  const __m512 centred = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  const int64_t nb = n_out / kQ;
  const bool vbmi = R == kGatherGroup && Avx512VbmiEnabled();
  alignas(64) float t[R][16];   // rounded coefficients of the chunk's blocks, row by row
  alignas(64) float scale[16];  // C per block
  alignas(64) int32_t packed[16], bias[16];
  for (int64_t c = 0; c < nb; c += 16) {
    const int64_t n = Min64(16, nb - c);
    const __mmask16 m = TailMask(n);
    GroupCoefficients<kQ4, R>(rows, xs, c, m, t, scale, packed, bias);
    if (vbmi) {
      Avx512VbmiAxpyChunk(kQ4, 1, rows, pf, c, n, scale, packed, bias, acc);
      continue;
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t b = c + k;
      if (pf != nullptr) {
        for (int i = 0; i < R; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(pf[i] + b * bb), _MM_HINT_T0);
        }
      }
      __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
      for (int i = 0; i < R; ++i) {
        const uint8_t* blk = rows[i] + static_cast<size_t>(b) * bb;
        const __m512 ti = _mm512_set1_ps(t[i][k]);
        if constexpr (kQ4) {
          const __m512i z =
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
          s0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(z, centred), ti, s0);
          s1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(z, 4), centred), ti, s1);
        } else {
          const __m512i lo =
              _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
          const __m512i hi =
              _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18)));
          s0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), ti, s0);
          s1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), ti, s1);
        }
      }
      const __m512 cb = _mm512_set1_ps(scale[k]);
      _mm512_storeu_ps(acc + b * kQ, _mm512_fmadd_ps(s0, cb, _mm512_loadu_ps(acc + b * kQ)));
      _mm512_storeu_ps(acc + b * kQ + 16,
                       _mm512_fmadd_ps(s1, cb, _mm512_loadu_ps(acc + b * kQ + 16)));
    }
  }
}

// Q4_1 column form: acc[j] += x[i] * w[i, j] with w = q * d + m formed in f32 as DequantizeRow
// forms it (a rounded product, then a rounded sum; the _round_ intrinsics keep the compiler from
// fusing them), then one fused multiply-add per row, rows in index order: the same bits as the
// dequantize-then-F32 fallback of typed_dispatch.h, without its scratch row.
template <int R>
void AxpyQ41Rows(const uint8_t* const* rows, const float* xs, int64_t n_out, float* acc,
                 const uint8_t* const* pf) {
  constexpr int kRn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const int64_t nb = n_out / kQ;
  const __m512i low = _mm512_set1_epi32(0x0f);
  __m512 xv[R];
  for (int i = 0; i < R; ++i) xv[i] = _mm512_set1_ps(xs[i]);
  for (int64_t b = 0; b < nb; ++b) {
    if (pf != nullptr && (b * kQ41Bytes) % 64 < kQ41Bytes) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(pf[i] + b * kQ41Bytes), _MM_HINT_T0);
      }
    }
    __m512 a0 = _mm512_loadu_ps(acc + b * kQ);
    __m512 a1 = _mm512_loadu_ps(acc + b * kQ + 16);
    for (int i = 0; i < R; ++i) {
      const uint8_t* blk = rows[i] + static_cast<size_t>(b) * kQ41Bytes;
      uint32_t dm;
      std::memcpy(&dm, blk, 4);
      const __m512 d = LowHalves(_mm512_set1_epi32(static_cast<int32_t>(dm)));
      const __m512 m = HighHalves(_mm512_set1_epi32(static_cast<int32_t>(dm)));
      const __m512i z =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4)));
      const __m512 q0 = _mm512_cvtepi32_ps(_mm512_and_si512(z, low));
      const __m512 q1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(z, 4));
      const __m512 w0 = _mm512_add_round_ps(_mm512_mul_round_ps(q0, d, kRn), m, kRn);
      const __m512 w1 = _mm512_add_round_ps(_mm512_mul_round_ps(q1, d, kRn), m, kRn);
      a0 = _mm512_fmadd_ps(xv[i], w0, a0);
      a1 = _mm512_fmadd_ps(xv[i], w1, a1);
    }
    _mm512_storeu_ps(acc + b * kQ, a0);
    _mm512_storeu_ps(acc + b * kQ + 16, a1);
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
    case DType::kQ4_1:
      AxpyQ41Rows<R>(rows, xs, n_out, acc, pf);
      return;
    default:  // not in direct_axpy_types: internal/typed_dispatch.h never sends it
      __builtin_trap();
  }
}

void AxpyGather(DType t, const uint8_t* wt, size_t row_stride, int64_t n_out, const int32_t* idx,
                int64_t n_idx, const float* x, float* acc) {
  constexpr int R = 4;
  constexpr int kGroupsAhead = 2;  // rows requested while the group this far before them runs
  // Quantized weights on the VBMI kernel go two groups per pass (AxpyQuantGroupPair).
  const bool pairs = (t == DType::kQ8_0 || t == DType::kQ4_0) && Avx512VbmiEnabled() &&
                     __atomic_load_n(&vbmi_pairs_allowed, __ATOMIC_RELAXED) != 0;
  const uint8_t* rows[2 * R];
  const uint8_t* ahead[2 * R];
  float xs[2 * R];
  // The first groups have nobody before them to request them.
  for (int64_t i = 0; i < Min64(kGroupsAhead * R, n_idx); ++i) {
    const uint8_t* p = wt + static_cast<size_t>(idx[i]) * row_stride;
    for (size_t off = 0; off < row_stride; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
    }
  }
  int64_t k = 0;
  for (int step = pairs ? 2 * R : R; step >= R; step -= R) {
    for (; k + step <= n_idx; k += step) {
      for (int i = 0; i < step; ++i) {
        rows[i] = wt + static_cast<size_t>(idx[k + i]) * row_stride;
        xs[i] = x[idx[k + i]];
      }
      const int64_t next = k + kGroupsAhead * R;
      const bool stream = next + step <= n_idx;
      if (stream) {
        for (int i = 0; i < step; ++i) {
          ahead[i] = wt + static_cast<size_t>(idx[next + i]) * row_stride;
        }
      }
      const uint8_t* const* pf = stream ? ahead : nullptr;
      if (step == R) {
        AxpyRows<R>(t, rows, xs, n_out, acc, pf);
      } else if (t == DType::kQ4_0) {
        AxpyQuantGroupPair<true>(rows, xs, n_out, acc, pf);
      } else {
        AxpyQuantGroupPair<false>(rows, xs, n_out, acc, pf);
      }
    }
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

// e^x: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor polynomial to r^6 (relative error
// below 2e-7 on that interval), scaled by 2^n with vscalefps (which also flushes to 0 / inf).
inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    s0 = _mm512_fmadd_ps(a, a, s0);
    s1 = _mm512_fmadd_ps(b, b, s1);
  }
  for (; i < n; i += 16) {
    const __m512 a = _mm512_maskz_loadu_ps(TailMask(n - i), x + i);
    s0 = _mm512_fmadd_ps(a, a, s0);
  }
  const float ss = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  const __m512 scale = _mm512_set1_ps(1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps));
  for (i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + i)));
  }
}

float ExpSum(float* x, int64_t n, float max);  // below, with attention's kernels

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  __m512 mx = _mm512_set1_ps(-__builtin_inff());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, x + i));
  }
  const __m512 inv = _mm512_set1_ps(1.0f / ExpSum(x, n, _mm512_reduce_max_ps(mx)));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

// Keys stored by blocks of 16 positions (internal/isa_kernels.h, attn_scores16): B blocks of Q
// queries per pass, each loaded key vector shared by the Q queries, one accumulator per (query,
// block). Each lane's sum is the same chain of fused multiply-adds over d whatever B and Q are.
template <DType T, int Q, int B>
void AttnScoreBlocks(const uint8_t* kb, size_t stride, int64_t hd, const float* const* q,
                     float* const* s, int64_t at) {
  __m512 acc[Q][B];
  for (int i = 0; i < Q; ++i)
    for (int b = 0; b < B; ++b) acc[i][b] = _mm512_setzero_ps();
  constexpr int64_t kElem = T == DType::kF32 ? 4 : 2;
  for (int64_t d = 0; d < hd; ++d) {
    __m512 k[B];
    for (int b = 0; b < B; ++b) k[b] = Load16<T>(kb + static_cast<size_t>(b) * stride + d * 16 * kElem, 0);
    for (int i = 0; i < Q; ++i) {
      const __m512 qd = _mm512_set1_ps(q[i][d]);
      for (int b = 0; b < B; ++b) acc[i][b] = _mm512_fmadd_ps(qd, k[b], acc[i][b]);
    }
  }
  for (int i = 0; i < Q; ++i)
    for (int b = 0; b < B; ++b) _mm512_storeu_ps(s[i] + at + 16 * b, acc[i][b]);
}

template <DType T, int Q>
void AttnScores16Q(const uint8_t* kb, size_t stride, int64_t n_blocks, int64_t hd,
                   const float* const* q, float* const* s) {
  constexpr int kB = Q == 1 ? 8 : 4;
  int64_t b = 0;
  for (; b + kB <= n_blocks; b += kB) AttnScoreBlocks<T, Q, kB>(kb + b * stride, stride, hd, q, s, 16 * b);
  for (; b < n_blocks; ++b) AttnScoreBlocks<T, Q, 1>(kb + b * stride, stride, hd, q, s, 16 * b);
}

template <DType T>
void AttnScores16T(const uint8_t* kb, size_t stride, int64_t n_blocks, int64_t hd,
                   const float* const* q, int nq, float* const* s) {
  switch (nq) {
    case 1: AttnScores16Q<T, 1>(kb, stride, n_blocks, hd, q, s); return;
    case 2: AttnScores16Q<T, 2>(kb, stride, n_blocks, hd, q, s); return;
    case 3: AttnScores16Q<T, 3>(kb, stride, n_blocks, hd, q, s); return;
    default: AttnScores16Q<T, 4>(kb, stride, n_blocks, hd, q, s); return;
  }
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

// acc_i[hd] += sum_j p_i[j] * v_j for Q queries, each loaded value vector shared by them, the
// accumulators in registers for the whole run: one fused multiply-add per row, vector and query,
// rows in order (AxpyFloatRows' numbers).
template <DType T, int C, int Q>
void AttnValuesT(const uint8_t* v, size_t stride, int64_t n, const float* const* p, float* const* acc) {
  __m512 a[Q][C];
  for (int i = 0; i < Q; ++i)
    for (int c = 0; c < C; ++c) a[i][c] = _mm512_loadu_ps(acc[i] + 16 * c);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = v + static_cast<size_t>(j) * stride;
    __m512 w[C];
    for (int c = 0; c < C; ++c) w[c] = Load16<T>(row, 16 * c);
    for (int i = 0; i < Q; ++i) {
      const __m512 pj = _mm512_set1_ps(p[i][j]);
      for (int c = 0; c < C; ++c) a[i][c] = _mm512_fmadd_ps(pj, w[c], a[i][c]);
    }
  }
  for (int i = 0; i < Q; ++i)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc[i] + 16 * c, a[i][c]);
}

// Queries in passes of up to 24 / C (the accumulators and one row in the 32 registers).
template <DType T, int C>
void AttnValuesC(const uint8_t* v, size_t stride, int64_t n, const float* const* p, int nq,
                 float* const* acc) {
  constexpr int kQ = C >= 16 ? 1 : (C >= 8 ? 2 : 4);
  int i = 0;
  for (; i + kQ <= nq; i += kQ) AttnValuesT<T, C, kQ>(v, stride, n, p + i, acc + i);
  for (; i < nq; ++i) AttnValuesT<T, C, 1>(v, stride, n, p + i, acc + i);
}

template <DType T>
bool AttnValuesOf(const uint8_t* v, size_t stride, int64_t n, int64_t hd, const float* const* p,
                  int nq, float* const* acc) {
  switch (hd) {
    case 32: AttnValuesC<T, 2>(v, stride, n, p, nq, acc); return true;
    case 64: AttnValuesC<T, 4>(v, stride, n, p, nq, acc); return true;
    case 128: AttnValuesC<T, 8>(v, stride, n, p, nq, acc); return true;
    case 256: AttnValuesC<T, 16>(v, stride, n, p, nq, acc); return true;
    default: return false;
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
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax));
    sum = _mm512_mask_add_ps(sum, m, sum, e);
    _mm512_mask_storeu_ps(x + i, m, e);
  }
  return _mm512_reduce_add_ps(sum);
}

void SiluMul(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 v =
        _mm512_div_ps(_mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, up + i)), _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(gate + i, m, v);
  }
}

// gelu(g) u = g u / (1 + exp(-2z)), z = sqrt(2/pi) (g + 0.044715 g^3) (ops.h).
void GeluMul(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 k = _mm512_set1_ps(-2.0f * 0.79788456080286535588f);
  const __m512 c = _mm512_set1_ps(0.044715f);
  const __m512 lo = _mm512_set1_ps(-88.0f), hi = _mm512_set1_ps(88.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    // -2z within [-88, 88]: Exp's range (beyond it the result is 0 or g u / 1.7e38 ~ 0 anyway).
    const __m512 z2 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(k, _mm512_fmadd_ps(_mm512_mul_ps(c, g), _mm512_mul_ps(g, g), g)), lo), hi);
    const __m512 v = _mm512_div_ps(_mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, up + i)),
                                   _mm512_add_ps(one, Exp(z2)));
    _mm512_mask_storeu_ps(gate + i, m, v);
  }
}

// 16 positions of the bitmap per step: the next popcount(m) values are expanded to the set
// lanes, multiplied by x and added (fused) where a bit is set; other lanes are not written.
void SparseScatter(const float* v, const std::byte* bitmap, int64_t len, float x, float* y) {
  const __m512 xv = _mm512_set1_ps(x);
  for (int64_t i = 0; i < len; i += 64) {
    uint64_t bits;
    std::memcpy(&bits, bitmap + i / 8, 8);
    if (len - i < 64) bits &= (uint64_t{1} << (len - i)) - 1;
    for (int q = 0; bits != 0; ++q, bits >>= 16) {
      const __mmask16 m = static_cast<__mmask16>(bits & 0xffff);
      if (m == 0) continue;
      float* yq = y + i + 16 * q;
      const __m512 vals = _mm512_maskz_expandloadu_ps(m, v);
      _mm512_mask_storeu_ps(yq, m, _mm512_fmadd_ps(xv, vals, _mm512_maskz_loadu_ps(m, yq)));
      v += __builtin_popcount(m);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Chunked product (chunked_matvec.h): 16 rows per pass (row_stride apart), each row one block per
// chunk. The 16 rows'
// integer sums of one chunk are formed in four vectors, vector i holding in its 128-bit lane m the
// four partial sums of row 4 m + i (its 16 weight bytes against the chunk's 16 activation bytes
// of that half), and folded into one vector whose lane l is row l by two rounds of unpack + add.
// Rows past the tail read row 0 again (always inside the chunk) and are masked off at the store.

// The weight bytes [from, from + 16) of rows {i, 4 + i, 8 + i, 12 + i} (clamped to the tail).
inline __m512i LoadRows4(const uint8_t* base, size_t rs, int i, int n, size_t from) {
  auto at = [&](int r) {
    return reinterpret_cast<const __m128i*>(base + static_cast<size_t>(r < n ? r : 0) * rs + from);
  };
  __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(at(i)));
  v = _mm512_inserti32x4(v, _mm_loadu_si128(at(4 + i)), 1);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(at(8 + i)), 2);
  return _mm512_inserti32x4(v, _mm_loadu_si128(at(12 + i)), 3);
}

template <bool kQ4>
void DotChunksQuant(const uint8_t* w, size_t row_stride, size_t chunk_stride, int64_t n_chunks,
                    int64_t rows, const float* x, float* y, bool accumulate) {
  const size_t rs = row_stride;
  const __m512i scale_at = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(static_cast<int>(rs)));
  // Each chunk's activation: int8 values 0..15 and 16..31, its scale, and -offset * sum.
  alignas(64) int8_t xq[kMaxDotChunks][32];
  float dx[kMaxDotChunks];
  int32_t bias[kMaxDotChunks];
  for (int64_t k = 0; k < n_chunks; ++k) {
    dx[k] = QuantizeBlock(x + k * kQ, xq[k], xq[k] + 16);
    int32_t sum = 0;
    for (int j = 0; j < kQ; ++j) sum += xq[k][j];
    bias[k] = -(kQ4 ? 8 : 128) * sum;
  }
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int n = static_cast<int>(Min64(16, rows - r0));
    const __mmask16 m = TailMask(n);
    __m512 acc = accumulate ? _mm512_maskz_loadu_ps(m, y + r0) : _mm512_setzero_ps();
    for (int64_t k = 0; k < n_chunks; ++k) {
      const uint8_t* base = w + static_cast<size_t>(k) * chunk_stride + static_cast<size_t>(r0) * rs;
      const __m512i xlo = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(xq[k])));
      const __m512i xhi =
          _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(xq[k] + 16)));
      __m512i a[4];
      for (int i = 0; i < 4; ++i) {
        __m512i lo, hi;
        if constexpr (kQ4) {
          const __m512i v = LoadRows4(base, rs, i, n, 2);
          lo = _mm512_and_si512(v, nib);
          hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        } else {
          lo = _mm512_xor_si512(LoadRows4(base, rs, i, n, 2), flip);
          hi = _mm512_xor_si512(LoadRows4(base, rs, i, n, 18), flip);
        }
        a[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi, xhi);
      }
      const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]),
                                          _mm512_unpackhi_epi32(a[0], a[1]));
      const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]),
                                          _mm512_unpackhi_epi32(a[2], a[3]));
      const __m512i isum = _mm512_add_epi32(
          _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1)),
          _mm512_set1_epi32(bias[k]));
      const __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, scale_at, base, 1);
      const __m512 s = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)),
                                     _mm512_set1_ps(dx[k]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc);
    }
    _mm512_mask_storeu_ps(y + r0, m, acc);
  }
}

void DotChunks(DType t, const uint8_t* w, size_t row_stride, size_t chunk_stride,
               int64_t n_chunks, int64_t rows, const float* x, float* y, bool accumulate) {
  if (t == DType::kQ4_0) {
    DotChunksQuant<true>(w, row_stride, chunk_stride, n_chunks, rows, x, y, accumulate);
  } else {
    DotChunksQuant<false>(w, row_stride, chunk_stride, n_chunks, rows, x, y, accumulate);
  }
}

// ---------------------------------------------------------------------------------------------
// Tiled dense product (tiled.h): 16 rows per vector, one lane per row.

constexpr size_t kTiledRecord = 64;  // == kTiledRecordBytes (tiled.h, not included here)

void PrepTiled(DType t, const float* x, int64_t cols, void* out) {
  const int32_t shift = t == DType::kQ4_0 ? 3 : 7;  // offset 8 or 128
  for (int64_t b = 0; b < cols / kQ; ++b) {
    uint8_t* rec = static_cast<uint8_t*>(out) + static_cast<size_t>(b) * kTiledRecord;
    auto* q = reinterpret_cast<int8_t*>(rec);
    const float d = QuantizeBlock(x + b * kQ, q, q + 16);
    const __m512i wide = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    const __m512i wide2 =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(wide, wide2));
    const int32_t bias = -(sum * (1 << shift));
    std::memcpy(rec + 32, &bias, 4);
    std::memcpy(rec + 36, &d, 4);
    std::memset(rec + 40, 0, kTiledRecord - 40);
  }
}

// One 16-row group against NT tokens. The per-block integer sums start at the record's bias and
// run as two chains (low and high halves) so that vpdpbusd's latency overlaps.
template <bool kQ4, int NT>
void DotTiledGroup(const uint8_t* scales, size_t scale_stride, const uint8_t* quants,
                   size_t quant_stride, int64_t nb, const uint8_t* xp, size_t xs, float* y,
                   size_t ys, const uint8_t* pf_end) {
  constexpr size_t kQuantTile = kQ4 ? 256 : 512;
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // 2 KiB ahead: 8 blocks on in a tiled tensor; in a tiled bundle pack's down pieces (blocks a
  // chunk apart) the same chunk's tiles 7 groups on, so each chunk's piece streams in order.
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* qt = quants + static_cast<size_t>(b) * quant_stride;
    // Into L2 (measured on llama-1b Q4_0's products: 45.3 against 44.2 tok/s into L1; Q8_0
    // alike), 2 KiB ahead (1 KiB and 4-8 KiB were no better).
    for (size_t off = 0; off < kQuantTile; off += 64) {
      const uint8_t* p = qt + off + kPrefetchBytes;
      if (p < pf_end) PrefetchAhead<false>(p);
    }
    const __m512 dw = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + static_cast<size_t>(b) * scale_stride)));
    __m512i lo[NT], hi[NT];
    for (int t = 0; t < NT; ++t) {
      const uint8_t* rec = xp + t * xs + static_cast<size_t>(b) * kTiledRecord;
      int32_t bias;
      std::memcpy(&bias, rec + 32, 4);
      lo[t] = _mm512_set1_epi32(bias);
      hi[t] = _mm512_setzero_si512();
    }
    auto word = [&](int t, int k) {
      int32_t v;
      std::memcpy(&v, xp + t * xs + static_cast<size_t>(b) * kTiledRecord + 4 * k, 4);
      return _mm512_set1_epi32(v);
    };
    if constexpr (kQ4) {
      for (int v = 0; v < 4; ++v) {
        const __m512i w = _mm512_loadu_si512(qt + 64 * v);
        const __m512i wl = _mm512_and_si512(w, nibble);
        const __m512i wh = _mm512_and_si512(_mm512_srli_epi16(w, 4), nibble);
        for (int t = 0; t < NT; ++t) {
          lo[t] = _mm512_dpbusd_epi32(lo[t], wl, word(t, v));
          hi[t] = _mm512_dpbusd_epi32(hi[t], wh, word(t, 4 + v));
        }
      }
    } else {
      for (int v = 0; v < 8; v += 2) {
        const __m512i w0 = _mm512_xor_si512(_mm512_loadu_si512(qt + 64 * v), flip);
        const __m512i w1 = _mm512_xor_si512(_mm512_loadu_si512(qt + 64 * v + 64), flip);
        for (int t = 0; t < NT; ++t) {
          lo[t] = _mm512_dpbusd_epi32(lo[t], w0, word(t, v));
          hi[t] = _mm512_dpbusd_epi32(hi[t], w1, word(t, v + 1));
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      float dx;
      std::memcpy(&dx, xp + t * xs + static_cast<size_t>(b) * kTiledRecord + 36, 4);
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo[t], hi[t])), scale, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * ys, acc[t]);
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
    for (; tok + 4 <= n_tok; tok += 4) {
      DotTiledGroup<kQ4, 4>(scales, geo.scale_stride, quants, geo.quant_stride, geo.nb, xp + tok * xs, xs,
                            yg + tok * ys, ys, end);
    }
    switch (n_tok - tok) {
      case 3:
        DotTiledGroup<kQ4, 3>(scales, geo.scale_stride, quants, geo.quant_stride, geo.nb, xp + tok * xs, xs,
                            yg + tok * ys, ys, end);
        break;
      case 2:
        DotTiledGroup<kQ4, 2>(scales, geo.scale_stride, quants, geo.quant_stride, geo.nb, xp + tok * xs, xs,
                            yg + tok * ys, ys, end);
        break;
      case 1:
        DotTiledGroup<kQ4, 1>(scales, geo.scale_stride, quants, geo.quant_stride, geo.nb, xp + tok * xs, xs,
                            yg + tok * ys, ys, end);
        break;
      default:
        break;
    }
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

// The float types, Q4_0, Q4_1, and the 16-row kernels' types (Q8_0, Q5_0, Q5_1, the K types).
constexpr uint64_t kDirectTypes = kFloatQ8Q4Q41Types | kAvx512Rows16Types;

const IsaKernels kTable = {kDirectTypes, kFloatQ8Q4Q41Types,
                           PrepBytes, Prep,    Dot,     DotGather,    AxpyGather,
                           RmsNorm,   Softmax, SiluMul, SparseScatter, DotChunks,
                           PrepTiled, DotTiled, GeluMul,
                           // The 16-row kernels (Q8_0 keeps 16 tokens a call: 32 were ~5% slower).
                           kAvx512Rows16Types & ~(uint64_t{1} << 8), ExpSum, AttnScores16, AttnValues};

}  // namespace

const IsaKernels* Avx512Kernels() { return &kTable; }

void SetAvx512VbmiAllowedForTesting(bool allowed) {
  __atomic_store_n(&vbmi_allowed, allowed ? 1 : 0, __ATOMIC_RELAXED);
}
bool Avx512VbmiUsed() { return Avx512VbmiEnabled(); }
void SetAvx512VbmiPairsAllowedForTesting(bool allowed) {
  __atomic_store_n(&vbmi_pairs_allowed, allowed ? 1 : 0, __ATOMIC_RELAXED);
}

}  // namespace weir::kernels::internal

#else  // not x86-64

#include "kernels/internal/avx512_vbmi.h"
#include "kernels/internal/isa_kernels.h"

namespace weir::kernels::internal {
const IsaKernels* Avx512Kernels() { return nullptr; }
void SetAvx512VbmiAllowedForTesting(bool) {}
bool Avx512VbmiUsed() { return false; }
void SetAvx512VbmiPairsAllowedForTesting(bool) {}
}  // namespace weir::kernels::internal

#endif
