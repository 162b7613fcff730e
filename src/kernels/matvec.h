// Dense matrix-vector and matrix-matrix products over weight views of any DType.
//   MatVec: y[rows] = W[rows, cols] · x[cols]
//   MatMul: Y[n, rows] = X[n, cols] · W[rows, cols]^T  (prefill: n tokens at once)
// Work is split over output rows on the pool (nullptr = run on the caller).
//
// Numerics. F32/F16/BF16 weights are widened to f32 and multiplied with the f32 x. For Q8_0 and
// Q4_0 weights x is first quantized the way llama.cpp does it (ref::QuantizeActivation: blocks of
// 32 int8 with an f32 scale), each block's products are summed exactly in integers, and the result
// is sum_b d_w[b] * d_x[b] * isum[b] in f32. Every path (see isa.h) computes these same numbers;
// they differ only in the order of the f32 additions.
//
// MatMul reads each weight row once per group of up to 16 tokens and shares it between them
// (it is not a loop of MatVec calls).
//
// Scratch: the quantized activation lives in a grow-only buffer owned by the calling thread
// (thread_local), at most ~2.2 bytes per input per token (the x86 paths store per-block sums
// beside the int8 values); it is allocated the first time a thread needs that much and reused
// afterwards, so steady-state calls do not allocate.
//
// Thread safety: free functions; concurrent calls from different threads are fine if their
// outputs do not alias (each pool must be used by one thread at a time, see ThreadPool).
#pragma once

#include <cstdint>
#include <span>

#include "base/thread_pool.h"
#include "tensor/tensor_view.h"

namespace weir::kernels {

void MatVec(const TensorView& w, const float* x, float* y, ThreadPool* pool);
void MatMul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool);

// Several products of one input, Y_i[n, rows_i] = X · W_i^T (attention's q, k, v; the MLP's gate
// and up): the same numbers as a MatMul per weight, but weights of one kind (dtype, cols, layout)
// share one prepared activation and one parallel section, so the pool is woken once for them and
// no thread idles at the end of a small matrix.
void MatMulShared(std::span<const TensorView* const> ws, const float* x, int64_t n,
                  float* const* ys, ThreadPool* pool);

// y[r] = dot(w + r * row_stride, x) over `cols` f32 values, for r < rows: f32 rows that are not
// a tensor of their own, such as one attention head's keys in a KV cache (row_stride floats
// apart). Runs on the caller's thread with MatVec's F32 numerics.
void DotRowsF32(const float* w, size_t row_stride, int64_t rows, int64_t cols, const float* x,
                float* y);

// Scalar references that define the results above. They allocate and run on the caller.
namespace ref {
// Quantizes x[n] (n a multiple of 32) to blocks of 32: d[b] = amax/127 (0 for an all-zero block),
// q[i] = nearbyint(x[i] / d[b]) (round half to even), i.e. x[i] ~ d[b] * q[i].
void QuantizeActivation(const float* x, int64_t n, int8_t* q, float* d);
// row r of w · x, with the numerics described at the top of this file.
float DotRow(const TensorView& w, int64_t r, const float* x);
void MatVec(const TensorView& w, const float* x, float* y);
void MatMul(const TensorView& w, const float* x, int64_t n, float* y);
void DotRowsF32(const float* w, size_t row_stride, int64_t rows, int64_t cols, const float* x,
                float* y);
}  // namespace ref

}  // namespace weir::kernels
