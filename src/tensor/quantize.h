// Conversion of rows between F32 and every DType, through the DTypeTraits table (dtype.h). These
// define the numerics;
// SIMD kernels elsewhere are tested against them. Q8_0/Q4_0 quantisation follows ggml's
// reference rounding (Q8_0: d = amax/127, q = round(x/d); Q4_0: d = max/-8 where max is the
// signed value of largest magnitude, q = min(15, (int)(x/d + 8.5))), so files weir writes match
// what llama.cpp would produce for the same floats.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/tensor_view.h"

namespace weir {

// n must be a multiple of BlockSize(t).
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);
void DequantizeRow(DType t, const void* src, float* dst, int64_t n);
// Dequantizes row r of a 2-D view into dst[cols].
inline void DequantizeRow(const TensorView& v, int64_t r, float* dst) {
  DequantizeRow(v.dtype, v.row(r), dst, v.cols());
}

}  // namespace weir
