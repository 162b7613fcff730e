// What the public kernels call instead of a path's raw table entries: every weight type the path
// computes directly (IsaKernels::direct_types) goes to its kernel; every other type goes through
// the type's dequantize_row (tensor/dtype.h) and the path's F32 kernels. So each type has a
// kernel on every path for free, and no type is ever handed to another type's kernel.
//
// Numerics of the fallback: the row dequantized to f32 exactly as DequantizeRow does, then the
// F32 product (MatVec's F32 numerics) against the activation the type's products use: x itself
// for DotKind::kDequant types, and for kInt8Block types (Q5_0 or Q4_K on a path without their
// kernels) x quantized to int8 blocks and widened back, so every path computes the same
// real-number sum.
//
// Thread safety: re-entrant; the fallback's row buffer is the calling thread's scratch
// (ScratchSlot::kDequantRows).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/internal/isa_kernels.h"
#include "tensor/dtype.h"

namespace weir::kernels::internal {

inline bool ComputesDirectly(const IsaKernels& k, DType t) {
  return ((k.direct_types >> GgmlId(t)) & 1u) != 0;
}
// Bit of t in IsaKernels::direct_types.
constexpr uint64_t TypeBit(DType t) { return uint64_t{1} << static_cast<uint32_t>(t); }

// The prepared activation's bytes (0: the kernels read the f32 x) and its preparation.
size_t TypedPrepBytes(const IsaKernels& k, DType t, int64_t cols);
void TypedPrep(const IsaKernels& k, DType t, const float* x, int64_t cols, void* out);

// IsaKernels::dot for any type (xp prepared by TypedPrep, or the f32 x when TypedPrepBytes is 0).
void TypedDot(const IsaKernels& k, DType t, const uint8_t* w, size_t row_stride, int64_t cols,
              int64_t n_rows, const void* xp, size_t xp_stride, int64_t n_tok, float* y,
              size_t y_stride, const uint8_t* pf);

// IsaKernels::axpy_gather for any type.
void TypedAxpyGather(const IsaKernels& k, DType t, const uint8_t* wt, size_t row_stride,
                     int64_t n_out, const int32_t* idx, int64_t n_idx, const float* x, float* acc);

}  // namespace weir::kernels::internal
