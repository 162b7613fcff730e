#include "kernels/gather.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "kernels/internal/dispatch.h"
#include "kernels/internal/typed_dispatch.h"

namespace weir::kernels {
namespace {

using internal::IsaKernels;

// Indices are handed out in chunks (ParallelForDynamic) of about 1/8 of a thread's share, at
// least 8 rows, so a thread slowed by other load takes fewer of them.
// A multiple of internal::kGatherGroup, so the column form's groups do not depend on the pool.
size_t IndexChunk(int64_t n_idx, ThreadPool* pool) {
  const size_t threads = pool == nullptr ? 1 : static_cast<size_t>(pool->size());
  const size_t chunk = std::max<size_t>(8, static_cast<size_t>(n_idx) / (8 * threads));
  return (chunk + internal::kGatherGroup - 1) / internal::kGatherGroup * internal::kGatherGroup;
}

void CheckIndices(const int32_t* idx, int64_t n_idx, int64_t limit) {
  for (int64_t k = 0; k < n_idx; ++k) WEIR_CHECK(idx[k] >= 0 && idx[k] < limit);
}

constexpr size_t kGatherAheadBytes = 4096;

// Asks for a row that will be read soon: rows of a gather start at unrelated addresses, where
// the hardware prefetcher needs a few misses of its own to lock on.
inline void PrefetchRow(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
}

struct ColsJob {
  const IsaKernels* k;
  const TensorView* wt;
  const int32_t* idx;
  const float* x;
  float* y;         // thread 0's accumulator
  float* partials;  // thread i > 0 accumulates into partials + (i - 1) * n_out

  void Run(size_t b, size_t e, int thread) const {
    const int64_t n_out = wt->cols();
    float* acc = thread == 0 ? y : partials + static_cast<size_t>(thread - 1) * n_out;
    internal::TypedAxpyGather(*k, wt->dtype, wt->row(0), wt->row_bytes(), n_out, idx + b,
                   static_cast<int64_t>(e - b), x, acc);
  }
};

struct RowsJob {
  const IsaKernels* k;
  const TensorView* w;
  const int32_t* idx;
  const void* xp;
  float* y;

  void Run(size_t b, size_t e) const {
    const size_t row_bytes = w->row_bytes();
    if (k->dot_gather != nullptr && internal::ComputesDirectly(*k, w->dtype)) {
      k->dot_gather(w->dtype, w->row(0), row_bytes, w->cols(), idx + b, static_cast<int64_t>(e - b),
                    xp, y);
      return;
    }
    // Each row is requested while the row this many positions before it is computed (the
    // kernel streams the requests at its reading pace): about 2 KiB of lead, at least one row.
    const size_t ahead = (kGatherAheadBytes + row_bytes - 1) / row_bytes;
    for (size_t i = b; i < std::min(e, b + ahead); ++i) PrefetchRow(w->row(idx[i]), row_bytes);
    for (size_t i = b; i < e; ++i) {
      const uint8_t* next = i + ahead < e ? w->row(idx[i + ahead]) : nullptr;
      internal::TypedDot(*k, w->dtype, w->row(idx[i]), row_bytes, w->cols(), 1, xp, 0, 1,
                         y + idx[i], 0, next);
    }
  }
};

}  // namespace

void GatherMatVecCols(const TensorView& wt, const int32_t* idx, int64_t n_idx, const float* x,
                      float* y, ThreadPool* pool) {
  const int64_t n_out = wt.cols();
  WEIR_CHECK(n_out % BlockSize(wt.dtype) == 0);
  CheckIndices(idx, n_idx, wt.rows());
  std::memset(y, 0, static_cast<size_t>(n_out) * sizeof(float));
  if (n_idx <= 0) return;
  const IsaKernels& k = internal::ActiveKernels();
  const int n_threads = pool == nullptr ? 1 : pool->size();
  float* partials = nullptr;
  if (n_threads > 1) {
    const size_t bytes = static_cast<size_t>(n_threads - 1) * n_out * sizeof(float);
    partials =
        static_cast<float*>(internal::ThreadScratch(internal::ScratchSlot::kPartialSums, bytes));
    std::memset(partials, 0, bytes);
  }
  ColsJob job{&k, &wt, idx, x, y, partials};
  // A static split: slice s of the index list (whole groups of kGatherGroup) always goes into
  // accumulator s and the accumulators are added in slice order, so the result depends on the
  // pool's size only, never on which thread ran what (a streamed run then matches a resident one
  // bit for bit).
  const size_t slices = static_cast<size_t>(n_threads);
  const size_t G = internal::kGatherGroup;
  const size_t groups = (static_cast<size_t>(n_idx) + G - 1) / G;
  auto slice_begin = [&](size_t sl) {
    return std::min(static_cast<size_t>(n_idx), groups * sl / slices * G);
  };
  ParallelFor(
      pool, slices,
      [&](size_t b, size_t e, int) {
        for (size_t sl = b; sl < e; ++sl) {
          const size_t lo = slice_begin(sl), hi = slice_begin(sl + 1);
          if (lo < hi) job.Run(lo, hi, static_cast<int>(sl));
        }
      },
      1);
  for (int t = 1; t < n_threads; ++t) {
    const float* p = partials + static_cast<size_t>(t - 1) * n_out;
    for (int64_t j = 0; j < n_out; ++j) y[j] += p[j];
  }
}

void GatherMatVecRows(const TensorView& w, const int32_t* idx, int64_t n_idx, const float* x,
                      float* y, ThreadPool* pool) {
  const int64_t cols = w.cols();
  WEIR_CHECK(cols % BlockSize(w.dtype) == 0);
  CheckIndices(idx, n_idx, w.rows());
  if (n_idx <= 0) return;
  const IsaKernels& k = internal::ActiveKernels();
  const void* xp = x;
  const size_t prep_bytes = internal::TypedPrepBytes(k, w.dtype, cols);
  if (prep_bytes > 0) {
    void* buf = internal::ThreadScratch(internal::ScratchSlot::kActivation, prep_bytes);
    internal::TypedPrep(k, w.dtype, x, cols, buf);
    xp = buf;
  }
  RowsJob job{&k, &w, idx, xp, y};
  ParallelForDynamic(
      pool, static_cast<size_t>(n_idx), [&job](size_t b, size_t e, int) { job.Run(b, e); },
      IndexChunk(n_idx, pool));
}

}  // namespace weir::kernels
