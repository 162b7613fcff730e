// The "portable" path: Highway (libhwy 1.0.x) kernels. Highway compiles this file once per target
// it knows (SSSE3/SSE4/AVX2/AVX-512 on x86, NEON/SVE on ARM, a scalar emulation elsewhere) and
// picks the best one the CPU supports at run time, so a non-x86 build (phones) gets vector code
// from this file alone. It is simpler than the hand-written x86 paths: quantized blocks are widened
// to int16 and multiplied pairwise into int32 (ReorderWidenMulAccumulate), and the prepared
// activation is the plain ref layout. Q4_1 (d * q + m) multiplies its raw nibbles and adds
// m * d_x * sum(x_q) per block, from block sums computed with the activation.
//
// Like the hand-written paths, nothing here calls inline code from other headers outside
// Highway's per-target namespaces.
// The kernels keep small arrays of vectors (one accumulator per row or token), which sizeless
// vector types (Arm SVE, RISC-V V) cannot be elements of, so those targets are not built: an Arm
// CPU with SVE runs the NEON target. Defined before any Highway header (they read it).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#include <cstddef>
#include <cstdint>

#include "kernels/internal/isa_kernels.h"

// Highway re-includes this file once per target; the order of these includes matters.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/portable_hwy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace weir::kernels::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kQ = 32;
// How far ahead of the weights being multiplied the dense dot products ask for more (see
// x86_avx512.cc).
constexpr size_t kPrefetchBytes = 2048;
constexpr size_t kQ8Bytes = 34;
constexpr size_t kQ4Bytes = 18;
constexpr size_t kQ41Bytes = 20;  // Q4_1: f16 d, f16 m, 16 nibble bytes

inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Prepared activation (Q8_0 / Q4_0 / Q4_1 weights): int8 q[cols] padded to 64 bytes, then
// f32 d[nb]; for Q4_1 then f32 sx[nb] = d[b] * sum(q of block b), the min term's factor.
inline size_t QOffsetOfScales(int64_t cols) { return (static_cast<size_t>(cols) + 63) / 64 * 64; }

inline bool Int8Type(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1;
}

size_t PrepBytes(DType t, int64_t cols) {
  if (!Int8Type(t)) return 0;
  const size_t scale_arrays = t == DType::kQ4_1 ? 2 : 1;
  return QOffsetOfScales(cols) + scale_arrays * 4 * static_cast<size_t>(cols / kQ);
}

// IEEE half to float, exact (normal, subnormal, inf, nan), without branches on the common path:
// the half's exponent and mantissa moved into a float's bits read as 2^-112 times the value
// (also for subnormals, which become float subnormals), so one multiply by 2^112 fixes it.
inline float HalfToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h & 0x7fff) << 13;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  f *= 5.192296858534828e+33f;  // 2^112
  __builtin_memcpy(&bits, &f, 4);
  if ((h & 0x7c00) == 0x7c00) bits = 0x7f800000u | (static_cast<uint32_t>(h & 0x3ff) << 13);
  bits |= static_cast<uint32_t>(h & 0x8000) << 16;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

inline float LoadHalf(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return HalfToFloat(h);
}

template <DType T>
inline float Load1(const uint8_t* row, int64_t j) {
  if constexpr (T == DType::kF32) {
    float f;
    __builtin_memcpy(&f, row + 4 * j, 4);
    return f;
  } else if constexpr (T == DType::kF16) {
    return LoadHalf(row + 2 * j);
  } else {
    uint16_t h;
    __builtin_memcpy(&h, row + 2 * j, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
}

void Prep(DType t, const float* x, int64_t cols, void* out) {
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const size_t n = hn::Lanes(df);
  auto* q = static_cast<int8_t*>(out);
  auto* dx = reinterpret_cast<float*>(static_cast<uint8_t*>(out) + QOffsetOfScales(cols));
  float* sx = t == DType::kQ4_1 ? dx + cols / kQ : nullptr;
  for (int64_t b = 0; b < cols / kQ; ++b) {
    const float* xb = x + b * kQ;
    auto m = hn::Zero(df);
    for (size_t j = 0; j < kQ; j += n) m = hn::Max(m, hn::Abs(hn::LoadU(df, xb + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, m));
    const float d = amax / 127.0f;
    const auto id = hn::Set(df, d != 0 ? 1.0f / d : 0.0f);
    for (size_t j = 0; j < kQ; j += n) {
      const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), id));
      hn::StoreU(hn::DemoteTo(d8, qi), d8, q + b * kQ + j);
    }
    dx[b] = d;
    if (sx != nullptr) {
      int32_t sum = 0;
      for (int j = 0; j < kQ; ++j) sum += q[b * kQ + j];
      sx[b] = d * static_cast<float>(sum);
    }
  }
}

// The 16-bit weights j .. j + Lanes(d16) of a Q8_0 / Q4_0 / Q4_1 (kMin) block: Q4_0's nibble - 8,
// Q4_1's raw nibble (its nibbles start at byte 4), Q8_0's byte.
template <bool kQ4, bool kMin, class D16>
inline hn::Vec<D16> BlockWeights(D16 d16, const uint8_t* blk, size_t j) {
  const hn::Rebind<int8_t, D16> d8;
  const hn::Rebind<uint8_t, D16> du8;
  if constexpr (kQ4) {
    const auto raw = hn::PromoteTo(d16, hn::LoadU(du8, blk + (kMin ? 4 : 2) + (j % 16)));
    const auto nib = j < 16 ? hn::And(raw, hn::Set(d16, 15)) : hn::ShiftRight<4>(raw);
    if constexpr (kMin) return nib;
    return hn::Sub(nib, hn::Set(d16, 8));
  } else {
    return hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 2) + j));
  }
}

// kMin (Q4_1, with kQ4): 20-byte blocks; sum_b m[b] * sx[b] is kept in a scalar accumulator, in
// block order, and added to the vector sum at the end.
template <bool kQ4, int NT, bool kMin = false>
void DotQuantRow(const uint8_t* row, int64_t cols, const uint8_t* xp, size_t xs, float* y,
                 size_t ys, const uint8_t* pf_end, const uint8_t* pf_shadow) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::RepartitionToWide<decltype(d16)> d32;
  const hn::Rebind<float, decltype(d32)> df;
  const size_t n = hn::Lanes(d16);
  constexpr size_t bb = kMin ? kQ41Bytes : (kQ4 ? kQ4Bytes : kQ8Bytes);
  const int64_t nb = cols / kQ;
  const size_t d_off = QOffsetOfScales(cols);
  using VF = hn::Vec<decltype(df)>;
  using VI = hn::Vec<decltype(d32)>;
  VF acc[NT];
  float accm[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = hn::Zero(df);
    accm[t] = 0;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + static_cast<size_t>(b) * bb;
    if (blk + kPrefetchBytes < pf_end) __builtin_prefetch(blk + kPrefetchBytes, 0, kQ4 ? 3 : 2);
    if (pf_shadow) __builtin_prefetch(pf_shadow + b * bb, 0, 3);
    VI s0[NT], s1[NT];
    for (int t = 0; t < NT; ++t) s0[t] = s1[t] = hn::Zero(d32);
    for (size_t j = 0; j < static_cast<size_t>(kQ); j += n) {
      const hn::Vec<decltype(d16)> wv = BlockWeights<kQ4, kMin>(d16, blk, j);
      for (int t = 0; t < NT; ++t) {
        const auto* xq = reinterpret_cast<const int8_t*>(xp + t * xs) + b * kQ + j;
        s0[t] = hn::ReorderWidenMulAccumulate(d32, wv, hn::PromoteTo(d16, hn::LoadU(d8, xq)), s0[t],
                                              s1[t]);
      }
    }
    const float dw = LoadHalf(blk);
    for (int t = 0; t < NT; ++t) {
      const float* dxt = reinterpret_cast<const float*>(xp + t * xs + d_off);
      acc[t] = hn::MulAdd(hn::ConvertTo(df, hn::Add(s0[t], s1[t])), hn::Set(df, dw * dxt[b]),
                          acc[t]);
      if constexpr (kMin) accm[t] += LoadHalf(blk + 2) * dxt[nb + b];
    }
  }
  for (int t = 0; t < NT; ++t) y[t * ys] = hn::GetLane(hn::SumOfLanes(df, acc[t])) + accm[t];
}

template <DType T, class D>
inline hn::Vec<D> LoadN(D df, const uint8_t* row, int64_t j) {
  if constexpr (T == DType::kF32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + j);
  } else if constexpr (T == DType::kF16) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + j));
  } else {
    const hn::Rebind<hwy::bfloat16_t, D> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(row) + j));
  }
}

template <DType T, int NT>
void DotFloatRow(const uint8_t* row, int64_t cols, const float* x, size_t xs, float* y, size_t ys,
                 const uint8_t* pf_end, const uint8_t* pf_shadow) {
  const hn::ScalableTag<float> df;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  using VF = hn::Vec<decltype(df)>;
  VF acc0[NT], acc1[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = hn::Zero(df);
  int64_t j = 0;
  constexpr int64_t kBpe = T == DType::kF32 ? 4 : 2;
  for (; j + 2 * n <= cols; j += 2 * n) {
    if (row + j * kBpe + kPrefetchBytes < pf_end) {
      __builtin_prefetch(row + j * kBpe + kPrefetchBytes, 0, 2);  // to L2 (see x86_avx512.cc)
    }
    if (pf_shadow) __builtin_prefetch(pf_shadow + j * kBpe, 0, 3);
    const VF w0 = LoadN<T>(df, row, j);
    const VF w1 = LoadN<T>(df, row, j + n);
    for (int t = 0; t < NT; ++t) {
      acc0[t] = hn::MulAdd(w0, hn::LoadU(df, x + t * xs + j), acc0[t]);
      acc1[t] = hn::MulAdd(w1, hn::LoadU(df, x + t * xs + j + n), acc1[t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0[t], acc1[t])));
    for (int64_t k = j; k < cols; ++k) s += Load1<T>(row, k) * x[t * xs + k];
    y[t * ys] = s;
  }
}

template <int NT>
void DotRowTokens(DType t, const uint8_t* row, int64_t cols, const uint8_t* xp, size_t xs, float* y,
                  size_t ys, const uint8_t* pf_end, const uint8_t* pf_shadow) {
  const auto* xf = reinterpret_cast<const float*>(xp);
  switch (t) {
    case DType::kQ8_0:
      DotQuantRow<false, NT>(row, cols, xp, xs, y, ys, pf_end, pf_shadow);
      return;
    case DType::kQ4_0:
      DotQuantRow<true, NT>(row, cols, xp, xs, y, ys, pf_end, pf_shadow);
      return;
    case DType::kQ4_1:
      DotQuantRow<true, NT, true>(row, cols, xp, xs, y, ys, pf_end, pf_shadow);
      return;
    case DType::kF32:
      DotFloatRow<DType::kF32, NT>(row, cols, xf, xs / 4, y, ys, pf_end, pf_shadow);
      return;
    case DType::kF16:
      DotFloatRow<DType::kF16, NT>(row, cols, xf, xs / 4, y, ys, pf_end, pf_shadow);
      return;
    case DType::kBF16:
      DotFloatRow<DType::kBF16, NT>(row, cols, xf, xs / 4, y, ys, pf_end, pf_shadow);
      return;
    default:  // not in direct_types: internal/typed_dispatch.h never sends it
      __builtin_trap();
  }
}

// Row form of the gathered product (see x86_avx512.cc): R gathered rows per pass against one
// token, each row through exactly the operations of DotQuantRow<kQ4, 1> / DotFloatRow<T, 1> in
// the same order (so the same bits as MatVec); the activation is loaded once for the R rows and
// R independent rows are in flight. pf: R rows of a later group (or nullptr), requested block by
// block at the offsets being read.
template <bool kQ4, int R, bool kMin = false>
void DotQuantRowsGathered(const uint8_t* const* rows, int64_t cols, const uint8_t* xp,
                          float* const* y, const uint8_t* const* pf) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::RepartitionToWide<decltype(d16)> d32;
  const hn::Rebind<float, decltype(d32)> df;
  const size_t n = hn::Lanes(d16);
  constexpr size_t bb = kMin ? kQ41Bytes : (kQ4 ? kQ4Bytes : kQ8Bytes);
  const int64_t nb = cols / kQ;
  const auto* dx = reinterpret_cast<const float*>(xp + QOffsetOfScales(cols));
  using VF = hn::Vec<decltype(df)>;
  using VI = hn::Vec<decltype(d32)>;
  VF acc[R];
  float accm[R];
  for (int i = 0; i < R; ++i) {
    acc[i] = hn::Zero(df);
    accm[i] = 0;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const size_t at = static_cast<size_t>(b) * bb;
    if (pf != nullptr) {
      for (int i = 0; i < R; ++i) __builtin_prefetch(pf[i] + at, 0, 3);
    }
    VI s0[R], s1[R];
    for (int i = 0; i < R; ++i) s0[i] = s1[i] = hn::Zero(d32);
    for (size_t j = 0; j < static_cast<size_t>(kQ); j += n) {
      const auto* xb = reinterpret_cast<const int8_t*>(xp) + b * kQ + j;
      const auto xq = hn::PromoteTo(d16, hn::LoadU(d8, xb));
      for (int i = 0; i < R; ++i) {
        const hn::Vec<decltype(d16)> wv = BlockWeights<kQ4, kMin>(d16, rows[i] + at, j);
        s0[i] = hn::ReorderWidenMulAccumulate(d32, wv, xq, s0[i], s1[i]);
      }
    }
    for (int i = 0; i < R; ++i) {
      const float dw = LoadHalf(rows[i] + at);
      acc[i] =
          hn::MulAdd(hn::ConvertTo(df, hn::Add(s0[i], s1[i])), hn::Set(df, dw * dx[b]), acc[i]);
      if constexpr (kMin) accm[i] += LoadHalf(rows[i] + at + 2) * dx[nb + b];
    }
  }
  for (int i = 0; i < R; ++i) *y[i] = hn::GetLane(hn::SumOfLanes(df, acc[i])) + accm[i];
}

template <DType T, int R>
void DotFloatRowsGathered(const uint8_t* const* rows, int64_t cols, const float* x, float* const* y,
                          const uint8_t* const* pf) {
  const hn::ScalableTag<float> df;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  using VF = hn::Vec<decltype(df)>;
  constexpr int64_t kBpe = T == DType::kF32 ? 4 : 2;
  VF acc0[R], acc1[R];
  for (int i = 0; i < R; ++i) acc0[i] = acc1[i] = hn::Zero(df);
  int64_t j = 0;
  for (; j + 2 * n <= cols; j += 2 * n) {
    if (pf != nullptr) {
      for (int i = 0; i < R; ++i) __builtin_prefetch(pf[i] + j * kBpe, 0, 3);
    }
    const VF x0 = hn::LoadU(df, x + j);
    const VF x1 = hn::LoadU(df, x + j + n);
    for (int i = 0; i < R; ++i) {
      acc0[i] = hn::MulAdd(LoadN<T>(df, rows[i], j), x0, acc0[i]);
      acc1[i] = hn::MulAdd(LoadN<T>(df, rows[i], j + n), x1, acc1[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0[i], acc1[i])));
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
      DotQuantRowsGathered<false, R>(rows, cols, xb, y, pf);
      return;
    case DType::kQ4_0:
      DotQuantRowsGathered<true, R>(rows, cols, xb, y, pf);
      return;
    case DType::kQ4_1:
      DotQuantRowsGathered<true, R, true>(rows, cols, xb, y, pf);
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
  constexpr int R = 4;
  const int64_t groups_ahead =
      static_cast<int64_t>((kGatherLeadBytes + R * row_stride - 1) / (R * row_stride));
  auto row_at = [&](int64_t k) { return w + static_cast<size_t>(idx[k]) * row_stride; };
  const uint8_t* rows[R];
  const uint8_t* ahead[R];
  float* out[R];
  for (int64_t i = 0; i < Min64(groups_ahead * R, n_idx); ++i) {
    for (size_t off = 0; off < row_stride; off += 64) __builtin_prefetch(row_at(i) + off, 0, 3);
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

// One token (decode) on Q8_0 / Q4_0 / Q4_1 weights: four consecutive rows per pass through the
// gathered row kernel, which gives each row the bits of DotQuantRow with one token while unpacking
// the activation once for the four, and requests the next four rows as it reads. Measured
// (kernels_bench, 2 threads, AVX-512 target): Q4_0 14.7-15.5 -> 17.9-20.3 GB/s, Q8_0 2048x5632
// 26.6-27.0 -> 30.4-30.5 GB/s, Q8_0 5632x2048 unchanged. Float weights stay on the row-by-row loop
// (F16 5632x2048 ran 8% slower four rows at a time). Several tokens: each row against up to four.
void Dot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows, const void* xp,
         size_t xp_stride, int64_t n_tok, float* y, size_t y_stride, const uint8_t* pf) {
  const auto* x = static_cast<const uint8_t*>(xp);
  // Prefetches stay inside the rows this call reads: a gathered row's neighbours are not wanted.
  const uint8_t* end = w + static_cast<size_t>(n_rows) * row_stride;
  if (n_tok == 1 && Int8Type(t)) {
    constexpr int R = 4;
    const uint8_t* rows[R];
    const uint8_t* ahead[R];
    float* out[R];
    int64_t r = 0;
    for (; r + R <= n_rows; r += R) {
      for (int i = 0; i < R; ++i) {
        rows[i] = w + static_cast<size_t>(r + i) * row_stride;
        out[i] = y + r + i;
        // The same rows of pf, or the next group of this call's rows (the last one repeated).
        const int64_t later = Min64(r + R + i, n_rows - 1);
        ahead[i] = pf != nullptr ? pf + static_cast<size_t>(r + i) * row_stride
                                 : w + static_cast<size_t>(later) * row_stride;
      }
      DotRowsGathered<R>(t, rows, cols, xp, out, pf != nullptr || r + R < n_rows ? ahead : nullptr);
    }
    for (; r < n_rows; ++r) {
      DotRowTokens<1>(t, w + static_cast<size_t>(r) * row_stride, cols, x, 0, y + r, 0, end,
                      pf ? pf + static_cast<size_t>(r) * row_stride : nullptr);
    }
    return;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_stride;
    int64_t tok = 0;
    for (; tok + 4 <= n_tok; tok += 4) {
      DotRowTokens<4>(t, row, cols, x + tok * xp_stride, xp_stride, y + tok * y_stride + r,
                      y_stride, end, pf ? pf + static_cast<size_t>(r) * row_stride : nullptr);
    }
    for (; tok < n_tok; ++tok) {
      DotRowTokens<1>(t, row, cols, x + tok * xp_stride, xp_stride, y + tok * y_stride + r,
                      y_stride, end, pf ? pf + static_cast<size_t>(r) * row_stride : nullptr);
    }
  }
}

template <DType T, int R>
void AxpyFloatRows(const uint8_t* const* rows, const float* xs, int64_t n_out, float* acc,
                   const uint8_t* const* pf) {
  constexpr int64_t kBpe = T == DType::kF32 ? 4 : 2;
  const hn::ScalableTag<float> df;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; j + n <= n_out; j += n) {
    if (pf != nullptr) {
      for (int i = 0; i < R; ++i) __builtin_prefetch(pf[i] + j * kBpe, 0, 3);
    }
    auto a = hn::LoadU(df, acc + j);
    for (int i = 0; i < R; ++i) a = hn::MulAdd(hn::Set(df, xs[i]), LoadN<T>(df, rows[i], j), a);
    hn::StoreU(a, df, acc + j);
  }
  for (; j < n_out; ++j) {
    for (int i = 0; i < R; ++i) acc[j] += xs[i] * Load1<T>(rows[i], j);
  }
}

// Quantized column form for a group of R <= 4 rows (gather.h): per output block the R
// coefficients x[i] * d[i, b] are rounded to int8 with one scale C; the products t * q are exact
// integers, summed in f32 (exact below 2^24) and scaled once by C. The coefficients of 16 blocks
// are computed at once in vectors (two divisions per 16 blocks, not per block: the per-block
// scalar step had made this form 1.9-2.4x the dense time at full density).
template <bool kQ4, int R>
void AxpyQuantRows(const uint8_t* const* rows, const float* xs, int64_t n_out, float* acc,
                   const uint8_t* const* pf) {
  const hn::CappedTag<float, 16> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const size_t n = hn::Lanes(df);
  constexpr size_t bb = kQ4 ? kQ4Bytes : kQ8Bytes;
  constexpr int64_t kChunk = 16;  // blocks per coefficient step
  const int64_t nb = n_out / kQ;
  HWY_ALIGN hwy::float16_t half[R][kChunk];
  HWY_ALIGN float t[R][kChunk];
  HWY_ALIGN float scale[kChunk];
  for (int64_t c = 0; c < nb; c += kChunk) {
    const int64_t m = Min64(kChunk, nb - c);
    for (int i = 0; i < R; ++i) {
      for (int64_t k = 0; k < kChunk; ++k) {
        const int64_t b = k < m ? c + k : c;  // lanes past the end repeat the first block
        __builtin_memcpy(&half[i][k], rows[i] + static_cast<size_t>(b) * bb, 2);
      }
    }
    for (size_t k = 0; k < static_cast<size_t>(kChunk); k += n) {
      hn::Vec<decltype(df)> coef[R];
      auto cmax = hn::Zero(df);
      for (int i = 0; i < R; ++i) {
        coef[i] = hn::Mul(hn::Set(df, xs[i]), hn::PromoteTo(df, hn::Load(dh, &half[i][k])));
        cmax = hn::Max(cmax, hn::Abs(coef[i]));
      }
      const auto cs = hn::Div(cmax, hn::Set(df, 127.0f));
      const auto inv =
          hn::IfThenElseZero(hn::Ne(cs, hn::Zero(df)), hn::Div(hn::Set(df, 1.0f), cs));
      hn::Store(cs, df, &scale[k]);
      for (int i = 0; i < R; ++i) hn::Store(hn::Round(hn::Mul(coef[i], inv)), df, &t[i][k]);
    }
    for (int64_t k = 0; k < m; ++k) {
      const int64_t b = c + k;
      if (pf != nullptr) {
        for (int i = 0; i < R; ++i) __builtin_prefetch(pf[i] + b * bb, 0, 3);
      }
      for (size_t j = 0; j < static_cast<size_t>(kQ); j += n) {
        auto sum = hn::Zero(df);
        for (int i = 0; i < R; ++i) {
          const uint8_t* blk = rows[i] + static_cast<size_t>(b) * bb;
          hn::Vec<decltype(di)> q;
          if constexpr (kQ4) {
            const auto raw = hn::PromoteTo(di, hn::LoadU(du8, blk + 2 + (j % 16)));
            const auto nib = j < 16 ? hn::And(raw, hn::Set(di, 15)) : hn::ShiftRight<4>(raw);
            q = hn::Sub(nib, hn::Set(di, 8));
          } else {
            q = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 2) + j));
          }
          sum = hn::MulAdd(hn::Set(df, t[i][k]), hn::ConvertTo(df, q), sum);
        }
        float* aj = acc + b * kQ + j;
        hn::StoreU(hn::MulAdd(sum, hn::Set(df, scale[k]), hn::LoadU(df, aj)), df, aj);
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
  const uint8_t* rows[R];
  float xs[R];
  int64_t k = 0;
  for (; k + R <= n_idx; k += R) {
    for (int i = 0; i < R; ++i) {
      rows[i] = wt + static_cast<size_t>(idx[k + i]) * row_stride;
      xs[i] = x[idx[k + i]];
    }
    // The rows two groups ahead are requested at the pace of this group's work.
    const int64_t next = k + 2 * R;
    const uint8_t* ahead[R];
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

void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  const hn::ScalableTag<float> df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  auto s = hn::Zero(df);
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    const auto v = hn::LoadU(df, x + i);
    s = hn::MulAdd(v, v, s);
  }
  float ss = hn::GetLane(hn::SumOfLanes(df, s));
  for (int64_t k = i; k < n; ++k) ss += x[k] * x[k];
  const float scale = 1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps);
  const auto vs = hn::Set(df, scale);
  for (i = 0; i + nl <= n; i += nl) {
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + i), vs), hn::LoadU(df, weight + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

inline float Exp1(float v) {
  const hn::CappedTag<float, 1> d1;
  return hn::GetLane(hn::Exp(d1, hn::Set(d1, v)));
}

float ExpSum(float* x, int64_t n, float max);  // below, with attention's kernels

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const hn::ScalableTag<float> df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  auto mv = hn::Set(df, -__builtin_inff());
  int64_t i = 0;
  for (; i + nl <= n; i += nl) mv = hn::Max(mv, hn::LoadU(df, x + i));
  float m = hn::GetLane(hn::MaxOfLanes(df, mv));
  for (int64_t k = i; k < n; ++k) m = x[k] > m ? x[k] : m;
  const float inv = 1.0f / ExpSum(x, n, m);
  for (i = 0; i + nl <= n; i += nl) {
    hn::StoreU(hn::Mul(hn::LoadU(df, x + i), hn::Set(df, inv)), df, x + i);
  }
  for (; i < n; ++i) x[i] *= inv;
}

float ExpSum(float* x, int64_t n, float max) {
  const hn::ScalableTag<float> df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  const auto vm = hn::Set(df, max);
  auto sv = hn::Zero(df);
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vm));
    sv = hn::Add(sv, e);
    hn::StoreU(e, df, x + i);
  }
  float s = hn::GetLane(hn::SumOfLanes(df, sv));
  for (; i < n; ++i) {
    x[i] = Exp1(x[i] - max);
    s += x[i];
  }
  return s;
}

void SiluMul(float* gate, const float* up, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    const auto g = hn::LoadU(df, gate + i);
    const auto e = hn::Exp(df, hn::Neg(g));
    hn::StoreU(hn::Div(hn::Mul(g, hn::LoadU(df, up + i)), hn::Add(one, e)), df, gate + i);
  }
  for (; i < n; ++i) gate[i] = gate[i] * up[i] / (1.0f + Exp1(-gate[i]));
}

// gelu(g) u = g u / (1 + exp(-2z)), z = sqrt(2/pi) (g + 0.044715 g^3) (ops.h).
void GeluMul(float* gate, const float* up, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  const auto k = hn::Set(df, -2.0f * 0.79788456080286535588f);
  const auto c = hn::Set(df, 0.044715f);
  const auto lo = hn::Set(df, -88.0f), hi = hn::Set(df, 88.0f);
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    const auto g = hn::LoadU(df, gate + i);
    // -2z within [-88, 88]: Exp's range (beyond it the result is 0 or g u / 1.7e38 ~ 0 anyway).
    const auto z2 = hn::Min(hn::Max(hn::Mul(k, hn::MulAdd(hn::Mul(c, g), hn::Mul(g, g), g)), lo), hi);
    hn::StoreU(hn::Div(hn::Mul(g, hn::LoadU(df, up + i)), hn::Add(one, hn::Exp(df, z2))), df, gate + i);
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    const float z2 = -2.0f * 0.79788456080286535588f * (g + 0.044715f * g * g * g);
    gate[i] = g * up[i] / (1.0f + Exp1(std::min(std::max(z2, -88.0f), 88.0f)));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace weir::kernels::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace weir::kernels::internal {
namespace {

HWY_EXPORT(PrepBytes);
HWY_EXPORT(Prep);
HWY_EXPORT(Dot);
HWY_EXPORT(DotGather);
HWY_EXPORT(AxpyGather);
HWY_EXPORT(RmsNorm);
HWY_EXPORT(Softmax);
HWY_EXPORT(SiluMul);
HWY_EXPORT(GeluMul);
HWY_EXPORT(ExpSum);

size_t DispatchPrepBytes(DType t, int64_t cols) { return HWY_DYNAMIC_DISPATCH(PrepBytes)(t, cols); }
void DispatchPrep(DType t, const float* x, int64_t cols, void* out) {
  HWY_DYNAMIC_DISPATCH(Prep)(t, x, cols, out);
}
void DispatchDot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                 const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                 const uint8_t* pf) {
  HWY_DYNAMIC_DISPATCH(Dot)(t, w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
}
void DispatchDotGather(DType t, const uint8_t* w, size_t row_stride, int64_t cols,
                       const int32_t* idx, int64_t n_idx, const void* xp, float* y) {
  HWY_DYNAMIC_DISPATCH(DotGather)(t, w, row_stride, cols, idx, n_idx, xp, y);
}
void DispatchAxpyGather(DType t, const uint8_t* wt, size_t row_stride, int64_t n_out,
                        const int32_t* idx, int64_t n_idx, const float* x, float* acc) {
  HWY_DYNAMIC_DISPATCH(AxpyGather)(t, wt, row_stride, n_out, idx, n_idx, x, acc);
}
void DispatchRmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNorm)(out, x, weight, n, eps);
}
void DispatchSoftmax(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(Softmax)(x, n); }
void DispatchSiluMul(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SiluMul)(gate, up, n);
}
void DispatchGeluMul(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluMul)(gate, up, n);
}
float DispatchExpSum(float* x, int64_t n, float max) {
  return HWY_DYNAMIC_DISPATCH(ExpSum)(x, n, max);
}

const IsaKernels kTable = {kFloatQ8Q4Q41Types, kFloatQ8Q4Types,
                           DispatchPrepBytes,  DispatchPrep,    DispatchDot,     DispatchDotGather,
                           DispatchAxpyGather, DispatchRmsNorm, DispatchSoftmax, DispatchSiluMul,
                           nullptr,            nullptr,         nullptr,         nullptr,
                           DispatchGeluMul,    0,               DispatchExpSum};

}  // namespace

const IsaKernels* PortableKernels() { return &kTable; }

}  // namespace weir::kernels::internal
#endif  // HWY_ONCE
