// The AVX-512 kernels of Q8_0, Q5_0, Q4_K and Q6_K (x86_avx512_rows16.cc, compiled with the AVX-512
// flags), called by x86_avx512.cc's table for every form of the row product: dense rows with any
// number of tokens (decode and prefill) and gathered rows. Declarations only (see
// internal/isa_kernels.h on why no inline code).
//
// 16 rows are multiplied at once with one row per 32-bit lane: a unit of values sharing one scale
// (a Q5_0 block or Q4_K sub-block of 32, a Q6_K sub-block of 16) of the 16 rows is unpacked into
// 8 (4) vectors (vector j: values 4j..4j+3 of each row) and each token's integer sum over the
// unit is 8 (4) vpdpbusd against the token's four int8 activation values broadcast to every lane.
// So each lane ends a unit with the exact integer sum of its row, and one convert and one fused
// multiply-add per unit and token add it, scaled by d_w d_x, to the row's sum (Q4_K: then one more
// subtracts the unit's min term dmin m sx):
//   y = (...((0 + s_0 d_w0 d_x0) + s_1 d_w1 d_x1) + ...)   s_u exact, one rounding per step.
// A row's result is that sequence whatever it is computed with (rows, tokens, form), so prefill
// equals decode and the gathered form equals the dense one bit for bit. Unpacking 16 rows' unit
// costs about as much as 8 tokens' products and is shared by the up to 8 tokens of a pass (and
// kept for the next passes when the call has more tokens), where the kernels these replace spent
// a permute, a convert and an FMA per 64 products per token and unpacked a row again for every
// 4 tokens (docs/performance.md, "Gemma 3 prefill: 16 rows at a time").
//
// Prepared activations:
//   Q5_0, Q8_0: x86_avx512.cc's records: PairCount(nb) records of 128 bytes (int8 q of blocks
//         A, B as A[0..15] B[0..15] A[16..31] B[16..31], then 64 unused bytes), f32
//         dx[Pad16(nb)], then int32 bias[Pad16(nb)] = -16 (Q5_0) or -128 (Q8_0) * sum(q of block
//         b) (the weights are the unsigned q 0..31, or q + 128; the bias takes the offset back
//         out).
//   Q4_K, Q6_K: x86_avx512_kquants.cc's (int8 q; Q4_K f32 dx, f32 sx = dx * sum(q) per block;
//         Q6_K int32 -32 * sum(q) per 16 values, f32 dx).
//
// Thread safety: re-entrant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace weir::kernels::internal {

// Whether t is a type these kernels compute (Q8_0, Q5_0, Q4_K, Q6_K).
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
