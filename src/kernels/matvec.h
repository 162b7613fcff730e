// Dense matrix-vector and matrix-matrix products over weight views of any DType.
//   MatVec: y[rows] = W[rows, cols] · x[cols]
//   MatMul: Y[n, rows] = X[n, cols] · W[rows, cols]^T  (prefill: n tokens at once)
// Work is split over output rows on the pool (nullptr = run on the caller).
//
// Thread safety: free functions; concurrent calls are fine if outputs do not alias.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/tensor_view.h"

namespace weir::kernels {

void MatVec(const TensorView& w, const float* x, float* y, ThreadPool* pool);
void MatMul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool);

// Scalar references that define the results above (dequantize the row, dot in double-free f32).
namespace ref {
void MatVec(const TensorView& w, const float* x, float* y);
void MatMul(const TensorView& w, const float* x, int64_t n, float* y);
}  // namespace ref

}  // namespace weir::kernels
