// Gathered sparse matrix-vector products: the primitive of activation sparsity. Only the weights
// of active inputs (column form) or active outputs (row form) are read, so the bytes touched are
// proportional to the number of active indices.
//
// Column form, over a transposed weight wt [cols_in, rows_out] (row i of wt is input column i of
// W [rows_out, cols_in], contiguous):
//   y[r] = sum_{k < n_idx} x[idx[k]] * wt[idx[k], r]     for every r < rows_out (y is overwritten)
// x is the full-length activation x[cols_in]; only the entries named by idx are read. For Q8_0 and
// Q4_0 the quantization blocks of wt run along the output dimension (32 consecutive outputs of one
// input share a scale d[i, b]), so rows_out must be a multiple of 32, and the products are summed
// in integers the way the dense kernels quantize their activation: the indices are taken in
// groups of 4 consecutive entries of idx (the last group may be shorter), and for each group and
// output block b the coefficients c_k = x[i_k] * d[i_k, b] are rounded to int8 with one scale,
// C = max_k |c_k| / 127, t_k = nearbyint(c_k / C), so that
//   y[32 b + j] += C * sum_k t_k * q[i_k, 32 b + j]      (q centred: Q4_0 nibble - 8)
// Each coefficient is exact to 1/254 of the largest in its group (F32/F16/BF16 use x exactly).
//
// Row form, over a normal row-major weight w [rows_out, cols_in]:
//   y[idx[k]] = w[idx[k], :] · x                          for k < n_idx; other y entries untouched
// with the numerics of MatVec (matvec.h), so with all rows active it equals MatVec exactly up to
// f32 summation order.
//
// Indices must be distinct and in range (checked: a bad index is a bug in the caller). They need
// not be sorted, but ascending order reads memory more sequentially.
//
// Work is split over the index list on the pool (at multiples of 4, so the column form's groups
// and so its results do not depend on the pool). The column form cuts the list into one slice
// per pool thread, each summed into its own partial y (a grow-only thread_local buffer of the
// calling thread, rows_out floats per pool thread, so steady-state calls do not allocate), and
// adds the partials in slice order: its result is the same on every call with the same pool
// size, whatever the scheduling.
//
// Thread safety: free functions; concurrent calls are fine if outputs do not alias.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/tensor_view.h"

namespace weir::kernels {

// wt: [cols_in, rows_out]; x: [cols_in]; y: [rows_out].
void GatherMatVecCols(const TensorView& wt, const int32_t* idx, int64_t n_idx, const float* x,
                      float* y, ThreadPool* pool);
// w: [rows_out, cols_in]; x: [cols_in]; y: [rows_out] (only y[idx[k]] written).
void GatherMatVecRows(const TensorView& w, const int32_t* idx, int64_t n_idx, const float* x,
                      float* y, ThreadPool* pool);

namespace ref {
void GatherMatVecCols(const TensorView& wt, const int32_t* idx, int64_t n_idx, const float* x,
                      float* y);
void GatherMatVecRows(const TensorView& w, const int32_t* idx, int64_t n_idx, const float* x,
                      float* y);
}  // namespace ref

}  // namespace weir::kernels
