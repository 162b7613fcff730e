// The AVX2 kernels of Q5_0, Q5_1 and the K types (x86_avx2_rows8.cc, compiled with the AVX2 flags),
// called by x86_avx2.cc's table for every form of the row product (dense rows with any number of
// tokens, gathered rows). Declarations only (see internal/isa_kernels.h on why no inline code).
//
// The form of internal/avx512_rows16.h on 256-bit vectors: 8 rows a pass, one per 32-bit lane; a
// unit of values sharing one scale (Q5_0 / Q5_1 block, Q4_K / Q5_K sub-block of 32, Q2_K / Q3_K /
// Q6_K sub-block of 16) is unpacked into 8 (4) vectors (vector j: values 4j..4j+3 of each row),
// each token's integer sum over the unit is vpmaddubsw + vpmaddwd against its four int8 activation
// values broadcast to every lane (the 16-bit partial sums are added only as far as they cannot
// overflow), and one convert and one FMA per unit and token add it, scaled by d_w d_x, to the row's
// total (Q4_K, Q5_K, Q5_1, Q2_K: one more for the min term). A row's result is the same sequence
// whatever it is computed with, so prefill, decode and the gathered form agree bit for bit.
//
// Prepared activation: x86_avx2.cc's records (one 64-byte record per block of 32: int8 q in
// natural order, then 32 unused bytes), f32 dx[Pad8(nb)], then int32 sum16[2 nb]: the sum of the
// q of each 16 values.
//
// Thread safety: re-entrant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace weir::kernels::internal {

// The types these kernels compute (bit GgmlId(t)): Q5_0 (6), Q5_1 (7), Q2_K (10), Q3_K (11),
// Q4_K (12), Q5_K (13), Q6_K (14). x86_avx2.cc's table takes them from here.
constexpr uint64_t kAvx2Rows8Types = (uint64_t{1} << 6) | (uint64_t{1} << 7) |
                                     (uint64_t{1} << 10) | (uint64_t{1} << 11) |
                                     (uint64_t{1} << 12) | (uint64_t{1} << 13) |
                                     (uint64_t{1} << 14);

// Whether t is one of kAvx2Rows8Types.
bool Avx2Rows8Type(DType t);

// Dense rows: y[tok * y_stride + r] = row r · x_tok for r < n_rows, tok < n_tok; pf as in
// IsaKernels::dot.
void Avx2Rows8Dot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                  const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                  const uint8_t* pf);

// Gathered rows against one token: y[idx[k]] = row idx[k] · x, bitwise what Avx2Rows8Dot gives.
void Avx2Rows8Gather(DType t, const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
                     int64_t n_idx, const void* xp, float* y);

}  // namespace weir::kernels::internal
