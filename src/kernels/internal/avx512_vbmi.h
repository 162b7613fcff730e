// The AVX-512 VBMI part of the quantized column form (x86_avx512_vbmi.cc, compiled with
// -mavx512vbmi), used by x86_avx512.cc when the CPU has VBMI. Declarations only (see
// internal/isa_kernels.h on why no inline code).
//
// Thread safety: the functions are re-entrant; SetAvx512VbmiAllowedForTesting is a global switch
// for tests (relaxed atomic).
#pragma once

#include <cstddef>
#include <cstdint>

namespace weir::kernels::internal {

// Blocks [c, c + n) of a full group of 4 rows of Q4_0 (q4) or Q8_0 weights: for each block b,
//   acc[32 b + j] += scale[b - c] * (bias[b - c] + sum_k t_k(b) * u_k(b, j))
// where u is the unsigned weight (Q4_0 nibble; Q8_0 q + 128), t_k(b) the int8 coefficient of row
// k packed in byte k of packed[b - c], and bias[b - c] = -offset * sum_k t_k(b). pf (or nullptr):
// 4 rows requested line by line at the offsets being read.
void Avx512VbmiAxpyChunk(bool q4, const uint8_t* const* rows, const uint8_t* const* pf, int64_t c,
                         int64_t n, const float* scale, const int32_t* packed, const int32_t* bias,
                         float* acc);

// Tests turn the VBMI kernel off to exercise the plain AVX-512 one on the same machine.
void SetAvx512VbmiAllowedForTesting(bool allowed);
// Whether the AVX-512 path uses the VBMI kernel now.
bool Avx512VbmiUsed();

}  // namespace weir::kernels::internal
