// The AVX-512 kernels of Q8_0, Q5_0, Q5_1 and the K types (x86_avx512_rows16.cc, compiled with the
// AVX-512 flags), called by x86_avx512.cc's table for every form of the row product: dense rows
// with any number of tokens (decode and prefill) and gathered rows. Declarations only (see
// internal/isa_kernels.h on why no inline code).
//
// 16 rows are multiplied at once with one row per 32-bit lane: a unit of values sharing one scale
// (a Q5_0 / Q5_1 block or Q4_K / Q5_K sub-block of 32, a Q2_K / Q3_K / Q6_K sub-block of 16) of the
// 16 rows is unpacked into 8 (4) vectors (vector j: values 4j..4j+3 of each row) and each token's
// integer sum over the unit is 8 (4) vpdpbusd against the token's four int8 activation values
// broadcast to every lane. So each lane ends a unit with the exact integer sum of its row, and one
// convert and one fused multiply-add per unit and token add it, scaled by d_w d_x, to the row's sum
// (Q4_K, Q5_K, Q2_K: then one more subtracts the unit's min term dmin m sx; Q5_1 adds m sx):
//   y = (...((0 + s_0 d_w0 d_x0) + s_1 d_w1 d_x1) + ...)   s_u exact, one rounding per step.
// A row's result is that sequence whatever it is computed with (rows, tokens, form), so prefill equals
// decode and the gathered form equals the dense one bit for bit. Unpacking 16 rows' unit costs
// about as much as 8 tokens' products and is shared by the up to 8 tokens of a pass (and kept for
// the next passes when the call has more tokens), where the kernels these replace spent a permute,
// a convert and an FMA per 64 products per token and unpacked a row again for every 4 tokens
// (docs/performance.md, "Gemma 3 prefill: 16 rows at a time").
//
// Prepared activations:
//   Q5_0, Q8_0: x86_avx512.cc's records: PairCount(nb) records of 128 bytes (int8 q of blocks
//         A, B as A[0..15] B[0..15] A[16..31] B[16..31], then 64 unused bytes), f32
//         dx[Pad16(nb)], then int32 bias[Pad16(nb)] = -16 (Q5_0) or -128 (Q8_0) * sum(q of block
//         b) (the weights are the unsigned q 0..31, or q + 128; the bias takes the offset back
//         out).
//   Q5_1: the same records, f32 dx[Pad16(nb)], then f32 sx[Pad16(nb)] = dx * sum(q of block b)
//         (Q4_1's).
//   K types: x86_avx512_kquants.cc's (int8 q; Q4_K / Q5_K f32 dx, f32 sx = dx * sum(q) per block;
//         Q6_K / Q3_K int32 -32 / -4 * sum(q) per 16 values, Q2_K f32 dx * sum(q) per 16 values,
//         then f32 dx).
//
// Thread safety: re-entrant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace weir::kernels::internal {

// The types these kernels compute (bit GgmlId(t)): Q5_0 (6), Q5_1 (7), Q8_0 (8), Q2_K (10),
// Q3_K (11), Q4_K (12), Q5_K (13), Q6_K (14), IQ4_NL (20), IQ4_XS (23). x86_avx512.cc's table takes them from here, so a
// type is added here and in x86_avx512_rows16.cc (and its activation's preparation) only.
constexpr uint64_t kAvx512Rows16Types = (uint64_t{1} << 6) | (uint64_t{1} << 7) |
                                        (uint64_t{1} << 8) | (uint64_t{1} << 10) |
                                        (uint64_t{1} << 11) | (uint64_t{1} << 12) |
                                        (uint64_t{1} << 13) | (uint64_t{1} << 14) |
                                        (uint64_t{1} << 20) | (uint64_t{1} << 23);

// Whether t is one of kAvx512Rows16Types.
bool Avx512Rows16Type(DType t);

// Dense rows: y[tok * y_stride + r] = row r · x_tok for r < n_rows, tok < n_tok; rows at
// w + r * row_stride, x_tok prepared at xp + tok * xp_stride. pf as in IsaKernels::dot (a region
// laid out like w, requested at the offsets being read).
void Avx512Rows16Dot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                     const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                     const uint8_t* pf);

// Gathered rows against one token: y[idx[k]] = row idx[k] · x for k < n_idx, bitwise what
// Avx512Rows16Dot gives those rows.
void Avx512Rows16Gather(DType t, const uint8_t* w, size_t row_stride, int64_t cols,
                        const int32_t* idx, int64_t n_idx, const void* xp, float* y);

}  // namespace weir::kernels::internal
