// The AVX-512 kernels of Q5_0 (x86_avx512_rows16.cc, compiled with the AVX-512 flags), called by
// x86_avx512.cc's table for every form of the row product: dense rows with any number of tokens
// (decode and prefill) and gathered rows. Declarations only (see internal/isa_kernels.h on why no
// inline code).
//
// 16 rows are multiplied at once with one row per 32-bit lane: the 16 rows' block b is unpacked
// into 8 vectors (vector j: values 4j..4j+3 of each row) and each token's integer block sum is 8
// vpdpbusd against the token's four int8 activation values broadcast to every lane. So each
// lane ends a block with the exact integer sum of its row, and one convert and one fused
// multiply-add per block and token add it, scaled by d_w d_x, to the row's sum:
//   y = (...((0 + s_0 d_w0 d_x0) + s_1 d_w1 d_x1) + ...)   s_b exact, one rounding per step.
// A row's result is that sequence whatever it is computed with (rows, tokens, form), so prefill
// equals decode and the gathered form equals the dense one bit for bit. Unpacking 16 rows' block
// costs about as much as 8 tokens' products and is shared by the up to 8 tokens of a pass, where
// the pair-of-blocks kernel of x86_avx512.cc spent a permute, a convert and an FMA per 64
// products per token (docs/performance.md, "Gemma 3 prefill").
//
// The prepared activation is x86_avx512.cc's Q5_0 layout: PairCount(nb) records of 128 bytes (int8
// q of blocks A, B as A[0..15] B[0..15] A[16..31] B[16..31], then 64 unused bytes), f32
// dx[Pad16(nb)], then int32 bias[Pad16(nb)] = -16 * sum(q of block b) (the weights are the
// unsigned 0..31; the bias takes the offset 16 back out).
//
// Thread safety: re-entrant.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weir::kernels::internal {

// Dense rows: y[tok * y_stride + r] = row r · x_tok for r < n_rows, tok < n_tok; rows at
// w + r * row_stride (cols / 32 blocks of 22 bytes), x_tok prepared at xp + tok * xp_stride. pf
// as in IsaKernels::dot (a region laid out like w, requested at the offsets being read).
void Avx512Q50Dot(const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                  const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                  const uint8_t* pf);

// Gathered rows against one token: y[idx[k]] = row idx[k] · x for k < n_idx, bitwise what
// Avx512Q50Dot gives those rows.
void Avx512Q50DotGather(const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
                        int64_t n_idx, const void* xp, float* y);

// The same two for Q4_K (256-value super-blocks, one convert and FMA per 32-value sub-block; the
// prepared activation is x86_avx512_kquants.cc's).
void Avx512Q4KRows16Dot(const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                        const void* xp, size_t xp_stride, int64_t n_tok, float* y,
                        size_t y_stride, const uint8_t* pf);
void Avx512Q4KRows16Gather(const uint8_t* w, size_t row_stride, int64_t cols, const int32_t* idx,
                           int64_t n_idx, const void* xp, float* y);

}  // namespace weir::kernels::internal
