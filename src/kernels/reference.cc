// Scalar reference kernels (kernels::ref) and the "scalar" path's table built from them. These are
// written for clarity: one value at a time, f32 accumulation in index order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/gather.h"
#include "kernels/internal/isa_kernels.h"
#include "kernels/internal/typed_dispatch.h"
#include "kernels/matvec.h"
#include "kernels/ops.h"
#include "tensor/quant_iq4.h"
#include "tensor/quant_kquants.h"
#include "tensor/quantize.h"

namespace weir::kernels {
namespace {

using internal::kGatherGroup;

size_t RoundUp64(size_t n) { return (n + 63) / 64 * 64; }

// Whether t's products run on the int8-quantized activation (every block-quantized type).
bool Int8Dot(DType t) { return Traits(t).dot == DotKind::kInt8Block; }

// Weight value j of a row of type t (any type), as f32: the value DequantizeRow gives.
float WeightAt(DType t, const uint8_t* row, int64_t j) {
  switch (t) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, row + 4 * j, 4);
      return v;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * j, 2);
      return F16ToF32(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * j, 2);
      return BF16ToF32(h);
    }
    default: {
      const DTypeTraits& tr = Traits(t);
      float block[kQK_K];
      tr.dequantize_row(row + static_cast<size_t>(j / tr.block_size) * tr.block_bytes, block,
                        tr.block_size);
      return block[j % tr.block_size];
    }
  }
}

// Integer weight j (0..31) of a Q8_0 / Q4_0 block (the column form's types): Q8_0 q, Q4_0
// nibble - 8.
int QuantAt(DType t, const uint8_t* block, int j) {
  if (t == DType::kQ8_0) return reinterpret_cast<const BlockQ8_0*>(block)->qs[j];
  const uint8_t* qs = reinterpret_cast<const BlockQ4_0*>(block)->qs;
  const int q = j < kQK / 2 ? (qs[j] & 0x0f) : (qs[j - kQK / 2] >> 4);
  return q - 8;
}

// The part of a row of an int8-dot type that one 32-value activation block meets: its integer
// weights and, per sub-block of `sub` values (32, or 16 for Q6_K), the f32 scale d and offset m
// with weight value j = d * q[j] + m (m = 0 and has_min false for types without one). d and m are
// the f32 numbers the type's dequantizer multiplies and adds.
struct Int8Piece {
  int q[kQK];
  int sub = kQK;
  bool has_min = false;
  float d[2] = {0, 0};
  float m[2] = {0, 0};
};

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) of the 12 packed bytes (quant_kquants.h).
void ScaleMinK4(const uint8_t* p, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = p[j] & 63;
    *m = p[j + 4] & 63;
  } else {
    *sc = (p[j + 4] & 0x0f) | ((p[j - 4] >> 6) << 4);
    *m = (p[j + 4] >> 4) | ((p[j] >> 6) << 4);
  }
}

// Activation block b (values 32 b .. 32 b + 31) of a row of int8-dot type t.
Int8Piece Int8PieceAt(DType t, const uint8_t* row, int64_t b) {
  Int8Piece p;
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0: {
      const uint8_t* block = row + static_cast<size_t>(b) * BlockBytes(t);
      uint16_t d;
      std::memcpy(&d, block, 2);
      p.d[0] = F16ToF32(d);
      for (int j = 0; j < kQK; ++j) p.q[j] = QuantAt(t, block, j);
      return p;
    }
    case DType::kQ4_1: {
      const auto* block = reinterpret_cast<const BlockQ4_1*>(row) + b;
      p.d[0] = F16ToF32(block->d);
      p.m[0] = F16ToF32(block->m);
      p.has_min = true;
      for (int j = 0; j < kQK / 2; ++j) {
        p.q[j] = block->qs[j] & 0x0f;
        p.q[j + kQK / 2] = block->qs[j] >> 4;
      }
      return p;
    }
    case DType::kQ5_0: {
      const auto* block = reinterpret_cast<const BlockQ5_0*>(row) + b;
      p.d[0] = F16ToF32(block->d);
      uint32_t qh;
      std::memcpy(&qh, block->qh, 4);
      for (int j = 0; j < kQK / 2; ++j) {
        p.q[j] = ((block->qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) - 16;
        p.q[j + kQK / 2] = ((block->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      }
      return p;
    }
    case DType::kQ4_K: {
      // Sub-block j = 2 pair + half: low (half 0) or high nibbles of qs[32 pair .. 32 pair + 31].
      const auto* block = reinterpret_cast<const BlockQ4_K*>(row) + b / 8;
      const int j = static_cast<int>(b % 8);
      int sc, m;
      ScaleMinK4(block->scales, j, &sc, &m);
      p.d[0] = F16ToF32(block->d) * static_cast<float>(sc);
      p.m[0] = -(F16ToF32(block->dmin) * static_cast<float>(m));
      p.has_min = true;
      const uint8_t* qs = block->qs + 32 * (j / 2);
      for (int l = 0; l < kQK; ++l) p.q[l] = (j % 2) ? (qs[l] >> 4) : (qs[l] & 0x0f);
      return p;
    }
    case DType::kQ5_1: {
      const auto* block = reinterpret_cast<const BlockQ5_1*>(row) + b;
      p.d[0] = F16ToF32(block->d);
      p.m[0] = F16ToF32(block->m);
      p.has_min = true;
      uint32_t qh;
      std::memcpy(&qh, block->qh, 4);
      for (int j = 0; j < kQK / 2; ++j) {
        p.q[j] = (block->qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
        p.q[j + kQK / 2] = (block->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      }
      return p;
    }
    case DType::kQ2_K: {
      // Values 128 h + 32 s + l: bits 2 s of qs[32 h + l]; sub-blocks of 16 (8 h + 2 s, + 1),
      // scales[u]: low nibble scale, high nibble min.
      const auto* block = reinterpret_cast<const BlockQ2_K*>(row) + b / 8;
      const int jb = static_cast<int>(b % 8);
      const int h = jb / 4, s = jb % 4;
      const float d = F16ToF32(block->d), dmin = F16ToF32(block->dmin);
      p.sub = 16;
      p.has_min = true;
      for (int k = 0; k < 2; ++k) {
        const uint8_t sc = block->scales[2 * jb + k];
        p.d[k] = d * static_cast<float>(sc & 0x0f);
        p.m[k] = -(dmin * static_cast<float>(sc >> 4));
      }
      for (int l = 0; l < kQK; ++l) p.q[l] = (block->qs[32 * h + l] >> (2 * s)) & 3;
      return p;
    }
    case DType::kQ3_K: {
      // As Q2_K's q, minus 4 where hmask[l] bit 4 h + s is clear; 6-bit scales stored + 32.
      const auto* block = reinterpret_cast<const BlockQ3_K*>(row) + b / 8;
      const int jb = static_cast<int>(b % 8);
      const int h = jb / 4, s = jb % 4;
      const float d = F16ToF32(block->d);
      p.sub = 16;
      for (int k = 0; k < 2; ++k) {
        const int u = 2 * jb + k;
        const int low = u < 8 ? (block->scales[u] & 0x0f) : (block->scales[u - 8] >> 4);
        const int high = (block->scales[8 + u % 4] >> (2 * (u / 4))) & 3;
        p.d[k] = d * static_cast<float>((low | (high << 4)) - 32);
      }
      for (int l = 0; l < kQK; ++l) {
        const int q2 = (block->qs[32 * h + l] >> (2 * s)) & 3;
        p.q[l] = q2 - (((block->hmask[l] >> (4 * h + s)) & 1) ? 0 : 4);
      }
      return p;
    }
    case DType::kQ5_K: {
      // Q4_K's sub-blocks with a fifth bit: value l of sub-block j at qh[l] bit j.
      const auto* block = reinterpret_cast<const BlockQ5_K*>(row) + b / 8;
      const int j = static_cast<int>(b % 8);
      int sc, m;
      ScaleMinK4(block->scales, j, &sc, &m);
      p.d[0] = F16ToF32(block->d) * static_cast<float>(sc);
      p.m[0] = -(F16ToF32(block->dmin) * static_cast<float>(m));
      p.has_min = true;
      const uint8_t* qs = block->qs + 32 * (j / 2);
      for (int l = 0; l < kQK; ++l) {
        const int low = (j % 2) ? (qs[l] >> 4) : (qs[l] & 0x0f);
        p.q[l] = low | (((block->qh[l] >> j) & 1) << 4);
      }
      return p;
    }
    case DType::kIQ4_NL: {
      const auto* block = reinterpret_cast<const BlockIQ4_NL*>(row) + b;
      p.d[0] = F16ToF32(block->d);
      for (int j = 0; j < kQK / 2; ++j) {
        p.q[j] = kIq4Levels[block->qs[j] & 0x0f];
        p.q[j + kQK / 2] = kIq4Levels[block->qs[j] >> 4];
      }
      return p;
    }
    case DType::kIQ4_XS: {
      // Sub-block j of a super-block: codes at qs[16 j], 6-bit scale code ls, scale d (ls - 32).
      const auto* block = reinterpret_cast<const BlockIQ4_XS*>(row) + b / 8;
      const int j = static_cast<int>(b % 8);
      const int ls = ((block->scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) |
                     (((block->scales_h >> (2 * j)) & 3) << 4);
      p.d[0] = F16ToF32(block->d) * static_cast<float>(ls - 32);
      const uint8_t* qs = block->qs + 16 * j;
      for (int l = 0; l < kQK / 2; ++l) {
        p.q[l] = kIq4Levels[qs[l] & 0x0f];
        p.q[l + kQK / 2] = kIq4Levels[qs[l] >> 4];
      }
      return p;
    }
    case DType::kQ6_K: {
      // Values 128 h + 32 quarter + l: low 4 bits in ql[64 h + 32 (quarter % 2) + l] (low nibble
      // for quarters 0, 1, high for 2, 3), top 2 bits in qh[32 h + l] at shift 2 quarter.
      const auto* block = reinterpret_cast<const BlockQ6_K*>(row) + b / 8;
      const int jb = static_cast<int>(b % 8);
      const int h = jb / 4, quarter = jb % 4;
      const float d = F16ToF32(block->d);
      p.sub = 16;
      p.d[0] = d * static_cast<float>(block->scales[2 * jb]);
      p.d[1] = d * static_cast<float>(block->scales[2 * jb + 1]);
      for (int l = 0; l < kQK; ++l) {
        const uint8_t ql = block->ql[64 * h + 32 * (quarter % 2) + l];
        const int low = quarter < 2 ? (ql & 0x0f) : (ql >> 4);
        const int high = (block->qh[32 * h + l] >> (2 * quarter)) & 3;
        p.q[l] = (low | (high << 4)) - 32;
      }
      return p;
    }
    default:
      WEIR_CHECK(false);  // not an int8-dot type
      return p;
  }
}

// Float weights (and, dequantized first, every type without an int8 dot) against f32 x.
float DotFloatRow(DType t, const uint8_t* row, const float* x, int64_t cols) {
  float s = 0;
  if (Traits(t).dot == DotKind::kFloat) {
    for (int64_t j = 0; j < cols; ++j) s += WeightAt(t, row, j) * x[j];
    return s;
  }
  std::vector<float> w(static_cast<size_t>(cols));
  DequantizeRow(t, row, w.data(), cols);
  for (int64_t j = 0; j < cols; ++j) s += w[static_cast<size_t>(j)] * x[j];
  return s;
}

// Per activation block b and each weight sub-block k in it (one, or two for Q6_K):
// (d_k * d_x) * isum_k, plus (m_k * d_x) * sum_k(x_q) for types with an offset (Q4_1, Q4_K,
// whose weights are d * q + m). The block's terms are added in sub-block order, the blocks' sums
// in block order.
float DotQuantRow(DType t, const uint8_t* row, const int8_t* xq, const float* xd, int64_t cols) {
  float s = 0;
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const Int8Piece p = Int8PieceAt(t, row, b);
    const int8_t* xb = xq + b * kQK;
    float v = 0;
    for (int k = 0; k < kQK / p.sub; ++k) {
      int32_t isum = 0, xsum = 0;
      for (int j = k * p.sub; j < (k + 1) * p.sub; ++j) {
        isum += p.q[j] * xb[j];
        xsum += xb[j];
      }
      float term = (p.d[k] * xd[b]) * static_cast<float>(isum);
      if (p.has_min) term += (p.m[k] * xd[b]) * static_cast<float>(xsum);
      v = k == 0 ? term : v + term;
    }
    s += v;
  }
  return s;
}

// ---- the scalar path's table ----
// Prepared activation: int8 q[cols], padded to 64 bytes, then f32 d[cols / 32].

size_t ScalarPrepBytes(DType t, int64_t cols) {
  if (!Int8Dot(t)) return 0;
  return RoundUp64(static_cast<size_t>(cols)) + 4 * static_cast<size_t>(cols / kQK);
}

void ScalarPrep(DType t, const float* x, int64_t cols, void* out) {
  auto* q = static_cast<int8_t*>(out);
  auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(out) + RoundUp64(cols));
  ref::QuantizeActivation(x, cols, q, d);
}

void ScalarDot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
               const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
               const uint8_t* /*pf*/) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_stride;
    for (int64_t tok = 0; tok < n_tok; ++tok) {
      const uint8_t* xt = static_cast<const uint8_t*>(xp) + static_cast<size_t>(tok) * xp_stride;
      float v;
      if (Int8Dot(t)) {
        v = DotQuantRow(t, row, reinterpret_cast<const int8_t*>(xt),
                        reinterpret_cast<const float*>(xt + RoundUp64(cols)), cols);
      } else {
        v = DotFloatRow(t, row, reinterpret_cast<const float*>(xt), cols);
      }
      y[static_cast<size_t>(tok) * y_stride + r] = v;
    }
  }
}

void ScalarAxpyGather(DType t, const uint8_t* wt, size_t row_stride, int64_t n_out,
                      const int32_t* idx, int64_t n_idx, const float* x, float* acc) {
  if (!IsQuantized(t)) {
    for (int64_t k = 0; k < n_idx; ++k) {
      const uint8_t* row = wt + static_cast<size_t>(idx[k]) * row_stride;
      const float xi = x[idx[k]];
      for (int64_t j = 0; j < n_out; ++j) acc[j] += xi * WeightAt(t, row, j);
    }
    return;
  }
  // Q8_0 / Q4_0: groups of kGatherGroup inputs; per group and output block the coefficients
  // x[i] * d[i, b] are quantized to int8 with one scale and the products summed in integers
  // (see gather.h).
  const size_t block_bytes = BlockBytes(t);
  for (int64_t g = 0; g < n_idx; g += kGatherGroup) {
    const int n = static_cast<int>(std::min<int64_t>(kGatherGroup, n_idx - g));
    const uint8_t* rows[kGatherGroup];
    for (int k = 0; k < n; ++k) rows[k] = wt + static_cast<size_t>(idx[g + k]) * row_stride;
    for (int64_t b = 0; b < n_out / kQK; ++b) {
      float c[kGatherGroup];
      float cmax = 0;
      for (int k = 0; k < n; ++k) {
        uint16_t d;
        std::memcpy(&d, rows[k] + static_cast<size_t>(b) * block_bytes, 2);
        c[k] = x[idx[g + k]] * F16ToF32(d);
        cmax = std::fmax(cmax, std::fabs(c[k]));
      }
      const float scale = cmax / 127.0f;
      const float inv = scale != 0 ? 1.0f / scale : 0.0f;
      int32_t tk[kGatherGroup];
      for (int k = 0; k < n; ++k) tk[k] = static_cast<int32_t>(std::nearbyint(c[k] * inv));
      for (int j = 0; j < kQK; ++j) {
        int32_t isum = 0;
        for (int k = 0; k < n; ++k) {
          isum += tk[k] * QuantAt(t, rows[k] + static_cast<size_t>(b) * block_bytes, j);
        }
        acc[b * kQK + j] += scale * static_cast<float>(isum);
      }
    }
  }
}

// ScalarDot computes every type itself (the reference arithmetic); the column form the types it
// was written for.
constexpr uint64_t kScalarDirectTypes =
    internal::kFloatQ8Q4Q41Types | internal::TypeBit(DType::kQ5_0) |
    internal::TypeBit(DType::kQ5_1) | internal::TypeBit(DType::kQ2_K) |
    internal::TypeBit(DType::kQ3_K) | internal::TypeBit(DType::kQ4_K) |
    internal::TypeBit(DType::kQ5_K) | internal::TypeBit(DType::kQ6_K) |
    internal::TypeBit(DType::kIQ4_NL) | internal::TypeBit(DType::kIQ4_XS);

const internal::IsaKernels kScalarTable = {
    kScalarDirectTypes, internal::kFloatQ8Q4Q41Types,
    ScalarPrepBytes, ScalarPrep,   ScalarDot,    nullptr, ScalarAxpyGather,
    ref::RmsNorm,    ref::Softmax, ref::SiluMul, nullptr, nullptr,
    nullptr,         nullptr,      ref::GeluTanhMul,
    0,               internal::ScalarExpSum,
};

}  // namespace

namespace internal {
const IsaKernels* ScalarKernels() { return &kScalarTable; }

void ScalarAttnScores16(DType t, const uint8_t* kb, size_t block_stride, int64_t n_blocks,
                        int64_t hd, const float* const* qs, int nq, float* const* ss) {
  const size_t elem = t == DType::kF32 ? 4 : 2;
  for (int i = 0; i < nq; ++i) {
  const float* q = qs[i];
  float* s = ss[i];
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* k = kb + static_cast<size_t>(b) * block_stride;
    float acc[16] = {};
    for (int64_t d = 0; d < hd; ++d) {
      for (int l = 0; l < 16; ++l) {
        const uint8_t* e = k + (static_cast<size_t>(d) * 16 + static_cast<size_t>(l)) * elem;
        float v;
        if (t == DType::kF32) {
          std::memcpy(&v, e, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, e, 2);
          v = t == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
        }
        acc[l] += q[d] * v;
      }
    }
    std::memcpy(s + 16 * b, acc, sizeof(acc));
  }
  }
}

float ScalarExpSum(float* x, int64_t n, float max) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  return sum;
}
}  // namespace internal

namespace ref {

void QuantizeActivation(const float* x, int64_t n, int8_t* q, float* d) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[b * kQK + j]));
    const float db = amax / 127.0f;
    const float id = db != 0 ? 1.0f / db : 0.0f;
    d[b] = db;
    for (int j = 0; j < kQK; ++j) {
      q[b * kQK + j] = static_cast<int8_t>(std::nearbyint(x[b * kQK + j] * id));
    }
  }
}

float DotRow(const TensorView& w, int64_t r, const float* x) {
  if (!Int8Dot(w.dtype)) return DotFloatRow(w.dtype, w.row(r), x, w.cols());
  std::vector<int8_t> q(static_cast<size_t>(w.cols()));
  std::vector<float> d(static_cast<size_t>(w.cols() / kQK));
  QuantizeActivation(x, w.cols(), q.data(), d.data());
  return DotQuantRow(w.dtype, w.row(r), q.data(), d.data(), w.cols());
}

void MatVec(const TensorView& w, const float* x, float* y) { MatMul(w, x, 1, y); }

void DotRowsF32(const float* w, size_t row_stride, int64_t rows, int64_t cols, const float* x,
                float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    y[r] = DotFloatRow(DType::kF32, reinterpret_cast<const uint8_t*>(w + static_cast<size_t>(r) * row_stride), x, cols);
  }
}

void MatMul(const TensorView& w, const float* x, int64_t n, float* y) {
  const int64_t cols = w.cols();
  std::vector<int8_t> q(static_cast<size_t>(cols));
  std::vector<float> d(static_cast<size_t>(cols / kQK));
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * cols;
    float* yt = y + t * w.rows();
    if (Int8Dot(w.dtype)) {
      QuantizeActivation(xt, cols, q.data(), d.data());
      for (int64_t r = 0; r < w.rows(); ++r) {
        yt[r] = DotQuantRow(w.dtype, w.row(r), q.data(), d.data(), cols);
      }
    } else {
      for (int64_t r = 0; r < w.rows(); ++r) yt[r] = DotFloatRow(w.dtype, w.row(r), xt, cols);
    }
  }
}

void GatherMatVecCols(const TensorView& wt, const int32_t* idx, int64_t n_idx, const float* x,
                      float* y) {
  for (int64_t j = 0; j < wt.cols(); ++j) y[j] = 0;
  ScalarAxpyGather(wt.dtype, wt.row(0), wt.row_bytes(), wt.cols(), idx, n_idx, x, y);
}

void GatherMatVecRows(const TensorView& w, const int32_t* idx, int64_t n_idx, const float* x,
                      float* y) {
  std::vector<int8_t> q(static_cast<size_t>(w.cols()));
  std::vector<float> d(static_cast<size_t>(w.cols() / kQK));
  if (Int8Dot(w.dtype)) QuantizeActivation(x, w.cols(), q.data(), d.data());
  for (int64_t k = 0; k < n_idx; ++k) {
    const uint8_t* row = w.row(idx[k]);
    y[idx[k]] = Int8Dot(w.dtype) ? DotQuantRow(w.dtype, row, q.data(), d.data(), w.cols())
                                     : DotFloatRow(w.dtype, row, x, w.cols());
  }
}

void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::fmax(mx, x[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void GeluTanhMul(float* gate, const float* up, int64_t n) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  constexpr double kCubic = 0.044715;
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double z = kSqrt2OverPi * (g + kCubic * g * g * g);
    gate[i] = static_cast<float>(g * up[i] / (1.0 + std::exp(-2.0 * z)));
  }
}

}  // namespace ref
}  // namespace weir::kernels
