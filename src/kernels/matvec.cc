#include "kernels/matvec.h"

#include <algorithm>

#include "base/check.h"
#include "kernels/internal/dispatch.h"
#include "kernels/tiled.h"

namespace weir::kernels {
namespace {

using internal::IsaKernels;

// Tokens that share one pass over the weights in MatMul: their prepared activations (up to
// ~3 bytes per input each) stay in L2 while each weight row is read once for all of them.
constexpr int64_t kTokenChunk = 16;
// Rows are handed out in chunks (ParallelForDynamic) of about 1/8 of a thread's share, at least
// 16: long contiguous runs for the prefetchers, yet enough chunks that a thread slowed by other
// load on the machine does less of the work instead of holding everyone up.
size_t RowChunk(int64_t rows, ThreadPool* pool) {
  const size_t threads = pool == nullptr ? 1 : static_cast<size_t>(pool->size());
  const size_t chunk = static_cast<size_t>(rows) / (8 * threads);
  return std::max<size_t>(16, (chunk + 15) / 16 * 16);
}

size_t RoundUp64(size_t n) { return (n + 63) / 64 * 64; }

struct MatMulJob {
  const IsaKernels* k;
  const TensorView* w;
  const void* xp;
  size_t xp_stride;
  int64_t n_tok;
  float* y;

  void Run(size_t row_begin, size_t row_end) const {
    const int64_t rows = w->rows();
    const size_t row_bytes = w->row_bytes();
    for (int64_t t0 = 0; t0 < n_tok; t0 += kTokenChunk) {
      const int64_t nt = std::min(kTokenChunk, n_tok - t0);
      k->dot(w->dtype, w->row(static_cast<int64_t>(row_begin)), row_bytes, w->cols(),
             static_cast<int64_t>(row_end - row_begin),
             static_cast<const uint8_t*>(xp) + static_cast<size_t>(t0) * xp_stride, xp_stride, nt,
             y + t0 * rows + static_cast<int64_t>(row_begin), static_cast<size_t>(rows), nullptr);
    }
  }
};

// MatMul over a tiled tensor (tiled.h): the same token chunks, work split by 16-row groups.
void MatMulTiled(const IsaKernels& k, const TensorView& w, const float* x, int64_t n, float* y,
                 ThreadPool* pool) {
  const int64_t cols = w.cols(), nb = cols / kQK, n_groups = w.rows() / kTileRows;
  auto prep_fn = k.prep_tiled ? k.prep_tiled : internal::ScalarPrepTiled;
  auto dot_fn = k.dot_tiled ? k.dot_tiled : internal::ScalarDotTiled;
  const size_t prep_bytes = static_cast<size_t>(nb) * kTiledRecordBytes;
  auto* xp = static_cast<uint8_t*>(internal::ThreadScratch(internal::ScratchSlot::kActivation,
                                                          prep_bytes * static_cast<size_t>(n)));
  auto prep = [&](size_t b, size_t e, int) {
    for (size_t t = b; t < e; ++t) prep_fn(w.dtype, x + static_cast<int64_t>(t) * cols, cols, xp + t * prep_bytes);
  };
  if (n >= 4) {
    ParallelFor(pool, static_cast<size_t>(n), prep);
  } else {
    prep(0, static_cast<size_t>(n), 0);
  }
  const size_t group_bytes = static_cast<size_t>(kTileRows) * w.row_bytes();
  const int64_t rows = w.rows();
  auto run = [&](size_t g0, size_t g1, int) {
    for (int64_t t0 = 0; t0 < n; t0 += kTokenChunk) {
      const int64_t nt = std::min(kTokenChunk, n - t0);
      dot_fn(w.dtype, static_cast<const uint8_t*>(w.data) + g0 * group_bytes, group_bytes, nb,
             static_cast<int64_t>(g1 - g0), xp + static_cast<size_t>(t0) * prep_bytes, prep_bytes,
             nt, y + t0 * rows + static_cast<int64_t>(g0) * kTileRows, static_cast<size_t>(rows));
    }
  };
  ParallelForDynamic(pool, static_cast<size_t>(n_groups), run,
                     RowChunk(w.rows(), pool) / static_cast<size_t>(kTileRows));
}

}  // namespace

void MatVec(const TensorView& w, const float* x, float* y, ThreadPool* pool) {
  MatMul(w, x, 1, y, pool);
}

void DotRowsF32(const float* w, size_t row_stride, int64_t rows, int64_t cols, const float* x,
                float* y) {
  if (rows <= 0) return;
  internal::ActiveKernels().dot(DType::kF32, reinterpret_cast<const uint8_t*>(w),
                                row_stride * sizeof(float), cols, rows, x,
                                static_cast<size_t>(cols) * sizeof(float), 1, y, 1, nullptr);
}

void MatMul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  if (n <= 0 || w.rows() == 0) return;
  const IsaKernels& k = internal::ActiveKernels();
  const int64_t cols = w.cols();
  WEIR_CHECK(cols % BlockSize(w.dtype) == 0);
  if (w.layout == Layout::kTiled16) {
    MatMulTiled(k, w, x, n, y, pool);
    return;
  }

  MatMulJob job{&k, &w, x, static_cast<size_t>(cols) * sizeof(float), n, y};
  const size_t prep_bytes = RoundUp64(k.prep_bytes(w.dtype, cols));
  if (prep_bytes > 0) {
    void* buf = internal::ThreadScratch(internal::ScratchSlot::kActivation,
                                        prep_bytes * static_cast<size_t>(n));
    auto prep = [&](size_t b, size_t e, int) {
      for (size_t t = b; t < e; ++t) {
        k.prep(w.dtype, x + static_cast<int64_t>(t) * cols, cols,
               static_cast<uint8_t*>(buf) + t * prep_bytes);
      }
    };
    if (n >= 4) {
      ParallelFor(pool, static_cast<size_t>(n), prep);
    } else {
      prep(0, static_cast<size_t>(n), 0);
    }
    job.xp = buf;
    job.xp_stride = prep_bytes;
  }
  ParallelForDynamic(
      pool, static_cast<size_t>(w.rows()), [&job](size_t b, size_t e, int) { job.Run(b, e); },
      RowChunk(w.rows(), pool));
}

}  // namespace weir::kernels
