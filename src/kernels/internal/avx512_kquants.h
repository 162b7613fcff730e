// The AVX-512 kernels of the K types (x86_avx512_kquants.cc, compiled with the AVX-512 flags),
// called by x86_avx512.cc's table: the prepared activation of Q4_K and Q6_K and the products of
// Q6_K (Q4_K's are in internal/avx512_rows16.h). Declarations only (see internal/isa_kernels.h
// on why no inline code).
//
// Both types multiply in int8 (DotKind::kInt8Block): the activation is quantized to blocks of 32
// int8 with one f32 scale each, exactly as ref::QuantizeActivation does, and each sub-block's
// integer sum is scaled by (weight sub-block scale * activation block scale), the arithmetic of
// the reference (kernels/reference.cc) up to the order of the f32 additions.
//
// Thread safety: re-entrant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace weir::kernels::internal {

// Whether t is a type these kernels compute (Q4_K, Q6_K).
bool Avx512KType(DType t);

// IsaKernels::prep_bytes / prep for a K type (cols a multiple of 256).
size_t Avx512KPrepBytes(DType t, int64_t cols);
void Avx512KPrep(DType t, const float* x, int64_t cols, void* out);

// IsaKernels::dot for Q6_K (Q4_K: internal/avx512_rows16.h): rows r < n_rows (at w + r * row_stride) against tokens
// tok < n_tok (prepared at xp + tok * xp_stride), y[tok * y_stride + r]; pf as in IsaKernels.
void Avx512KDot(DType t, const uint8_t* w, size_t row_stride, int64_t cols, int64_t n_rows,
                const void* xp, size_t xp_stride, int64_t n_tok, float* y, size_t y_stride,
                const uint8_t* pf);

// Q6_K, n (1..4) rows against one token: *y[i] = rows[i] · x, bitwise what Avx512KDot gives that row
// with n_tok = 1. pf (or nullptr): n rows requested line by line at the offsets being read.
void Avx512KDotRows(DType t, const uint8_t* const* rows, int n, int64_t cols, const void* xp,
                    float* const* y, const uint8_t* const* pf);

}  // namespace weir::kernels::internal
