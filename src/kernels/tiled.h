// Row tiling of Q8_0 / Q4_0 weights for the dense products (Layout::kTiled16).
//
// In GGUF's row-major order a one-token product reads each row's 18- or 34-byte blocks and must
// shuffle every pair of them into vector lanes, gather 16 scales per 16 blocks and reduce each row
// at the end. Tiled, one 64-byte load holds the same 4 inputs of 16 rows, so each vpdpbusd lane
// accumulates one row, the 16 scales of a block column are one load, and there is no reduction
// at all: llama-1b Q4_0 decode 38.3-39.1 -> 43.4-44.2 tok/s with the weights in memory either
// way (docs/performance.md, "Tiled Q8_0 / Q4_0").
// The bytes are the same bytes, reordered (the tensor's size does not change).
//
// Byte layout of a tiled [rows, cols] tensor, nb = cols / 32 blocks per row: the 16-row groups
// follow each other, each 16 * row_bytes long:
//   scales  f16 [nb][16]          the block scale of (block b, row r)
//   quants  Q4_0: u8 [nb][4][16][4]   (b, v, r, i) = qs byte 4v+i of row r's block b, i.e. low
//                                     nibble = input 4v+i, high nibble = input 16+4v+i
//           Q8_0: i8 [nb][8][16][4]   (b, v, r, i) = quant 4v+i of row r's block b
//
// Prepared activation (PrepTiled; the same bytes on every path): one 64-byte record per block b
//   int8 q[32]  the quantized activation (ref::QuantizeActivation)
//   int32 bias  -o * sum(q), o = 8 (Q4_0) or 128 (Q8_0): the SIMD kernels multiply unsigned
//               weights (nibble, or quant + 128) and take the offset back out with it
//   f32 d       the activation scale
//   24 bytes of padding.
//
// Numerics: y[r] = sum over b, in order, of fma(float(isum[b]), d_w[b] * d_x[b], acc), isum the
// exact integer block sum: every path gives the same bits (tests/kernels/tiled_test.cc), and
// these differ from the row-major kernels only in the order of the f32 additions.
//
// Thread safety: free functions over caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/tensor_view.h"

namespace weir::kernels {

constexpr int64_t kTileRows = 16;
constexpr size_t kTiledRecordBytes = 64;

// Whether the path kernels run on now (isa.h) has a SIMD tiled product; the others compute a
// tiled tensor with the scalar definition, far slower than their row-major kernels.
bool HasFastTiledProduct();

// Whether w (row-major) can be tiled: Q8_0 or Q4_0, 2-D, rows a positive multiple of 16.
bool CanTile(const TensorView& w);

// Writes w's bytes (row-major, CanTile(w)) tiled into dst (w.nbytes() bytes) and returns the
// view of dst.
TensorView TileRows(const TensorView& w, void* dst);

// Row r of a tiled tensor in row-major block form (row_bytes() bytes at out).
void UntileRow(const TensorView& tiled, int64_t r, void* out);

// One-token tiled products on the calling thread, for callers that split the work themselves
// (a streamed pack's lanes). x is prepared once (PrepareTiled into TiledPrepBytes(cols) bytes,
// 64-byte aligned) and reused for every product of that input.
size_t TiledPrepBytes(int64_t cols);
void PrepareTiled(DType t, const float* x, int64_t cols, void* out);
// y[rows] = tiled · x.
void DotTiledPrepared(const TensorView& tiled, const void* xp, float* y);
// The down pieces of a tiled bundle pack (format/weir_pack_format.h): n_chunks chunks
// chunk_stride bytes apart, each a [rows, 32] piece of type t tiled by 16 rows (one block per
// row), the first at `first`. y[r] = sum over chunks k, in order, of piece_k[r, :] · h_k for
// r < rows (a multiple of 16); h prepared over the n_chunks * 32 inputs.
void DotTiledChunks(DType t, const uint8_t* first, size_t chunk_stride, int64_t n_chunks,
                    int64_t rows, const void* hp, float* y);

namespace internal {
struct TiledGeometry;
// The geometry (internal/isa_kernels.h) of n_groups groups of a tiled tensor.
TiledGeometry TensorGeometry(const TensorView& tiled, int64_t n_groups);
}  // namespace internal

namespace ref {
// The scalar definition of the tiled product: y[tok * y_stride + r] for r < rows of `tiled`.
// x is prepared as described above (PrepTiled).
void PrepTiled(DType t, const float* x, int64_t cols, void* out);
void DotTiled(const TensorView& tiled, int64_t group_begin, int64_t group_end, const void* xp,
              size_t xp_stride, int64_t n_tok, float* y, size_t y_stride);
}  // namespace ref

}  // namespace weir::kernels
