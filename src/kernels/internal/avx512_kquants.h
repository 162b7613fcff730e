// The prepared activation of the K types on the AVX-512 path (x86_avx512_kquants.cc, compiled
// with the AVX-512 flags), called by x86_avx512.cc's table; their products are
// internal/avx512_rows16.h. Declarations only (see internal/isa_kernels.h on why no inline code).
//
// The K types multiply in int8 (DotKind::kInt8Block): the activation is quantized to blocks of 32
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

// Whether t is a type this prepares (Q2_K .. Q6_K).
bool Avx512KType(DType t);

// IsaKernels::prep_bytes / prep for a K type (cols a multiple of 256).
size_t Avx512KPrepBytes(DType t, int64_t cols);
void Avx512KPrep(DType t, const float* x, int64_t cols, void* out);

}  // namespace weir::kernels::internal
