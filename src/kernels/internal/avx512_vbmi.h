// The AVX-512 VBMI part of the quantized column form (x86_avx512_vbmi.cc, compiled with
// -mavx512vbmi), used by x86_avx512.cc when the CPU has VBMI. Declarations only (see
// internal/isa_kernels.h on why no inline code).
//
// Thread safety: the functions are re-entrant; the Set...ForTesting functions are global switches
// for tests (relaxed atomics).
#pragma once

#include <cstddef>
#include <cstdint>

namespace weir::kernels::internal {

// Blocks [c, c + n) of `groups` (1 or 2) full groups of 4 rows of Q4_0 (q4) or Q8_0 weights,
// rows[4 g .. 4 g + 3] being group g: for each block b and group g in order,
//   acc[32 b + j] += scale[16 g + b - c] * (bias[16 g + b - c] + sum_k t_k(g, b) * u_k(g, b, j))
// where u is the unsigned weight (Q4_0 nibble; Q8_0 q + 128), t_k(g, b) the int8 coefficient of
// row k of group g packed in byte k of packed[16 g + b - c], and bias = -offset * sum_k t_k(g, b).
// Two groups give the same bits as two calls of one (the accumulator is read and written once).
// pf (or nullptr): 4 * groups rows requested line by line at the offsets being read.
void Avx512VbmiAxpyChunk(bool q4, int groups, const uint8_t* const* rows,
                         const uint8_t* const* pf, int64_t c, int64_t n, const float* scale,
                         const int32_t* packed, const int32_t* bias, float* acc);

// Tests turn the VBMI kernel off to exercise the plain AVX-512 one on the same machine.
void SetAvx512VbmiAllowedForTesting(bool allowed);
// Whether the AVX-512 path uses the VBMI kernel now.
bool Avx512VbmiUsed();
// Tests turn off the two-groups-per-pass form to compare its bits with one group per pass.
void SetAvx512VbmiPairsAllowedForTesting(bool allowed);

}  // namespace weir::kernels::internal
