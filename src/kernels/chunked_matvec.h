// Chunked matrix-vector product: the down projection of a bundle pack (format/weir_pack_format.h),
// where W_down [rows, d_ff] is stored as chunks of `width` consecutive input columns, chunk k a
// [rows, width] matrix of its own (row r = the piece W_down[r, 32 k .. 32 k + width),
// RowBytes(t, width) bytes; for Q8_0/Q4_0 one whole block, width 32):
//   y[r] = (accumulate ? y[r] : 0) + sum_{k < n_chunks} chunk_k[r, :] · x[k * width ..]
// row r of chunk k at w + k * chunk_stride + r * row_stride; x holds the n_chunks * width inputs
// of the chunks in order. A bundle pack's chunks have row_stride = RowBytes(t, width); a
// row-major W_down's columns [c0, c0 + n width) are chunks with row_stride = its row bytes and
// chunk_stride = RowBytes(t, width).
//
// Numerics: each chunk's dot is MatVec's (matvec.h): F32/F16/BF16 widened to f32; Q8_0/Q4_0
// against x quantized per chunk exactly as MatVec quantizes it (ref::QuantizeActivation; the
// chunks are MatVec's blocks), giving d_w * d_x * isum. Per row the chunks are added in order,
// starting from y[r] or 0, so the result does not depend on how rows are split, and a product
// over all chunks of a matrix equals MatVec over it up to the order of the f32 additions. Paths
// differ only in that order inside a chunk and in fused or separate multiply-adds.
//
// Runs on the calling thread (the streaming engine runs one lane of chunks per pool thread).
// Scratch for the fallback paths is a grow-only thread_local buffer (no steady-state allocation).
//
// Thread safety: free functions; concurrent calls are fine if outputs do not alias.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace weir::kernels {

void ChunkedMatVec(DType t, const uint8_t* w, size_t row_stride, size_t chunk_stride,
                   int64_t n_chunks, int width, int64_t rows, const float* x, float* y,
                   bool accumulate);

namespace ref {
// One ref::DotRow per row and chunk, added in chunk order (the test oracle).
void ChunkedMatVec(DType t, const uint8_t* w, size_t row_stride, size_t chunk_stride,
                   int64_t n_chunks, int width, int64_t rows, const float* x, float* y,
                   bool accumulate);
}  // namespace ref

}  // namespace weir::kernels
