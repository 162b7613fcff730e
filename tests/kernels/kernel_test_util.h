// Shared helpers for the kernel tests: random weights of every dtype with their dequantized
// values, random activations, the paths to run, and the error bound used against references.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/isa.h"
#include "kernels/matvec.h"
#include "tensor/dtype.h"
#include "tensor/quantize.h"
#include "tensor/tensor_view.h"

namespace weir::kernels::testing {

// Every row of the DTypeTraits table.
inline const std::vector<DType>& AllDTypes() {
  static const std::vector<DType> kAll = [] {
    std::vector<DType> v;
    for (const DTypeTraits& t : AllDTypeTraits()) v.push_back(t.type);
    return v;
  }();
  return kAll;
}

using weir::IsQuantized;
// c rounded up to a whole number of t's blocks (unchanged for float types).
inline int64_t ValidCols(DType t, int64_t c) {
  const int64_t bs = BlockSize(t);
  return (c + bs - 1) / bs * bs;
}
// Each of cols made valid for t (ValidCols), duplicates dropped, order kept.
inline std::vector<int64_t> ValidColsList(DType t, const std::vector<int64_t>& cols) {
  std::vector<int64_t> out;
  for (int64_t c : cols) {
    const int64_t v = ValidCols(t, c);
    bool seen = false;
    for (int64_t o : out) seen = seen || o == v;
    if (!seen) out.push_back(v);
  }
  return out;
}

// Whether t's products run on the int8-quantized activation (kernels/matvec.h).
inline bool Int8Dot(DType t) { return Traits(t).dot == DotKind::kInt8Block; }

// A weight matrix [rows, cols] of one dtype: its bytes, a view of them and its values as f32.
struct Weights {
  DType dtype;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized, [rows, cols]
  TensorView view() const { return TensorView{dtype, Shape{rows, cols}, bytes.data()}; }
};

inline std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = u(rng);
  return v;
}

// Quantizes random floats (rows scaled differently, some blocks zero) to `t`.
inline Weights RandomWeights(std::mt19937& rng, DType t, int64_t rows, int64_t cols) {
  Weights w{t, rows, cols, {}, {}};
  std::vector<float> src = RandomFloats(rng, rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    float scale = std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
    for (int64_t j = 0; j < cols; ++j) src[r * cols + j] *= scale;
  }
  if (rows * cols >= 64) {
    for (int j = 0; j < 32; ++j) src[j] = 0;  // an all-zero block
  }
  w.bytes.resize(RowBytes(t, cols) * static_cast<size_t>(rows));
  w.values.resize(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = w.bytes.data() + RowBytes(t, cols) * r;
    QuantizeRow(t, src.data() + r * cols, row, cols);
    DequantizeRow(t, row, w.values.data() + r * cols, cols);
  }
  return w;
}

// Byte offsets of the f16 fields (scales, mins) of one block of a block-quantized type; every
// other byte of a block may hold any value (layouts in tensor/dtype.h and tensor/quant_kquants.h).
inline std::vector<size_t> HalfFieldOffsets(DType t) {
  switch (t) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {0, 2};
    case DType::kQ2_K:
      return {80, 82};
    case DType::kQ3_K:
      return {108};
    case DType::kQ6_K:
      return {208};
    default:  // Q4_0, Q5_0, Q8_0
      return {0};
  }
}

// Blocks of a block-quantized type t whose f16 fields are half() (called once per field, in
// order) and whose other bytes are byte(); values are what DequantizeRow makes of them.
template <class HalfFn, class ByteFn>
inline Weights BlockWeights(DType t, int64_t rows, int64_t cols, HalfFn half, ByteFn byte) {
  Weights w{t, rows, cols, {}, {}};
  w.bytes.resize(RowBytes(t, cols) * static_cast<size_t>(rows));
  for (uint8_t& b : w.bytes) b = byte();
  const size_t bb = BlockBytes(t);
  const std::vector<size_t> fields = HalfFieldOffsets(t);
  for (size_t off = 0; off < w.bytes.size(); off += bb) {
    for (size_t f : fields) {
      const uint16_t h = half();
      std::memcpy(&w.bytes[off + f], &h, 2);
    }
  }
  w.values.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t, w.bytes.data() + RowBytes(t, cols) * r, w.values.data() + r * cols, cols);
  }
  return w;
}

// Raw random blocks of any block-quantized type, including bytes its quantizer never writes
// (Q8_0 q = -128, Q6_K scale -128, every 6-bit K scale and min), with finite f16 scales and mins;
// exercises the kernels on whatever a file may hold.
inline Weights RawQuantWeights(std::mt19937& rng, DType t, int64_t rows, int64_t cols) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  return BlockWeights(
      t, rows, cols, [&] { return F32ToF16(scale(rng)); },
      [&] { return static_cast<uint8_t>(byte(rng)); });
}

// The activation the kernels actually multiply with: x itself for float (and dequantized)
// weights, the dequantized ref::QuantizeActivation of x for the int8-dot types.
inline std::vector<float> EffectiveX(DType t, const float* x, int64_t n) {
  std::vector<float> out(x, x + n);
  if (!Int8Dot(t)) return out;
  std::vector<int8_t> q(static_cast<size_t>(n));
  std::vector<float> d(static_cast<size_t>(n / kQK));
  ref::QuantizeActivation(x, n, q.data(), d.data());
  for (int64_t i = 0; i < n; ++i) out[i] = d[i / kQK] * q[i];
  return out;
}

// Error bound of a product against the reference: the paths compute the same products and
// differ only in the order of f32 additions, so |y - y_ref| <= kRel * sum |w_i| |x_i| (+ a tiny
// absolute term). kRel = 1e-5 is ~100x the f32 epsilon: generous for reordered sums of at most a
// few thousand terms, and far below the error of any wrong element (one term is >= 1/4128 of the
// sum for the sizes tested).
constexpr double kRel = 1e-5;

inline double AbsDot(const float* w, const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(w[i]) * x[i]);
  return s;
}

inline std::string Describe(Isa isa, DType t, int64_t rows, int64_t cols) {
  return std::string(IsaName(isa)) + " " + DTypeName(t) + " [" + std::to_string(rows) + ", " +
         std::to_string(cols) + "]";
}

}  // namespace weir::kernels::testing
