// Scalar reference kernels (kernels::ref) and the "scalar" path's table built from them. These are
// written for clarity: one value at a time, f32 accumulation in index order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/gather.h"
#include "kernels/internal/isa_kernels.h"
#include "kernels/matvec.h"
#include "kernels/ops.h"
#include "tensor/quantize.h"

namespace weir::kernels {
namespace {

using internal::kGatherGroup;

size_t RoundUp64(size_t n) { return (n + 63) / 64 * 64; }

// Whether t's products run on the int8-quantized activation (Q8_0, Q4_0, Q4_1).
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

// Integer weight j (0..31) of an int8-dot block: Q8_0 q, Q4_0 nibble - 8, Q4_1 the raw nibble.
int QuantAt(DType t, const uint8_t* block, int j) {
  if (t == DType::kQ8_0) return reinterpret_cast<const BlockQ8_0*>(block)->qs[j];
  const uint8_t* qs = t == DType::kQ4_0 ? reinterpret_cast<const BlockQ4_0*>(block)->qs
                                        : reinterpret_cast<const BlockQ4_1*>(block)->qs;
  const int q = j < kQK / 2 ? (qs[j] & 0x0f) : (qs[j - kQK / 2] >> 4);
  return t == DType::kQ4_0 ? q - 8 : q;
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

// Per block b: (d_w * d_x) * isum, plus (m_w * d_x) * sum(x_q) for Q4_1 (whose weights are
// d * q + m). The block sums are added in block order.
float DotQuantRow(DType t, const uint8_t* row, const int8_t* xq, const float* xd, int64_t cols) {
  const size_t block_bytes = BlockBytes(t);
  float s = 0;
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const uint8_t* block = row + static_cast<size_t>(b) * block_bytes;
    int32_t isum = 0, xsum = 0;
    for (int j = 0; j < kQK; ++j) {
      isum += QuantAt(t, block, j) * xq[b * kQK + j];
      xsum += xq[b * kQK + j];
    }
    uint16_t dw;
    std::memcpy(&dw, block, 2);
    float v = (F16ToF32(dw) * xd[b]) * static_cast<float>(isum);
    if (t == DType::kQ4_1) {
      const float mw = F16ToF32(reinterpret_cast<const BlockQ4_1*>(block)->m);
      v += (mw * xd[b]) * static_cast<float>(xsum);
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

const internal::IsaKernels kScalarTable = {
    internal::kFloatQ8Q4Q41Types, internal::kFloatQ8Q4Q41Types,
    ScalarPrepBytes, ScalarPrep,   ScalarDot,    nullptr, ScalarAxpyGather,
    ref::RmsNorm,    ref::Softmax, ref::SiluMul, nullptr, nullptr,
    nullptr,         nullptr,
};

}  // namespace

namespace internal {
const IsaKernels* ScalarKernels() { return &kScalarTable; }
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

}  // namespace ref
}  // namespace weir::kernels
