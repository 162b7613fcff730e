#include "kernels/chunked_matvec.h"

#include <algorithm>

#include "base/check.h"
#include "kernels/internal/dispatch.h"
#include "kernels/internal/typed_dispatch.h"
#include "kernels/matvec.h"
#include "tensor/tensor_view.h"

namespace weir::kernels {

namespace {

size_t RoundUp64(size_t n) { return (n + 63) / 64 * 64; }

// The quantized kernels prepare the inputs of up to this many chunks on their stack.
constexpr int64_t kChunkBatch = internal::kMaxDotChunks;

}  // namespace

void ChunkedMatVec(DType t, const uint8_t* w, size_t row_stride, size_t chunk_stride,
                   int64_t n_chunks, int width, int64_t rows, const float* x, float* y,
                   bool accumulate) {
  WEIR_CHECK(width > 0 && width % BlockSize(t) == 0 && n_chunks >= 0 && rows >= 0);
  if (rows == 0) return;
  if (n_chunks == 0) {
    if (!accumulate) std::fill(y, y + rows, 0.0f);
    return;
  }
  const internal::IsaKernels& k = internal::ActiveKernels();
  if (k.dot_chunks != nullptr && IsQuantized(t) && width == 32 && row_stride < (1u << 27)) {
    for (int64_t c = 0; c < n_chunks; c += kChunkBatch) {
      k.dot_chunks(t, w + static_cast<size_t>(c) * chunk_stride, row_stride, chunk_stride,
                   std::min(kChunkBatch, n_chunks - c), rows, x + c * width, y,
                   accumulate || c > 0);
    }
    return;
  }
  // Any path: the path's dense dot over each chunk into scratch, then added in chunk order.
  const size_t prep = RoundUp64(internal::TypedPrepBytes(k, t, width));
  auto* scratch = static_cast<uint8_t*>(internal::ThreadScratch(
      internal::ScratchSlot::kPartialSums, RoundUp64(static_cast<size_t>(rows) * 4) + prep));
  float* part = reinterpret_cast<float*>(scratch);
  void* xp = scratch + RoundUp64(static_cast<size_t>(rows) * 4);
  for (int64_t c = 0; c < n_chunks; ++c) {
    const float* xc = x + c * width;
    if (prep > 0) internal::TypedPrep(k, t, xc, width, xp);
    internal::TypedDot(k, t, w + static_cast<size_t>(c) * chunk_stride, row_stride, width, rows,
          prep > 0 ? static_cast<const void*>(xp) : xc,
          prep > 0 ? prep : static_cast<size_t>(width) * 4, 1, part, static_cast<size_t>(rows),
          nullptr);
    if (c == 0 && !accumulate) {
      std::copy(part, part + rows, y);
    } else {
      for (int64_t r = 0; r < rows; ++r) y[r] += part[r];
    }
  }
}

namespace ref {

void ChunkedMatVec(DType t, const uint8_t* w, size_t row_stride, size_t chunk_stride,
                   int64_t n_chunks, int width, int64_t rows, const float* x, float* y,
                   bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc = accumulate ? y[r] : 0.0f;
    for (int64_t c = 0; c < n_chunks; ++c) {
      const TensorView chunk{t, Shape{rows, width},
                             w + static_cast<size_t>(c) * chunk_stride};
      acc += DotRow(chunk, r, x + c * width);
    }
    y[r] = acc;
  }
}

}  // namespace ref

}  // namespace weir::kernels
