// AVX2 kernels of Q5_0, Q5_1 and the K types over 8 rows at a time (see internal/avx2_rows8.h).
// Compiled with the AVX2 + FMA + F16C flags (src/kernels/CMakeLists.txt) and reached only through
// x86_avx2.cc's table after isa.cc found those features, so, like the other SIMD files, it calls
// no inline code from other headers (see internal/isa_kernels.h). The block layouts are described
// with the AVX-512 form in x86_avx512_rows16.cc.
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/internal/avx2_rows8.h"

namespace weir::kernels::internal {
namespace {

constexpr int kRows = 8;          // rows per pass, one per 32-bit lane
constexpr int kMaxTokens = 4;     // tokens sharing one unpacked unit (16 vector registers)
constexpr size_t kRecBytes = 64;  // one prepared record per block of 32 values
constexpr size_t kKeptBytes = 40960;

inline int64_t Pad8(int64_t n) { return (n + 7) / 8 * 8; }
inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

__attribute__((always_inline))
inline int32_t Load32(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}
__attribute__((always_inline))
inline float LoadF32(const uint8_t* p) {
  float f;
  __builtin_memcpy(&f, p, 4);
  return f;
}
// 16 bytes of row a in the low 128-bit lane, of row b in the high one.
__attribute__((always_inline))
inline __m256i Load128x2(const uint8_t* a, const uint8_t* b) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}
// The 16 bytes at off of the 8 rows as 4 vectors, z[g] holding rows g and 4 + g.
__attribute__((always_inline))
inline void LoadRows(const uint8_t* const* row, size_t off, __m256i* z) {
  for (int g = 0; g < 4; ++g) z[g] = Load128x2(row[g] + off, row[4 + g] + off);
}
// In each 128-bit lane k, the 4 x 4 dword transpose: out[j] lane k dword g = in[g] lane k dword
// j. After LoadRows, out[j] lane 4k + g is dword j of row 4k + g: rows in lane order.
__attribute__((always_inline))
inline void Transpose4(const __m256i* in, __m256i* out) {
  const __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]);
  const __m256i t1 = _mm256_unpackhi_epi32(in[0], in[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]);
  const __m256i t3 = _mm256_unpackhi_epi32(in[2], in[3]);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}
// The low f16 of each 32-bit lane as f32.
__attribute__((always_inline))
inline __m256 LowHalves(__m256i words) {
  words = _mm256_and_si256(words, _mm256_set1_epi32(0xffff));
  const __m256i packed =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(words, _mm256_setzero_si256()), 0x08);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}

// Where a token's activation values v .. v + 3 are (v < cols), its dx and its 16-value sums.
__attribute__((always_inline))
inline const uint8_t* ActAt(const uint8_t* xt, int64_t v) {
  return xt + static_cast<size_t>(v / 32) * kRecBytes + static_cast<size_t>(v % 32);
}
__attribute__((always_inline))
inline float DxAt(const uint8_t* xt, int64_t nb, int64_t block) {
  return LoadF32(xt + static_cast<size_t>(nb) * kRecBytes + 4 * static_cast<size_t>(block));
}
__attribute__((always_inline))
inline int32_t Sum16At(const uint8_t* xt, int64_t nb, int64_t half) {
  return Load32(xt + static_cast<size_t>(nb) * kRecBytes + static_cast<size_t>(Pad8(nb)) * 4 +
                4 * static_cast<size_t>(half));
}

enum class From { kRows, kRowsKeep, kKept };

__attribute__((always_inline))
inline void Request8(const uint8_t* const* rows, size_t at, int hint) {
  for (int i = 0; i < kRows; ++i) {
    if (hint == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[i] + at), _MM_HINT_T0);
    } else {
      _mm_prefetch(reinterpret_cast<const char*>(rows[i] + at), _MM_HINT_T1);
    }
  }
}

// Integer sums of NT tokens over one unit of 4 kDwords values: s[t] = init[t] + sum_j v[j] .
// x_t(values 4j..4j+3), x_t's values at q[t]. The 16-bit pair sums of vpmaddubsw are added kAdd
// at a time before vpmaddwd widens them (kAdd * 2 * max|w| * 127 < 2^15).
template <int NT, int kDwords, int kAdd>
inline void UnitSums(const __m256i* v, const uint8_t* const* q, const __m256i* init, __m256i* s) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int t = 0; t < NT; ++t) {
    __m256i acc = init[t];
    for (int j0 = 0; j0 < kDwords; j0 += kAdd) {
      __m256i p = _mm256_maddubs_epi16(v[j0], _mm256_set1_epi32(Load32(q[t] + 4 * j0)));
      for (int j = j0 + 1; j < j0 + kAdd; ++j) {
        p = _mm256_add_epi16(p,
                             _mm256_maddubs_epi16(v[j], _mm256_set1_epi32(Load32(q[t] + 4 * j))));
      }
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones16));
    }
    s[t] = acc;
  }
}

// Sets bit 4 of value i of each lane's 32 (v[0..7]: values 4j .. 4j + 3 in v[j]) where bit i of
// the lane's qh is set: the fifth bit of Q5_0 / Q5_1.
__attribute__((always_inline))
inline void AddFifthBits(__m256i qh, __m256i* v) {
  // Vector j's values 4j + b: byte j / 2 of qh, bit 4 (j & 1) + b.
  const __m256i base = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0,
                                        0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
  const __m256i bits[2] = {_mm256_set1_epi32(0x08040201),
                           _mm256_set1_epi32(static_cast<int>(0x80402010u))};
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (int j = 0; j < 8; ++j) {
    const __m256i spread = _mm256_shuffle_epi8(
        qh, _mm256_add_epi8(base, _mm256_set1_epi8(static_cast<char>(j / 2))));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits[j & 1]), bits[j & 1]);
    v[j] = _mm256_or_si256(v[j], _mm256_and_si256(set, sixteen));
  }
}

// Bit k (0..7) of every byte of x moved to bit `to` (0..7), the other bits cleared. 16-bit shifts
// are exact here: the bit that lands on `to` comes from the same byte.
__attribute__((always_inline))
inline __m256i BitTo(__m256i x, int k, int to) {
  const __m256i moved = k <= to ? _mm256_slli_epi16(x, to - k) : _mm256_srli_epi16(x, k - to);
  return _mm256_and_si256(moved, _mm256_set1_epi8(static_cast<char>(1 << to)));
}

// ---------------------------------------------------------------------------------------------
struct Q50 {
  static constexpr size_t kBlockBytes = 22;
  static constexpr int64_t kBlockValues = 32;
  struct Unpacked {
    __m256i v[8];
    __m256 d;
  };
  static void Request(const uint8_t* const* rows, int64_t b, int64_t nb, int hint) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    if ((b & 1) == 0) {
      Request8(rows, off, hint);
    } else if (b == nb - 1) {
      Request8(rows, off + kBlockBytes - 1, hint);
    }
  }
  // Inlined into the pass (out of line, Q4_K's decode ran ~9 % slower).
  __attribute__((always_inline)) static void Unpack(const uint8_t* const* row, size_t off,
                                                    Unpacked* u) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    __m256i z[4], lo[4], hi[4], head[4];
    LoadRows(row, off + 6, z);
    for (int g = 0; g < 4; ++g) {
      lo[g] = _mm256_and_si256(z[g], nib);
      hi[g] = _mm256_and_si256(_mm256_srli_epi16(z[g], 4), nib);
    }
    Transpose4(lo, u->v);
    Transpose4(hi, u->v + 4);
    LoadRows(row, off, head);
    const __m256i t0 = _mm256_unpacklo_epi32(head[0], head[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(head[2], head[3]);
    const __m256i w0 = _mm256_unpacklo_epi64(t0, t2);  // d | qh << 16
    const __m256i w1 = _mm256_unpackhi_epi64(t0, t2);  // qh >> 16 | ...
    u->d = LowHalves(w0);
    AddFifthBits(_mm256_or_si256(_mm256_srli_epi32(w0, 16), _mm256_slli_epi32(w1, 16)), u->v);
  }
  template <int NT>
  static void Step(const Unpacked& u, int64_t b, int64_t nb, const uint8_t* xp, size_t xs,
                   __m256* acc) {
    const uint8_t* q[NT];
    __m256i init[NT], s[NT];
    for (int t = 0; t < NT; ++t) {
      const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
      q[t] = ActAt(xt, b * 32);
      init[t] = _mm256_set1_epi32(-16 * (Sum16At(xt, nb, 2 * b) + Sum16At(xt, nb, 2 * b + 1)));
    }
    UnitSums<NT, 8, 4>(u.v, q, init, s);  // 4 * 2 * 31 * 127 < 2^15
    for (int t = 0; t < NT; ++t) {
      const float dx = DxAt(xp + static_cast<size_t>(t) * xs, nb, b);
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(u.d, _mm256_set1_ps(dx)), acc[t]);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Q5_1: Q5_0's values without the offset (q = 0..31, value = d q + m); the min term adds
// m * dx * sum(x_q) per block.
struct Q51 {
  static constexpr size_t kBlockBytes = 24;
  static constexpr int64_t kBlockValues = 32;
  struct Unpacked {
    __m256i v[8];
    __m256 d;
    __m256 m;
  };
  static void Request(const uint8_t* const* rows, int64_t b, int64_t nb, int hint) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    if ((b & 1) == 0) {
      Request8(rows, off, hint);
    } else if (b == nb - 1) {
      Request8(rows, off + kBlockBytes - 1, hint);
    }
  }
  // Inlined into the pass (out of line, Q4_K's decode ran ~9 % slower).
  __attribute__((always_inline)) static void Unpack(const uint8_t* const* row, size_t off,
                                                    Unpacked* u) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    __m256i z[4], lo[4], hi[4], head[4];
    LoadRows(row, off + 8, z);
    for (int g = 0; g < 4; ++g) {
      lo[g] = _mm256_and_si256(z[g], nib);
      hi[g] = _mm256_and_si256(_mm256_srli_epi16(z[g], 4), nib);
    }
    Transpose4(lo, u->v);
    Transpose4(hi, u->v + 4);
    LoadRows(row, off, head);
    const __m256i t0 = _mm256_unpacklo_epi32(head[0], head[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(head[2], head[3]);
    const __m256i w0 = _mm256_unpacklo_epi64(t0, t2);  // d | m << 16
    const __m256i w1 = _mm256_unpackhi_epi64(t0, t2);  // qh
    u->d = LowHalves(w0);
    u->m = LowHalves(_mm256_srli_epi32(w0, 16));
    AddFifthBits(w1, u->v);
  }
  template <int NT>
  static void Step(const Unpacked& u, int64_t b, int64_t nb, const uint8_t* xp, size_t xs,
                   __m256* acc) {
    const uint8_t* q[NT];
    __m256i init[NT], s[NT];
    for (int t = 0; t < NT; ++t) {
      q[t] = ActAt(xp + static_cast<size_t>(t) * xs, b * 32);
      init[t] = _mm256_setzero_si256();
    }
    UnitSums<NT, 8, 4>(u.v, q, init, s);  // 4 * 2 * 31 * 127 < 2^15
    for (int t = 0; t < NT; ++t) {
      const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
      const float dx = DxAt(xt, nb, b);
      const float sx = dx * static_cast<float>(Sum16At(xt, nb, 2 * b) + Sum16At(xt, nb, 2 * b + 1));
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(u.d, _mm256_set1_ps(dx)), acc[t]);
      acc[t] = _mm256_fmadd_ps(u.m, _mm256_set1_ps(sx), acc[t]);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Q4_K, and (kFive) Q5_K: the fifth bit of value l of sub-block j at qh[l] bit j (qh: the 32
// bytes after the scales; qs start at 48).
template <bool kFive>
struct Q4KT {
  static constexpr size_t kBlockBytes = kFive ? 176 : 144;
  static constexpr size_t kQsOffset = kFive ? 48 : 16;
  static constexpr int64_t kBlockValues = 256;
  struct Unpacked {
    __m256i v[64];  // sub-block k: v[8 k .. 8 k + 7]
    __m256 d1[8];
    __m256 m1[8];
  };
  static void Request(const uint8_t* const* rows, int64_t b, int64_t, int hint) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    for (size_t at = 0; at < kBlockBytes; at += 64) Request8(rows, off + at, hint);
    Request8(rows, off + kBlockBytes - 1, hint);
  }
  // Inlined into the pass (out of line, Q4_K's decode ran ~9 % slower).
  __attribute__((always_inline)) static void Unpack(const uint8_t* const* row, size_t off,
                                                    Unpacked* u) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    __m256i z[4], t[4], h5[8];
    if constexpr (kFive) {
      for (int h = 0; h < 2; ++h) {
        LoadRows(row, off + 16 + 16 * static_cast<size_t>(h), z);
        Transpose4(z, h5 + 4 * h);  // h5[4h + j]: qh bytes 16h + 4j .. + 3
      }
    }
    for (int p = 0; p < 4; ++p) {
      for (int h = 0; h < 2; ++h) {
        LoadRows(row, off + kQsOffset + 32 * static_cast<size_t>(p) + 16 * static_cast<size_t>(h),
                 z);
        Transpose4(z, t);
        for (int j = 0; j < 4; ++j) {
          __m256i lo = _mm256_and_si256(t[j], nib);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(t[j], 4), nib);
          if constexpr (kFive) {
            lo = _mm256_or_si256(lo, BitTo(h5[4 * h + j], 2 * p, 4));
            hi = _mm256_or_si256(hi, BitTo(h5[4 * h + j], 2 * p + 1, 4));
          }
          u->v[16 * p + 4 * h + j] = lo;
          u->v[16 * p + 8 + 4 * h + j] = hi;
        }
      }
    }
    LoadRows(row, off, z);
    Transpose4(z, t);  // t[0] = d | dmin << 16, t[1..3] = the scale words u0, u1, u2
    const __m256 d = LowHalves(t[0]);
    const __m256 dmin = LowHalves(_mm256_srli_epi32(t[0], 16));
    const __m256i six = _mm256_set1_epi32(0x3f3f3f3f);
    const __m256i four = _mm256_set1_epi32(0x0f0f0f0f);
    const __m256i two = _mm256_set1_epi32(0x03030303);
    const __m256i sc_lo = _mm256_and_si256(t[1], six);
    const __m256i m_lo = _mm256_and_si256(t[2], six);
    const __m256i sc_hi =
        _mm256_or_si256(_mm256_and_si256(t[3], four),
                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(t[1], 6), two), 4));
    const __m256i m_hi =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(t[3], 4), four),
                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(t[2], 6), two), 4));
    const __m256i byte = _mm256_set1_epi32(0xff);
    for (int k = 0; k < 4; ++k) {
      const auto field = [&](__m256i w) {
        return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 8 * k), byte));
      };
      u->d1[k] = _mm256_mul_ps(d, field(sc_lo));
      u->d1[4 + k] = _mm256_mul_ps(d, field(sc_hi));
      u->m1[k] = _mm256_mul_ps(dmin, field(m_lo));
      u->m1[4 + k] = _mm256_mul_ps(dmin, field(m_hi));
    }
  }
  template <int NT>
  static void Step(const Unpacked& u, int64_t b, int64_t nb, const uint8_t* xp, size_t xs,
                   __m256* acc) {
    for (int k = 0; k < 8; ++k) {
      const int64_t block = 8 * b + k;
      const uint8_t* q[NT];
      __m256i init[NT], s[NT];
      for (int t = 0; t < NT; ++t) {
        q[t] = ActAt(xp + static_cast<size_t>(t) * xs, block * 32);
        init[t] = _mm256_setzero_si256();
      }
      // Q4_K 8 * 2 * 15 * 127 < 2^15; Q5_K 4 * 2 * 31 * 127.
      UnitSums<NT, 8, kFive ? 4 : 8>(u.v + 8 * k, q, init, s);
      for (int t = 0; t < NT; ++t) {
        const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
        const float dx = DxAt(xt, nb, block);
        const float sx =
            dx * static_cast<float>(Sum16At(xt, nb, 2 * block) + Sum16At(xt, nb, 2 * block + 1));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]),
                                 _mm256_mul_ps(u.d1[k], _mm256_set1_ps(dx)), acc[t]);
        acc[t] = _mm256_fnmadd_ps(u.m1[k], _mm256_set1_ps(sx), acc[t]);
      }
    }
  }
};
using Q4K = Q4KT<false>;
using Q5K = Q4KT<true>;

// ---------------------------------------------------------------------------------------------
struct Q6K {
  static constexpr size_t kBlockBytes = 210;
  static constexpr int64_t kBlockValues = 256;
  struct Unpacked {
    __m256i v[64];  // sub-block u (16 values): v[4 u .. 4 u + 3]
    __m256 d1[16];
  };
  static void Request(const uint8_t* const* rows, int64_t b, int64_t, int hint) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    for (size_t at = 0; at < kBlockBytes; at += 64) Request8(rows, off + at, hint);
    Request8(rows, off + kBlockBytes - 1, hint);
  }
  static void Unpack(const uint8_t* const* row, size_t off, Unpacked* u) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const __m256i top = _mm256_set1_epi8(0x30);
    __m256i z[4], a[4], b[4], q[4];
    for (int h = 0; h < 2; ++h) {
      for (int m = 0; m < 2; ++m) {
        const size_t at_a = off + 64 * static_cast<size_t>(h) + 16 * static_cast<size_t>(m);
        LoadRows(row, at_a, z);
        Transpose4(z, a);
        LoadRows(row, at_a + 32, z);
        Transpose4(z, b);
        LoadRows(row, off + 128 + 32 * static_cast<size_t>(h) + 16 * static_cast<size_t>(m), z);
        Transpose4(z, q);
        const int u0 = 8 * h + m;  // sub-blocks u0, u0 + 2, u0 + 4, u0 + 6
        for (int j = 0; j < 4; ++j) {
          u->v[4 * u0 + j] = _mm256_or_si256(_mm256_and_si256(a[j], nib),
                                             _mm256_and_si256(_mm256_slli_epi16(q[j], 4), top));
          u->v[4 * (u0 + 2) + j] = _mm256_or_si256(
              _mm256_and_si256(b[j], nib), _mm256_and_si256(_mm256_slli_epi16(q[j], 2), top));
          u->v[4 * (u0 + 4) + j] = _mm256_or_si256(
              _mm256_and_si256(_mm256_srli_epi16(a[j], 4), nib), _mm256_and_si256(q[j], top));
          u->v[4 * (u0 + 6) + j] =
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b[j], 4), nib),
                              _mm256_and_si256(_mm256_srli_epi16(q[j], 2), top));
        }
      }
    }
    __m256i t[4];
    LoadRows(row, off + 192, z);
    Transpose4(z, t);  // t[j] lane r: scales 4j .. 4j + 3 of row r
    LoadRows(row, off + 194, z);
    const __m256i w3 =
        _mm256_unpackhi_epi64(_mm256_unpackhi_epi32(z[0], z[1]), _mm256_unpackhi_epi32(z[2], z[3]));
    const __m256 d = LowHalves(_mm256_srli_epi32(w3, 16));
    for (int s = 0; s < 16; ++s) {
      const __m256i sc = _mm256_srai_epi32(_mm256_slli_epi32(t[s / 4], 24 - 8 * (s % 4)), 24);
      u->d1[s] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
    }
  }
  template <int NT>
  static void Step(const Unpacked& u, int64_t b, int64_t nb, const uint8_t* xp, size_t xs,
                   __m256* acc) {
    for (int s = 0; s < 16; ++s) {
      const int64_t half = 16 * b + s;  // 16-value group of the row
      const uint8_t* q[NT];
      __m256i init[NT], sums[NT];
      for (int t = 0; t < NT; ++t) {
        const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
        q[t] = ActAt(xt, half * 16);
        init[t] = _mm256_set1_epi32(-32 * Sum16At(xt, nb, half));
      }
      UnitSums<NT, 4, 2>(u.v + 4 * s, q, init, sums);  // 2 * 2 * 63 * 127 < 2^15
      for (int t = 0; t < NT; ++t) {
        const float dx = DxAt(xp + static_cast<size_t>(t) * xs, nb, half / 2);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[t]),
                                 _mm256_mul_ps(u.d1[s], _mm256_set1_ps(dx)), acc[t]);
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Q3_K and (kQ2) Q2_K, as x86_avx512_rows16.cc's Q23K: 16 sub-blocks of 16, u = 8h + 2s + part
// for values 128h + 32s + 16 part + i; Q3_K's unsigned q = 2 low bits | hmask bit << 2 with the
// offset 4 taken out by -4 * sum16, Q2_K's min term dmin m * dx * sum16.
template <bool kQ2>
struct Q23K {
  static constexpr size_t kBlockBytes = kQ2 ? 84 : 110;
  static constexpr size_t kQsOffset = kQ2 ? 16 : 32;
  static constexpr int64_t kBlockValues = 256;
  struct Unpacked {
    __m256i v[64];  // sub-block u (16 values): v[4 u .. 4 u + 3]
    __m256 d1[16];
    __m256 m1[16];  // Q2_K only
  };
  static void Request(const uint8_t* const* rows, int64_t b, int64_t, int hint) {
    const size_t off = static_cast<size_t>(b) * kBlockBytes;
    for (size_t at = 0; at < kBlockBytes; at += 64) Request8(rows, off + at, hint);
    Request8(rows, off + kBlockBytes - 1, hint);
  }
  static void Unpack(const uint8_t* const* row, size_t off, Unpacked* u) {
    const __m256i three = _mm256_set1_epi8(3);
    __m256i z[4], t[4], hm[4];
    for (int part = 0; part < 2; ++part) {
      if constexpr (!kQ2) {
        LoadRows(row, off + 16 * static_cast<size_t>(part), z);
        Transpose4(z, hm);
      }
      for (int h = 0; h < 2; ++h) {
        const size_t at = 32 * static_cast<size_t>(h) + 16 * static_cast<size_t>(part);
        LoadRows(row, off + kQsOffset + at, z);
        Transpose4(z, t);
        for (int s = 0; s < 4; ++s) {
          const int sub = 8 * h + 2 * s + part;
          for (int j = 0; j < 4; ++j) {
            __m256i q = _mm256_and_si256(s == 0 ? t[j] : _mm256_srli_epi16(t[j], 2 * s), three);
            if constexpr (!kQ2) q = _mm256_or_si256(q, BitTo(hm[j], 4 * h + s, 2));
            u->v[4 * sub + j] = q;
          }
        }
      }
    }
    const __m256i byte = _mm256_set1_epi32(0xff);
    if constexpr (kQ2) {
      LoadRows(row, off, z);
      Transpose4(z, t);  // t[j] lane r: scales 4j .. 4j + 3 of row r
      LoadRows(row, off + 68, z);
      const __m256i w3 = _mm256_unpackhi_epi64(_mm256_unpackhi_epi32(z[0], z[1]),
                                               _mm256_unpackhi_epi32(z[2], z[3]));
      const __m256 d = LowHalves(w3);
      const __m256 dmin = LowHalves(_mm256_srli_epi32(w3, 16));
      const __m256i nib = _mm256_set1_epi32(0x0f);
      for (int s = 0; s < 16; ++s) {
        const __m256i sc = _mm256_and_si256(_mm256_srli_epi32(t[s / 4], 8 * (s % 4)), byte);
        u->d1[s] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(sc, nib)));
        u->m1[s] = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(sc, 4)));
      }
    } else {
      // Bytes 94..109: a = scales[0..3], bb = scales[4..7], c = scales[8..11], d on top of t[3].
      LoadRows(row, off + 94, z);
      Transpose4(z, t);
      const __m256i a = _mm256_or_si256(_mm256_srli_epi32(t[0], 16), _mm256_slli_epi32(t[1], 16));
      const __m256i bb = _mm256_or_si256(_mm256_srli_epi32(t[1], 16), _mm256_slli_epi32(t[2], 16));
      const __m256i c = _mm256_or_si256(_mm256_srli_epi32(t[2], 16), _mm256_slli_epi32(t[3], 16));
      const __m256 d = LowHalves(_mm256_srli_epi32(t[3], 16));
      const __m256i four = _mm256_set1_epi32(0x0f0f0f0f);
      const __m256i two = _mm256_set1_epi32(0x03030303);
      const __m256i low[4] = {_mm256_and_si256(a, four), _mm256_and_si256(bb, four),
                              _mm256_and_si256(_mm256_srli_epi32(a, 4), four),
                              _mm256_and_si256(_mm256_srli_epi32(bb, 4), four)};
      const __m256i thirty_two = _mm256_set1_epi32(32);
      for (int g = 0; g < 4; ++g) {
        const __m256i sc = _mm256_or_si256(
            low[g], _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(c, 2 * g), two), 4));
        for (int k = 0; k < 4; ++k) {
          const __m256i f = _mm256_and_si256(_mm256_srli_epi32(sc, 8 * k), byte);
          u->d1[4 * g + k] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(f, thirty_two)));
        }
      }
    }
  }
  template <int NT>
  static void Step(const Unpacked& u, int64_t b, int64_t nb, const uint8_t* xp, size_t xs,
                   __m256* acc) {
    for (int s = 0; s < 16; ++s) {
      const int64_t half = 16 * b + s;  // 16-value group of the row
      const uint8_t* q[NT];
      __m256i init[NT], sums[NT];
      for (int t = 0; t < NT; ++t) {
        const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
        q[t] = ActAt(xt, half * 16);
        init[t] = kQ2 ? _mm256_setzero_si256() : _mm256_set1_epi32(-4 * Sum16At(xt, nb, half));
      }
      UnitSums<NT, 4, 4>(u.v + 4 * s, q, init, sums);  // 4 * 2 * 7 * 127 < 2^15
      for (int t = 0; t < NT; ++t) {
        const uint8_t* xt = xp + static_cast<size_t>(t) * xs;
        const float dx = DxAt(xt, nb, half / 2);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[t]),
                                 _mm256_mul_ps(u.d1[s], _mm256_set1_ps(dx)), acc[t]);
        if constexpr (kQ2) {
          const float sx = dx * static_cast<float>(Sum16At(xt, nb, half));
          acc[t] = _mm256_fnmadd_ps(u.m1[s], _mm256_set1_ps(sx), acc[t]);
        }
      }
    }
  }
};
using Q3K = Q23K<false>;
using Q2K = Q23K<true>;

// ---------------------------------------------------------------------------------------------
// What a pass requests for later, spread over its blocks: a span of lines (dense) or 8 rows of
// row_lines lines, row after row (gather), as in x86_avx512_rows16.cc.
struct Ahead {
  const uint8_t* span = nullptr;
  const uint8_t* const* rows = nullptr;
  int64_t row_lines = 0;
  int64_t row_end = 0;  // offset of a row's last byte
  int64_t lines = 0;
};

// Rows row[0..7] (nblk blocks of K) against NT tokens: acc[t] lane r = row r · x_t. nb: the
// rows' 32-value blocks (for the activation's layout).
template <class K, int NT, From kFrom>
void Group(const uint8_t* const* row, int64_t nblk, const uint8_t* xp, size_t xs,
           const Ahead& ahead, const uint8_t* const* shadow, typename K::Unpacked* kept,
           __m256* acc) {
  const int64_t nb = nblk * K::kBlockValues / 32;
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  typename K::Unpacked local;
  for (int64_t b = 0; b < nblk; ++b) {
    for (int64_t l = b * ahead.lines / nblk; l < (b + 1) * ahead.lines / nblk; ++l) {
      const uint8_t* p =
          ahead.span != nullptr
              ? ahead.span + 64 * l
              : ahead.rows[l / ahead.row_lines] + Min64(64 * (l % ahead.row_lines), ahead.row_end);
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
    }
    if (shadow != nullptr) K::Request(shadow, b, nblk, 0);
    const typename K::Unpacked* u = &local;
    if constexpr (kFrom == From::kKept) {
      u = &kept[b];
    } else if constexpr (kFrom == From::kRowsKeep) {
      K::Unpack(row, static_cast<size_t>(b) * K::kBlockBytes, &kept[b]);
      u = &kept[b];
    } else {
      K::Unpack(row, static_cast<size_t>(b) * K::kBlockBytes, &local);
    }
    K::template Step<NT>(*u, b, nb, xp, xs, acc);
  }
}

template <class K, From kFrom>
void GroupTokens(int nt, const uint8_t* const* row, int64_t nblk, const uint8_t* xp, size_t xs,
                 const Ahead& ahead, const uint8_t* const* shadow, typename K::Unpacked* kept,
                 __m256* acc) {
  switch (nt) {
    case 4:
      Group<K, 4, kFrom>(row, nblk, xp, xs, ahead, shadow, kept, acc);
      return;
    case 3:
      Group<K, 3, kFrom>(row, nblk, xp, xs, ahead, shadow, kept, acc);
      return;
    case 2:
      Group<K, 2, kFrom>(row, nblk, xp, xs, ahead, shadow, kept, acc);
      return;
    default:
      Group<K, 1, kFrom>(row, nblk, xp, xs, ahead, shadow, kept, acc);
      return;
  }
}

inline void StoreRows(float* y, int64_t n, __m256 v) {
  alignas(32) float out[kRows];
  _mm256_store_ps(out, v);
  for (int64_t i = 0; i < n; ++i) y[i] = out[i];
}

template <class K>
void Rows8Dot(const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows, const void* xp,
              size_t xp_stride, int64_t n_tok, float* y, size_t y_stride, const uint8_t* pf) {
  using U = typename K::Unpacked;
  constexpr int64_t kKeptBlocks = static_cast<int64_t>(kKeptBytes / sizeof(U));
  const auto* x = static_cast<const uint8_t*>(xp);
  const int64_t nblk = cols / K::kBlockValues;
  const uint8_t* row[kRows];
  const uint8_t* shadow[kRows];
  __m256 acc[kMaxTokens];
  alignas(32) U kept[kKeptBlocks];
  const bool keep = n_tok > kMaxTokens && nblk <= kKeptBlocks;
  const uint8_t* end = w + static_cast<size_t>(n_rows) * row_stride;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const int64_t n = Min64(kRows, n_rows - r0);
    for (int i = 0; i < kRows; ++i) {
      const size_t r = static_cast<size_t>(r0 + Min64(i, n - 1));
      row[i] = w + r * row_stride;
      if (pf != nullptr) shadow[i] = pf + r * row_stride;
    }
    Ahead ahead;
    if (r0 + kRows < n_rows) {
      ahead.span = w + static_cast<size_t>(r0 + kRows) * row_stride;
      const size_t bytes = static_cast<size_t>(end - ahead.span);
      ahead.lines = static_cast<int64_t>(
          ((bytes < kRows * row_stride ? bytes : kRows * row_stride) + 63) / 64);
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += kMaxTokens) {
      const int nt = static_cast<int>(Min64(kMaxTokens, n_tok - t0));
      const uint8_t* xt = x + static_cast<size_t>(t0) * xp_stride;
      if (t0 == 0) {
        const uint8_t* const* sh = pf != nullptr ? shadow : nullptr;
        if (keep) {
          GroupTokens<K, From::kRowsKeep>(nt, row, nblk, xt, xp_stride, ahead, sh, kept, acc);
        } else {
          GroupTokens<K, From::kRows>(nt, row, nblk, xt, xp_stride, ahead, sh, nullptr, acc);
        }
      } else if (keep) {
        GroupTokens<K, From::kKept>(nt, row, nblk, xt, xp_stride, Ahead{}, nullptr, kept, acc);
      } else {
        GroupTokens<K, From::kRows>(nt, row, nblk, xt, xp_stride, Ahead{}, nullptr, nullptr, acc);
      }
      for (int t = 0; t < nt; ++t) {
        StoreRows(y + static_cast<size_t>(t0 + t) * y_stride + r0, n, acc[t]);
      }
    }
  }
}

template <class K>
void Rows8Gather(const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
                 int64_t n_idx, const void* xp, float* y) {
  const auto* x = static_cast<const uint8_t*>(xp);
  const int64_t nblk = cols / K::kBlockValues;
  const uint8_t* row[kRows];
  const uint8_t* ahead[kRows];
  alignas(32) float out[kRows];
  for (int64_t k0 = 0; k0 < n_idx; k0 += kRows) {
    const int64_t n = Min64(kRows, n_idx - k0);
    for (int i = 0; i < kRows; ++i) {
      row[i] = w + static_cast<size_t>(idx[k0 + Min64(i, n - 1)]) * row_stride;
    }
    const int64_t next = k0 + kRows;
    Ahead a;
    if (next < n_idx) {
      for (int i = 0; i < kRows; ++i) {
        ahead[i] = w + static_cast<size_t>(idx[Min64(next + i, n_idx - 1)]) * row_stride;
      }
      a.rows = ahead;
      const int64_t bytes = nblk * static_cast<int64_t>(K::kBlockBytes);
      a.row_lines = (bytes + 63) / 64 + 1;
      a.row_end = bytes - 1;
      a.lines = kRows * a.row_lines;
    }
    __m256 acc;
    Group<K, 1, From::kRows>(row, nblk, x, 0, a, nullptr, nullptr, &acc);
    _mm256_store_ps(out, acc);
    for (int i = 0; i < n; ++i) y[idx[k0 + i]] = out[i];
  }
}

}  // namespace

bool Avx2Rows8Type(DType t) { return ((kAvx2Rows8Types >> static_cast<uint32_t>(t)) & 1u) != 0; }

void Avx2Rows8Dot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                  const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                  const uint8_t* pf) {
  switch (t) {
    case DType::kQ5_0:
      return Rows8Dot<Q50>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ5_1:
      return Rows8Dot<Q51>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ2_K:
      return Rows8Dot<Q2K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ3_K:
      return Rows8Dot<Q3K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ4_K:
      return Rows8Dot<Q4K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ5_K:
      return Rows8Dot<Q5K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    case DType::kQ6_K:
      return Rows8Dot<Q6K>(w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    default:  // not in kAvx2Rows8Types: never sent here
      __builtin_trap();
  }
}

void Avx2Rows8Gather(DType t, const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
                     int64_t n_idx, const void* xp, float* y) {
  switch (t) {
    case DType::kQ5_0:
      return Rows8Gather<Q50>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ5_1:
      return Rows8Gather<Q51>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ2_K:
      return Rows8Gather<Q2K>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ3_K:
      return Rows8Gather<Q3K>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ4_K:
      return Rows8Gather<Q4K>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ5_K:
      return Rows8Gather<Q5K>(w, row_stride, cols, idx, n_idx, xp, y);
    case DType::kQ6_K:
      return Rows8Gather<Q6K>(w, row_stride, cols, idx, n_idx, xp, y);
    default:  // not in kAvx2Rows8Types: never sent here
      __builtin_trap();
  }
}

}  // namespace weir::kernels::internal

#else  // not x86-64

#include "kernels/internal/avx2_rows8.h"

namespace weir::kernels::internal {
bool Avx2Rows8Type(DType) { return false; }
void Avx2Rows8Dot(DType, const uint8_t*, size_t, int64_t, int64_t, const void*, size_t, int64_t,
                  float*, size_t, const uint8_t*) {}
void Avx2Rows8Gather(DType, const uint8_t*, size_t, int64_t, const int32_t*, int64_t, const void*,
                     float*) {}
}  // namespace weir::kernels::internal

#endif
