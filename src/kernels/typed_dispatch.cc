#include "kernels/internal/typed_dispatch.h"

#include <algorithm>

#include "kernels/internal/dispatch.h"
#include "kernels/matvec.h"

namespace weir::kernels::internal {
namespace {

// Rows dequantized per pass of the fallback: enough to amortise the F32 kernel's call and keep
// its several-rows-at-once paths busy, few enough that the f32 rows stay in L2 (at most 64 KiB).
int64_t RowsPerPass(int64_t cols) {
  const int64_t fit = (64 * 1024) / std::max<int64_t>(1, cols * 4);
  return std::clamp<int64_t>(fit, 1, 16);
}

}  // namespace

size_t TypedPrepBytes(const IsaKernels& k, DType t, int64_t cols) {
  if (ComputesDirectly(k, t)) return k.prep_bytes(t, cols);
  // An int8-dot type on a path without its kernel: the f32 values of the quantized activation.
  if (Traits(t).dot == DotKind::kInt8Block) return static_cast<size_t>(cols) * sizeof(float);
  return 0;
}

void TypedPrep(const IsaKernels& k, DType t, const float* x, int64_t cols, void* out) {
  if (ComputesDirectly(k, t)) {
    k.prep(t, x, cols, out);
    return;
  }
  if (Traits(t).dot != DotKind::kInt8Block) return;
  // x quantized to blocks of 32 int8 by ref::QuantizeActivation, then widened back: the
  // dequantized rows times these values are the int8 product's terms.
  auto* xe = static_cast<float*>(out);
  for (int64_t b = 0; b < cols / kQK; ++b) {
    int8_t q[kQK];
    float d = 0;
    ref::QuantizeActivation(x + b * kQK, kQK, q, &d);
    for (int j = 0; j < kQK; ++j) xe[b * kQK + j] = d * static_cast<float>(q[j]);
  }
}

void TypedDot(const IsaKernels& k, DType t, const uint8_t* w, size_t row_stride, int64_t cols,
              int64_t n_rows, const void* xp, size_t xp_stride, int64_t n_tok, float* y,
              size_t y_stride, const uint8_t* pf) {
  if (ComputesDirectly(k, t)) {
    k.dot(t, w, row_stride, cols, n_rows, xp, xp_stride, n_tok, y, y_stride, pf);
    return;
  }
  const DequantizeRowFn dequantize = Traits(t).dequantize_row;
  const int64_t per_pass = RowsPerPass(cols);
  auto* rows = static_cast<float*>(ThreadScratch(
      ScratchSlot::kDequantRows, static_cast<size_t>(per_pass * cols) * sizeof(float)));
  for (int64_t r0 = 0; r0 < n_rows; r0 += per_pass) {
    const int64_t nr = std::min(per_pass, n_rows - r0);
    for (int64_t i = 0; i < nr; ++i) {
      dequantize(w + static_cast<size_t>(r0 + i) * row_stride, rows + i * cols, cols);
    }
    k.dot(DType::kF32, reinterpret_cast<const uint8_t*>(rows), static_cast<size_t>(cols) * 4,
          cols, nr, xp, xp_stride, n_tok, y + r0, y_stride, nullptr);
  }
}

void TypedAxpyGather(const IsaKernels& k, DType t, const uint8_t* wt, size_t row_stride,
                     int64_t n_out, const int32_t* idx, int64_t n_idx, const float* x,
                     float* acc) {
  if (((k.direct_axpy_types >> GgmlId(t)) & 1u) != 0) {
    k.axpy_gather(t, wt, row_stride, n_out, idx, n_idx, x, acc);
    return;
  }
  // One row at a time, in index order: acc += x[i] * row i, the row dequantized first.
  auto* row = static_cast<float*>(
      ThreadScratch(ScratchSlot::kDequantRows, static_cast<size_t>(n_out) * sizeof(float)));
  const DequantizeRowFn dequantize = Traits(t).dequantize_row;
  const int32_t zero = 0;
  for (int64_t i = 0; i < n_idx; ++i) {
    dequantize(wt + static_cast<size_t>(idx[i]) * row_stride, row, n_out);
    k.axpy_gather(DType::kF32, reinterpret_cast<const uint8_t*>(row),
                  static_cast<size_t>(n_out) * 4, n_out, &zero, 1, x + idx[i], acc);
  }
}

}  // namespace weir::kernels::internal
