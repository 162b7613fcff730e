#include "kernels/matvec.h"

#include <algorithm>

#include "base/check.h"
#include "kernels/internal/dispatch.h"
#include "kernels/internal/typed_dispatch.h"
#include "kernels/tiled.h"

namespace weir::kernels {
namespace {

using internal::IsaKernels;

// Tokens that share one pass over the weights in MatMul: their prepared activations (up to
// ~3 bytes per input each) stay in L2 while each weight row is read once for all of them.
constexpr int64_t kTokenChunk = 16;
// ... and for the types whose kernels unpack a group of rows once for all the tokens of a call
// (IsaKernels::wide_token_types): kernels_bench, Gemma 3's shapes (2048x640, 640x2048, 128
// tokens, 1 thread): Q5_0 1.35 -> 1.17 ms, Q4_K 1.50 -> 1.35 with 32; the same made Q8_0 and F16
// ~5% slower, hence per type. 64 since the 16-row kernels keep rows of up to 5632 values
// unpacked (a 1.1B model's shapes, 128 tokens, 1 thread, CPU ms, docs/performance.md: Q6_K
// down 12.5 -> 11.6, gate/up 12.8 -> 11.8 against 32).
constexpr int64_t kWideTokenChunk = 64;
// Rows are handed out in chunks (ParallelForDynamic) of about 1/8 of a thread's share, at least
// 16: long contiguous runs for the prefetchers, yet enough chunks that a thread slowed by other
// load on the machine does less of the work instead of holding everyone up.
size_t RowChunk(int64_t rows, ThreadPool* pool) {
  const size_t threads = pool == nullptr ? 1 : static_cast<size_t>(pool->size());
  const size_t chunk = static_cast<size_t>(rows) / (8 * threads);
  return std::max<size_t>(16, (chunk + 15) / 16 * 16);
}

size_t RoundUp64(size_t n) { return (n + 63) / 64 * 64; }

// Whether the products can share one prepared activation and one parallel section.
bool SameKind(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.cols() == b.cols() && a.layout == b.layout;
}

// The products y_i = W_i · X of weights of one kind (SameKind), n tokens: X is prepared once,
// and the rows of all the W_i (16-row groups when tiled) are split over the pool in one section,
// so a thread that finishes one matrix goes on with the next instead of waiting. The lambdas
// handed to the pool capture only a pointer to this (std::function keeps that without
// allocating).
struct SharedProducts {
  const IsaKernels* k;
  std::span<const TensorView* const> ws;
  float* const* ys;
  const float* x;
  int64_t n;
  int64_t cols;
  bool tiled;
  int64_t unit;  // rows per work unit: 1, or 16 when tiled
  const void* xp;
  size_t xp_stride;

  void Prep(size_t b, size_t e, uint8_t* buf) const {
    for (size_t t = b; t < e; ++t) {
      const float* xt = x + static_cast<int64_t>(t) * cols;
      if (tiled) {
        (k->prep_tiled ? k->prep_tiled : internal::ScalarPrepTiled)(ws[0]->dtype, xt, cols,
                                                                   buf + t * xp_stride);
      } else {
        internal::TypedPrep(*k, ws[0]->dtype, xt, cols, buf + t * xp_stride);
      }
    }
  }

  // Units [u0, u1) of matrix i.
  void Run(size_t i, int64_t u0, int64_t u1) const {
    const TensorView& w = *ws[i];
    const int64_t rows = w.rows();
    const size_t unit_bytes = static_cast<size_t>(unit) * w.row_bytes();
    const auto* base = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(u0) * unit_bytes;
    auto dot_tiled = k->dot_tiled ? k->dot_tiled : internal::ScalarDotTiled;
    const int64_t chunk =
        ((k->wide_token_types >> GgmlId(w.dtype)) & 1u) != 0 ? kWideTokenChunk : kTokenChunk;
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
      const int64_t nt = std::min(chunk, n - t0);
      const auto* xt = static_cast<const uint8_t*>(xp) + static_cast<size_t>(t0) * xp_stride;
      float* yt = ys[i] + t0 * rows + u0 * unit;
      if (tiled) {
        dot_tiled(w.dtype, base, internal::TensorGeometry(w, u1 - u0), xt, xp_stride, nt, yt,
                  static_cast<size_t>(rows));
      } else {
        internal::TypedDot(*k, w.dtype, base, w.row_bytes(), cols, u1 - u0, xt, xp_stride, nt,
                           yt, static_cast<size_t>(rows), nullptr);
      }
    }
  }

  // Units [b, e) numbered across the matrices in order.
  void Range(size_t b, size_t e) const {
    int64_t first = 0;  // first unit of matrix i
    for (size_t i = 0; i < ws.size() && first < static_cast<int64_t>(e); ++i) {
      const int64_t units = ws[i]->rows() / unit;
      const int64_t u0 = std::max<int64_t>(static_cast<int64_t>(b), first);
      const int64_t u1 = std::min<int64_t>(static_cast<int64_t>(e), first + units);
      if (u0 < u1) Run(i, u0 - first, u1 - first);
      first += units;
    }
  }
};

void MatMulSameKind(const IsaKernels& k, std::span<const TensorView* const> ws, const float* x,
                    int64_t n, float* const* ys, ThreadPool* pool) {
  const TensorView& w0 = *ws[0];
  SharedProducts job{&k, ws, ys, x, n, w0.cols(), w0.layout == Layout::kTiled16, 1, x,
                     static_cast<size_t>(w0.cols()) * sizeof(float)};
  job.unit = job.tiled ? kTileRows : 1;
  const size_t prep_bytes = job.tiled ? static_cast<size_t>(job.cols / kQK) * kTiledRecordBytes
                                      : RoundUp64(internal::TypedPrepBytes(k, w0.dtype, job.cols));
  if (prep_bytes > 0) {
    auto* buf = static_cast<uint8_t*>(internal::ThreadScratch(
        internal::ScratchSlot::kActivation, prep_bytes * static_cast<size_t>(n)));
    job.xp = buf;
    job.xp_stride = prep_bytes;
    if (n >= 4) {
      struct PrepJob {
        const SharedProducts* job;
        uint8_t* buf;
      } pj{&job, buf};
      ParallelFor(pool, static_cast<size_t>(n),
                  [&pj](size_t b, size_t e, int) { pj.job->Prep(b, e, pj.buf); });
    } else {
      job.Prep(0, static_cast<size_t>(n), buf);
    }
  }
  int64_t total_rows = 0;
  for (const TensorView* w : ws) total_rows += w->rows();
  ParallelForDynamic(
      pool, static_cast<size_t>(total_rows / job.unit),
      [&job](size_t b, size_t e, int) { job.Range(b, e); },
      RowChunk(total_rows, pool) / static_cast<size_t>(job.unit));
}

}  // namespace

void MatVec(const TensorView& w, const float* x, float* y, ThreadPool* pool) {
  MatMul(w, x, 1, y, pool);
}

void MatMul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  const TensorView* ws[] = {&w};
  float* ys[] = {y};
  MatMulShared(ws, x, n, ys, pool);
}

void MatMulShared(std::span<const TensorView* const> ws, const float* x, int64_t n,
                  float* const* ys, ThreadPool* pool) {
  if (n <= 0 || ws.empty()) return;
  const IsaKernels& k = internal::ActiveKernels();
  // Runs of consecutive weights of one kind (at most kMaxShared) share a section; a different
  // kind starts another. Fixed arrays: a warm call allocates nothing.
  constexpr size_t kMaxShared = 8;
  const TensorView* run[kMaxShared];
  float* outs[kMaxShared];
  size_t count = 0;
  for (size_t i = 0; i <= ws.size(); ++i) {
    if (i < ws.size() && ws[i]->rows() == 0) continue;
    if (count > 0 && (i == ws.size() || count == kMaxShared || !SameKind(*ws[i], *run[0]))) {
      MatMulSameKind(k, std::span<const TensorView* const>(run, count), x, n, outs, pool);
      count = 0;
    }
    if (i == ws.size()) break;
    WEIR_CHECK(ws[i]->cols() % BlockSize(ws[i]->dtype) == 0);
    run[count] = ws[i];
    outs[count] = ys[i];
    ++count;
  }
}

void DotRowsF32(const float* w, size_t row_stride, int64_t rows, int64_t cols, const float* x,
                float* y) {
  if (rows <= 0) return;
  internal::ActiveKernels().dot(DType::kF32, reinterpret_cast<const uint8_t*>(w),
                                row_stride * sizeof(float), cols, rows, x,
                                static_cast<size_t>(cols) * sizeof(float), 1, y, 1, nullptr);
}

}  // namespace weir::kernels
