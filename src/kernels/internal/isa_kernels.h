// The per-path kernel table behind the public kernels (matvec.h, gather.h, ops.h). Each
// instruction-set path fills one IsaKernels with plain function pointers; the public functions
// pick the table for ActiveIsa() once per call, prepare the activation, split rows over the pool
// and call into it. Nothing here allocates or threads.
//
// Layout of the prepared activation: for Q8_0 / Q4_0 weights the activation x[cols] is quantized
// once per call to blocks of 32 int8 with an f32 scale (d = amax/127, q = nearbyint(x/d), the
// same numbers as ref::QuantizeActivation) and stored in whatever arrangement the path's dot
// product wants (prep_bytes/prep). For F32/F16/BF16 weights prep_bytes is 0 and the kernels read
// the f32 x directly (xp points at x, xp_stride = cols * 4).
//
// Files that implement a table for a SIMD path are compiled with that path's -m flags. Such a file
// must not call inline functions from other headers (std:: templates included): the linker could
// keep the copy built with the wider instructions and run it on any CPU. So these files include
// only this header and intrinsics, and this header declares no inline code.
//
// Thread safety: the tables are immutable; the functions are re-entrant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace weir::kernels::internal {

// Inputs per coefficient group of the quantized column form (gather.h). Work is split between
// threads at multiples of it so the groups, and so the results, do not depend on the pool.
constexpr int kGatherGroup = 4;

// Where the blocks of a tiled product lie: group i starts at groups + i * group_bytes; block b
// of a group has its 16 f16 scales at scale_stride * b and its quants (16 rows x 32 inputs) at
// quant_offset + quant_stride * b from the group's start. A tiled tensor (tiled.h) has
// scale_stride 32, quant_offset 32 nb, quant_stride 256 (Q4_0) or 512 (Q8_0); the down pieces of
// a tiled bundle pack (one block column per chunk) have both strides = the chunk stride.
struct TiledGeometry {
  int64_t nb = 0;        // blocks per row
  int64_t n_groups = 0;  // groups of 16 rows
  size_t group_bytes = 0;
  size_t scale_stride = 0;
  size_t quant_offset = 0;
  size_t quant_stride = 0;
};

// direct_types of the paths that compute the float types, Q8_0 and Q4_0 themselves.
constexpr uint64_t kFloatQ8Q4Types = (uint64_t{1} << 0) | (uint64_t{1} << 1) |
                                     (uint64_t{1} << 2) | (uint64_t{1} << 8) | (uint64_t{1} << 30);
// ... and Q4_1 (ggml id 3).
constexpr uint64_t kFloatQ8Q4Q41Types = kFloatQ8Q4Types | (uint64_t{1} << 3);

struct IsaKernels {
  // The weight types (bit GgmlId(t)) whose prep / dot / dot_gather / axpy_gather this path
  // computes itself; every other type reaches it only as F32 rows (internal/typed_dispatch.h).
  uint64_t direct_types;
  // The subset whose column form (axpy_gather) it computes itself.
  uint64_t direct_axpy_types;

  // Bytes of one token's prepared activation for weight type t and cols inputs (0: none needed).
  size_t (*prep_bytes)(DType t, int64_t cols);
  // Fills prep_bytes(t, cols) bytes at out (64-byte aligned) from x[cols].
  void (*prep)(DType t, const float* x, int64_t cols, void* out);

  // Dense rows: for r < n_rows, tok < n_tok:
  //   y[tok * y_stride + r] = dot(row r, x_tok),  row r at w + r * row_stride (cols values),
  //   x_tok prepared at xp + tok * xp_stride.
  // n_tok > 1 shares each weight row between the tokens (prefill).
  // The kernels prefetch ahead within [w, w + n_rows * row_stride) only. pf, when not null, is a
  // region laid out like w (typically the next rows of a gather) that they request line by line
  // at the offsets they are reading, so it arrives by the time it is needed.
  void (*dot)(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
              const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
              const uint8_t* pf);

  // Row form of the gathered product, or nullptr (then the caller runs dot row by row):
  //   y[idx[k]] = dot(row idx[k], x) for k < n_idx, row i at w + i * row_stride,
  // each bitwise what dot gives for that row alone with n_tok = 1. Several rows are computed per
  // pass (one load of the activation for all of them, one call for the whole list) and the
  // kernel requests the rows it will read next itself.
  void (*dot_gather)(DType t, const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
                     int64_t n_idx, const void* xp, float* y);

  // Column form of the gathered product: acc[j] += sum_k x[idx[k]] * wt[idx[k], j] for j < n_out,
  // where row i of wt is at wt + i * row_stride (n_out values; blocks of quantized types run
  // along j). For Q8_0 / Q4_0 the indices form groups of kGatherGroup from the start of idx, with
  // the int8 coefficient rounding described in gather.h.
  void (*axpy_gather)(DType t, const uint8_t* wt, size_t row_stride, int64_t n_out,
                      const int32_t* idx, int64_t n_idx, const float* x, float* acc);

  // Elementwise operations, same contracts as ops.h.
  void (*rms_norm)(float* out, const float* x, const float* weight, int64_t n, float eps);
  void (*softmax)(float* x, int64_t n);
  void (*silu_mul)(float* gate, const float* up, int64_t n);

  // Sparse column scatter (kernels/sparse_column.h), or nullptr (then the caller's scalar loop):
  // for the set bits k < len of the bitmap (u64 words read with memcpy), in order,
  // y[k] += x * v[j], j counting the set bits (a fused multiply-add may round once where the
  // scalar loop rounds twice).
  void (*sparse_scatter)(const float* v, const std::byte* bitmap, int64_t len, float x, float* y);

  // Chunked product (chunked_matvec.h) for Q8_0 / Q4_0, chunks of one block (width 32), at most
  // kMaxDotChunks of them, 16 * row_stride < 2^31; x is f32 (quantized per chunk inside), y as
  // in ChunkedMatVec. Or nullptr (then the caller runs dot chunk by chunk).
  void (*dot_chunks)(DType t, const uint8_t* w, size_t row_stride, size_t chunk_stride,
                     int64_t n_chunks, int64_t rows, const float* x, float* y, bool accumulate);

  // Tiled dense product (tiled.h) for Q8_0 / Q4_0, or nullptr (then the scalar versions below):
  // prep_tiled writes cols / 32 records of kTiledRecordBytes; dot_tiled computes, for the
  // g.n_groups groups of 16 rows (TiledGeometry) and tok < n_tok,
  //   y[tok * y_stride + 16 * g + r] = row (g, r) · x_tok,  x_tok prepared at xp + tok * xp_stride,
  // bitwise what ScalarDotTiled gives.
  void (*prep_tiled)(DType t, const float* x, int64_t cols, void* out);
  void (*dot_tiled)(DType t, const uint8_t* groups, const TiledGeometry& g, const void* xp,
                    size_t xp_stride, int64_t n_tok, float* y, size_t y_stride);

  // GeGLU with gelu's tanh approximation (ops.h GeluTanhMul), or nullptr (then ref::GeluTanhMul).
  void (*gelu_mul)(float* gate, const float* up, int64_t n) = nullptr;

  // The weight types (bit GgmlId(t)) whose dot shares its unpacking of the weights between all
  // the tokens of a call: MatMul hands them kWideTokenChunk tokens per call instead of
  // kTokenChunk (matvec.cc).
  uint64_t wide_token_types = 0;

  // x[i] = e^(x[i] - max) for i < n, returning their sum (attention's segment softmax,
  // attention.h), or nullptr (then ScalarExpSum).
  float (*exp_sum)(float* x, int64_t n, float max) = nullptr;

  // Scores of keys stored by blocks of 16 positions (attention.h, KvRows::tiled16) for nq <= 4
  // queries: block b < n_blocks at kb + b * block_stride holds value d of lane l at element
  // 16 d + l, in type t (F32, F16 or BF16), and
  //   s[i][16 b + l] = sum_{d < hd} q[i][d] * k_b[d][l],  d in order
  // (one fused multiply-add per d on the SIMD paths), so a lane's score does not depend on the
  // blocks or queries computed with it. nullptr: ScalarAttnScores16.
  void (*attn_scores16)(DType t, const uint8_t* kb, size_t block_stride, int64_t n_blocks,
                        int64_t hd, const float* const* q, int nq, float* const* s) = nullptr;

  // Attention's weighted sums of values for nq queries, rows at v + j * row_stride of type t
  // (F32, F16, BF16):
  //   acc[i][d] += sum_{j < n} p[i][j] * v_j[d],  j in order, one fused multiply-add per j
  // (axpy_gather's numbers for these types, query by query). False, with nothing done, for a
  // head_dim or type it has no kernel for (then the caller uses axpy_gather). nullptr: none.
  bool (*attn_values)(DType t, const uint8_t* v, size_t row_stride, int64_t n, int64_t hd,
                      const float* const* p, int nq, float* const* acc) = nullptr;
};

float ScalarExpSum(float* x, int64_t n, float max);
void ScalarAttnScores16(DType t, const uint8_t* kb, size_t block_stride, int64_t n_blocks,
                        int64_t hd, const float* const* q, int nq, float* const* s);

void ScalarPrepTiled(DType t, const float* x, int64_t cols, void* out);
void ScalarDotTiled(DType t, const uint8_t* groups, const TiledGeometry& g, const void* xp,
                    size_t xp_stride, int64_t n_tok, float* y, size_t y_stride);

constexpr int64_t kMaxDotChunks = 64;

// One table per path. Avx2Kernels/Avx512Kernels return nullptr in builds without x86 support.
const IsaKernels* ScalarKernels();
const IsaKernels* PortableKernels();
const IsaKernels* Avx2Kernels();
const IsaKernels* Avx512Kernels();

}  // namespace weir::kernels::internal
