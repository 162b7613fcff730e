// Kernel micro-benchmarks (Google Benchmark) at llama-1b shapes, with a STREAM-style memory
// bandwidth measurement in the same run so kernel GB/s can be read as a fraction of what the
// memory delivers right now (it drifts by 2x within minutes on a shared VM).
//
// Each matrix benchmark cycles through copies of its weights spanning WEIR_BENCH_MB (default
// 1024) MiB, so every call reads its weights from DRAM as a decode step does (one matrix alone
// would sit in the caches). Bytes/s counts the weight bytes each call must read.
//
// The 2-core VM is shared with other work, so besides Google Benchmark's mean rate each memory
// benchmark times every iteration (one call, ~0.1-30 ms, mostly shorter than a scheduler time
// slice) and reports p10_GBps / p10_us: the 10th-percentile iteration, i.e. a call that ran
// without being descheduled. STREAM iterations are 32 MiB windows of its arrays for the same
// reason. The summary at the end compares these p10 figures.
//
//   BM_Stream/{read,copy,triad}/threads:T   memory bandwidth (read: sum of an array; copy c = a
//                                           counts 2 arrays; triad a = b + s c counts 3)
//   BM_MatVec/DTYPE/ROWSxCOLS/threads:T     dense decode product on the active path (Q4_1, Q5_0,
//                                           Q5_1, Q2_K .. Q6_K: the two FFN shapes only)
//   BM_MatVecPath/PATH/DTYPE/...            the same on each supported path
//   BM_DecodeMatVecs/DTYPE/llama-1b/...     every matvec of one llama-1b decode step (items =
//                                           tokens: an upper bound on decode tok/s)
//   BM_MatMul/DTYPE/ROWSxCOLS/tokens:N      prefill product (items = tokens); also Gemma 3
//                                           270M's shapes (2048x640, 640x2048) at 128 tokens
//   BM_GatherCols/DTYPE/...density:P        y = W[:, idx] x[idx] over wt [cols, rows]
//   BM_GatherRows/DTYPE/...density:P        y[idx] = W[idx, :] x
//   BM_GatherRead/DTYPE/...density:P        plain read of the same rows (the floor of both forms)
//   BM_RmsNorm, BM_SiluMul, BM_Softmax, BM_TopK
//
// Path: WEIR_KERNELS=scalar|portable|avx2|avx512 (default: best for the CPU).
// Gathered index sets: random and sorted by default; IDXMODE=unsorted (random order), block (the
// first density * n rows or columns) or stride (every 1/density-th) to see how the pattern of the
// active rows, not only their count, sets the gathered time.
// Example: build-kern/bin/kernels_bench --benchmark_filter='Stream|MatVec/'
//            --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/anon_region.h"
#include "base/thread_pool.h"
#include "kernels/gather.h"
#include "kernels/isa.h"
#include "kernels/matvec.h"
#include "kernels/ops.h"
#include "kernels/tiled.h"
#include "tensor/dtype.h"
#include "tensor/quantize.h"
#include "tensor/tensor_view.h"

namespace weir::kernels {
namespace {

size_t ArenaBytes() {
  const char* v = std::getenv("WEIR_BENCH_MB");
  long mb = v ? std::atol(v) : 1024;
  return static_cast<size_t>(std::max(16L, mb)) << 20;
}

ThreadPool* Pool(int threads) {
  static std::unique_ptr<ThreadPool> pools[9];
  if (!pools[threads]) pools[threads] = std::make_unique<ThreadPool>(threads);
  return pools[threads].get();
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> v(n);
  for (float& f : v) f = g(rng);
  return v;
}

// Times each iteration of a benchmark loop and reports the 10th percentile (see the top).
class IterationClock {
 public:
  void Start() { t0_ = std::chrono::steady_clock::now(); }
  void Stop() {
    ns_.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0_).count());
  }
  void Report(benchmark::State& state, double bytes_per_iteration) {
    if (ns_.empty()) return;
    std::sort(ns_.begin(), ns_.end());
    const double p10 = ns_[ns_.size() / 10];
    state.counters["p10_us"] = p10 / 1e3;
    if (bytes_per_iteration > 0) state.counters["p10_GBps"] = bytes_per_iteration / p10;
  }

 private:
  std::chrono::steady_clock::time_point t0_;
  std::vector<double> ns_;
};

// Copies of one [rows, cols] matrix of a dtype filling the arena (only the latest kept alive).
struct Arena {
  DType dtype;
  int64_t rows = 0, cols = 0;
  size_t matrix_bytes = 0;
  size_t copies = 0;
  AnonRegion buf;  // huge pages advised, like the weights of a loaded model
  TensorView view(size_t i) const {
    return TensorView{dtype, Shape{rows, cols}, buf.data() + (i % copies) * matrix_bytes};
  }
};

AnonRegion MakeRegion(size_t bytes) {
  auto r = AnonRegion::Create(bytes);
  if (!r.ok()) {
    std::fprintf(stderr, "kernels_bench: %s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

const Arena& GetArena(DType t, int64_t rows, int64_t cols) {
  static Arena arena;
  if (arena.copies > 0 && arena.dtype == t && arena.rows == rows && arena.cols == cols) {
    return arena;
  }
  arena.buf = AnonRegion();
  arena.dtype = t;
  arena.rows = rows;
  arena.cols = cols;
  // Matrix starts 4 KiB aligned, as tensors in a mapped GGUF file are 32-byte aligned at least.
  arena.matrix_bytes = (RowBytes(t, cols) * rows + 4095) / 4096 * 4096;
  arena.copies = std::max<size_t>(2, ArenaBytes() / arena.matrix_bytes);
  arena.buf = MakeRegion(arena.matrix_bytes * arena.copies);
  std::vector<float> src = RandomFloats(static_cast<size_t>(rows * cols), 7);
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(t, src.data() + r * cols, arena.buf.data() + r * RowBytes(t, cols), cols);
  }
  for (size_t i = 1; i < arena.copies; ++i) {
    std::memcpy(arena.buf.data() + i * arena.matrix_bytes, arena.buf.data(), arena.matrix_bytes);
  }
  return arena;
}

// ---- STREAM-style bandwidth ----

struct StreamArrays {
  size_t n = 0;
  AlignedBuffer a, b, c;
};

StreamArrays& Stream() {
  static StreamArrays s;
  if (s.n == 0) {
    s.n = ArenaBytes() / 3 / sizeof(float);
    s.a.Reset(s.n * 4, 4096);
    s.b.Reset(s.n * 4, 4096);
    s.c.Reset(s.n * 4, 4096);
    float* a = s.a.data<float>();
    float* b = s.b.data<float>();
    float* c = s.c.data<float>();
    for (size_t i = 0; i < s.n; ++i) a[i] = 1.0f, b[i] = 2.0f, c[i] = 0.5f;
  }
  return s;
}

// A plain read: the sum of the first `words` 32-bit words of R rows, line by line across them (R
// streams in flight, as the gathered kernels run them), in 16-byte integer vectors (GCC/Clang
// vector extension: SSE2 / NEON) with 4 independent accumulators, so the loop issues one load per
// 16 bytes and is never the bottleneck. With `ahead`, each line of ahead[r] is requested as the
// same line of rows[r] is read (ahead[0] = rows[0] + 512: the line 2 KiB further on).
template <int R>
uint64_t SumRows(const uint32_t* const* rows, size_t words, const uint32_t* const* ahead) {
  typedef uint32_t V4 __attribute__((vector_size(16)));
  V4 acc[4] = {};
  size_t i = 0;
  for (; i + 16 <= words; i += 16) {
    if (ahead != nullptr) {
      for (int r = 0; r < R; ++r) __builtin_prefetch(ahead[r] + i, 0, 3);
    }
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < 4; ++k) {
        V4 v;
        std::memcpy(&v, rows[r] + i + 4 * k, sizeof(v));
        acc[k] += v;
      }
    }
  }
  uint64_t total = 0;
  for (int r = 0; r < R; ++r) {
    for (size_t j = i; j < words; ++j) total += rows[r][j];
  }
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 4; ++l) total += acc[k][l];
  }
  return total;
}

enum class StreamOp { kRead, kReadPrefetch, kCopy, kTriad };

void BM_Stream(benchmark::State& state, StreamOp op) {
  const int threads = static_cast<int>(state.range(0));
  StreamArrays& s = Stream();
  ThreadPool* pool = Pool(threads);
  uint64_t sink[8] = {};
  // Each iteration covers the next 32 MiB window of every array it touches (short enough to run
  // within one time slice, long enough to be far past the caches as the windows rotate).
  const size_t window = std::min<size_t>(s.n, (32u << 20) / sizeof(float));
  const size_t n_windows = s.n / window;
  IterationClock clock;
  size_t it = 0;
  for (auto _ : state) {
    const size_t base = (it++ % n_windows) * window;
    float* a = s.a.data<float>() + base;
    float* b = s.b.data<float>() + base;
    float* c = s.c.data<float>() + base;
    clock.Start();
    pool->ParallelFor(
        window,
        [&](size_t begin, size_t end, int ti) {
          if (op == StreamOp::kRead || op == StreamOp::kReadPrefetch) {
            // The kernels request their weights 2 KiB ahead; read_pf does the same, to show what
            // one thread can pull with that help (STREAM itself does not prefetch).
            const uint32_t* p = reinterpret_cast<const uint32_t*>(a) + begin;
            const uint32_t* lead = p + 512;
            sink[ti] +=
                SumRows<1>(&p, end - begin, op == StreamOp::kReadPrefetch ? &lead : nullptr);
          } else if (op == StreamOp::kCopy) {
            std::memcpy(c + begin, a + begin, (end - begin) * sizeof(float));
          } else {
            for (size_t i = begin; i < end; ++i) a[i] = b[i] + 0.5f * c[i];
          }
        },
        4096);
    clock.Stop();
    benchmark::DoNotOptimize(sink);
    benchmark::ClobberMemory();
  }
  const int arrays = op == StreamOp::kCopy ? 2 : op == StreamOp::kTriad ? 3 : 1;
  const double bytes = static_cast<double>(window) * 4 * arrays;
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  clock.Report(state, bytes);
}

// ---- dense products ----

struct Shape2 {
  int64_t rows, cols;
};
// llama-1b (TinyLlama 1.1B) shapes: FFN down [2048, 5632], gate/up [5632, 2048], wq/wo
// [2048, 2048], wk/wv [256, 2048], output [32000, 2048].
const Shape2 kShapes[] = {{2048, 5632}, {5632, 2048}, {2048, 2048}, {256, 2048}, {32000, 2048}};

void BM_MatVec(benchmark::State& state, DType t, Shape2 s, int threads, std::optional<Isa> isa) {
  std::optional<ScopedIsaOverride> use;
  if (isa) use.emplace(*isa);
  const Arena& arena = GetArena(t, s.rows, s.cols);
  std::vector<float> x = RandomFloats(static_cast<size_t>(s.cols), 3);
  std::vector<float> y(static_cast<size_t>(s.rows));
  ThreadPool* pool = Pool(threads);
  size_t i = 0;
  IterationClock clock;
  for (auto _ : state) {
    clock.Start();
    MatVec(arena.view(i++), x.data(), y.data(), pool);
    clock.Stop();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(RowBytes(t, s.cols) * s.rows));
  clock.Report(state, static_cast<double>(RowBytes(t, s.cols) * s.rows));
}

void BM_MatMul(benchmark::State& state, DType t, Shape2 s, int threads, int64_t n) {
  const Arena& arena = GetArena(t, s.rows, s.cols);
  std::vector<float> x = RandomFloats(static_cast<size_t>(s.cols * n), 3);
  std::vector<float> y(static_cast<size_t>(s.rows * n));
  ThreadPool* pool = Pool(threads);
  size_t i = 0;
  IterationClock clock;
  for (auto _ : state) {
    clock.Start();
    MatMul(arena.view(i++), x.data(), n, y.data(), pool);
    clock.Stop();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["GFLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * s.rows * s.cols * n / 1e9,
                         benchmark::Counter::kIsRate);
  clock.Report(state, static_cast<double>(RowBytes(t, s.cols) * s.rows));
}

// ---- all the matrix-vector products of one llama-1b decode step ----
// 22 layers of wq, wk, wv, wo [2048|256, 2048], gate/up [5632, 2048], down [2048, 5632] and the
// output matrix [32000, 2048], each at its own address (the model's weight bytes: 0.59 GiB Q4_0,
// 1.09 GiB Q8_0, 2.05 GiB F16). Items/s is an upper bound on decode tok/s with these kernels;
// bytes/s compared with BM_Stream/read is the bandwidth fraction of the products alone.
struct DecodeModel {
  DType dtype = DType::kF32;
  bool tiled = false;
  std::vector<TensorView> mats;
  size_t bytes = 0;
  AnonRegion buf;
};

// tiled: the Q8_0 / Q4_0 matrices in the layout a loaded model gets (kernels/tiled.h).
const DecodeModel& GetDecodeModel(DType t, bool tiled) {
  static DecodeModel m;
  if (!m.mats.empty() && m.dtype == t && m.tiled == tiled) return m;
  m.buf = AnonRegion();
  m.mats.clear();
  m.dtype = t;
  m.tiled = tiled;
  std::vector<Shape2> shapes;
  for (int l = 0; l < 22; ++l) {
    for (Shape2 s : {Shape2{2048, 2048}, Shape2{256, 2048}, Shape2{256, 2048}, Shape2{2048, 2048},
                     Shape2{5632, 2048}, Shape2{5632, 2048}, Shape2{2048, 5632}}) {
      shapes.push_back(s);
    }
  }
  shapes.push_back({32000, 2048});
  std::vector<size_t> offsets;
  size_t total = 0;
  for (Shape2 s : shapes) {
    offsets.push_back(total);
    total += (RowBytes(t, s.cols) * s.rows + 4095) / 4096 * 4096;
  }
  m.buf = MakeRegion(total);
  m.bytes = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape2 s = shapes[i];
    uint8_t* dst = reinterpret_cast<uint8_t*>(m.buf.data()) + offsets[i];
    // Quantize one row and repeat it (the contents do not matter to the speed, the bytes do).
    std::vector<float> src = RandomFloats(static_cast<size_t>(s.cols), static_cast<uint32_t>(i));
    QuantizeRow(t, src.data(), dst, s.cols);
    const size_t rb = RowBytes(t, s.cols);
    for (int64_t r = 1; r < s.rows; ++r) std::memcpy(dst + r * rb, dst, rb);
    TensorView v{t, Shape{s.rows, s.cols}, dst};
    if (tiled && CanTile(v)) {
      std::vector<uint8_t> rows(dst, dst + rb * s.rows);
      v = TileRows(TensorView{t, Shape{s.rows, s.cols}, rows.data()}, dst);
    }
    m.mats.push_back(v);
    m.bytes += rb * s.rows;
  }
  return m;
}

void BM_DecodeMatVecs(benchmark::State& state, DType t, int threads, bool tiled) {
  const DecodeModel& m = GetDecodeModel(t, tiled);
  std::vector<float> x = RandomFloats(5632, 3), y(32000);
  ThreadPool* pool = Pool(threads);
  // A step (tens of ms) spans many scheduler time slices, so on a shared machine its p10 still
  // includes time the threads were off the CPU; the best time of each product over the
  // iterations, summed, estimates an undisturbed step (each call is ~0.1-3 ms).
  std::vector<double> best(m.mats.size(), 1e30);
  IterationClock clock;
  for (auto _ : state) {
    clock.Start();
    for (size_t i = 0; i < m.mats.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      MatVec(m.mats[i], x.data(), y.data(), pool);
      const double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      best[i] = std::min(best[i], ns);
    }
    clock.Stop();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.bytes));
  clock.Report(state, static_cast<double>(m.bytes));
  double sum_ns = 0;
  for (double b : best) sum_ns += b;
  state.counters["best_sum_us"] = sum_ns / 1e3;
  state.counters["best_sum_GBps"] = static_cast<double>(m.bytes) / sum_ns;
}

// ---- gathered products ----

std::vector<int32_t> ActiveIndices(int64_t n, double density) {
  std::vector<int32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::mt19937 rng(5);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(std::llround(density * static_cast<double>(n))));
  std::sort(all.begin(), all.end());
  const char* mode = getenv("IDXMODE");
  if (mode && std::string(mode) == "unsorted") std::shuffle(all.begin(), all.end(), rng);
  if (mode && std::string(mode) == "block") std::iota(all.begin(), all.end(), 0);
  if (mode && std::string(mode) == "stride") {
    const int64_t step = std::llround(1.0 / density);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(std::min<int64_t>(n - 1, static_cast<int64_t>(i) * step));
  }
  return all;
}

// Column form over wt [cols_in, rows_out] (the transposed FFN down projection: 5632 inputs,
// 2048 outputs), at the given density of active inputs.
void BM_GatherCols(benchmark::State& state, DType t, Shape2 s, int threads, double density) {
  const Arena& arena = GetArena(t, s.cols, s.rows);  // wt: [cols_in, rows_out]
  std::vector<float> x = RandomFloats(static_cast<size_t>(s.cols), 3);
  std::vector<float> y(static_cast<size_t>(s.rows));
  std::vector<int32_t> idx = ActiveIndices(s.cols, density);
  ThreadPool* pool = Pool(threads);
  size_t i = 0;
  IterationClock clock;
  for (auto _ : state) {
    clock.Start();
    GatherMatVecCols(arena.view(i++), idx.data(), static_cast<int64_t>(idx.size()), x.data(),
                     y.data(), pool);
    clock.Stop();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(RowBytes(t, s.rows) * idx.size()));
  clock.Report(state, static_cast<double>(RowBytes(t, s.rows) * idx.size()));
}

void BM_GatherRows(benchmark::State& state, DType t, Shape2 s, int threads, double density) {
  const Arena& arena = GetArena(t, s.rows, s.cols);
  std::vector<float> x = RandomFloats(static_cast<size_t>(s.cols), 3);
  std::vector<float> y(static_cast<size_t>(s.rows));
  std::vector<int32_t> idx = ActiveIndices(s.rows, density);
  ThreadPool* pool = Pool(threads);
  size_t i = 0;
  IterationClock clock;
  for (auto _ : state) {
    clock.Start();
    GatherMatVecRows(arena.view(i++), idx.data(), static_cast<int64_t>(idx.size()), x.data(),
                     y.data(), pool);
    clock.Stop();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(RowBytes(t, s.cols) * idx.size()));
  clock.Report(state, static_cast<double>(RowBytes(t, s.cols) * idx.size()));
}

// The floor under both gathered forms: a plain read (no arithmetic) of the same rows of the same
// arena, split over the pool in the same contiguous slices of the index list, four rows at a time
// with the group two groups ahead requested line by line (as the kernels do; one row at a time
// with the same lead in bytes read slower than the F16 kernels). At density 100 it reads the
// whole matrix in order, so "read at P / read at 100" is what the memory system charges for the
// pattern alone, before any kernel work.
void BM_GatherRead(benchmark::State& state, DType t, Shape2 s, int threads, double density) {
  const Arena& arena = GetArena(t, s.rows, s.cols);
  const size_t row_bytes = RowBytes(t, s.cols);
  const size_t words = row_bytes / 4;  // rows start 2-byte aligned at worst: whole words inside
  std::vector<int32_t> idx = ActiveIndices(s.rows, density);
  ThreadPool* pool = Pool(threads);
  uint64_t sink[8] = {};
  size_t i = 0;
  IterationClock clock;
  constexpr size_t kAhead = 8;  // rows: two groups of four
  for (auto _ : state) {
    const uint8_t* base = arena.view(i++).row(0);
    auto row = [&](size_t k) {
      return reinterpret_cast<const uint32_t*>(base + static_cast<size_t>(idx[k]) * row_bytes);
    };
    clock.Start();
    pool->ParallelFor(
        idx.size(),
        [&](size_t b, size_t e, int ti) {
          for (size_t k = b; k < std::min(e, b + kAhead); ++k) {
            for (size_t off = 0; off < words; off += 16) __builtin_prefetch(row(k) + off);
          }
          size_t k = b;
          for (; k + 4 <= e; k += 4) {
            const uint32_t* rows[4];
            const uint32_t* ahead[4];
            const bool stream = k + kAhead + 4 <= e;
            for (int r = 0; r < 4; ++r) {
              rows[r] = row(k + r);
              ahead[r] = stream ? row(k + kAhead + r) : nullptr;
            }
            sink[ti] += SumRows<4>(rows, words, stream ? ahead : nullptr);
          }
          for (; k < e; ++k) {
            const uint32_t* last = row(k);
            sink[ti] += SumRows<1>(&last, words, nullptr);
          }
        },
        (idx.size() + threads - 1) / threads);
    clock.Stop();
    benchmark::DoNotOptimize(sink);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(row_bytes * idx.size()));
  clock.Report(state, static_cast<double>(row_bytes * idx.size()));
}

// ---- elementwise ----

void BM_RmsNorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x = RandomFloats(n, 1), w = RandomFloats(n, 2), y(n);
  for (auto _ : state) {
    RmsNorm(y.data(), x.data(), w.data(), n, 1e-5f);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_SiluMul(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> g = RandomFloats(n, 1), u = RandomFloats(n, 2), work(n);
  for (auto _ : state) {
    std::memcpy(work.data(), g.data(), n * 4);
    SiluMul(work.data(), u.data(), n);
    benchmark::DoNotOptimize(work.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_Softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x = RandomFloats(n, 1), work(n);
  for (auto _ : state) {
    std::memcpy(work.data(), x.data(), n * 4);
    Softmax(work.data(), n);
    benchmark::DoNotOptimize(work.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_TopK(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1);
  std::vector<float> x = RandomFloats(n, 1);
  std::vector<int32_t> idx(n);
  for (auto _ : state) {
    benchmark::DoNotOptimize(TopK(x.data(), n, k, idx.data()));
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// ---- summary ----
// Prints, after the usual table, the ratios the kernel targets are stated in, from the p10
// figures (a call that was not descheduled; see the top): kernel GB/s as a fraction of the STREAM
// read bandwidth of the same run and thread count, and gathered time as a fraction of the dense
// time of the same matrix. With --benchmark_repetitions each figure is the median over them.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  SummaryReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      std::string name = r.benchmark_name();
      const std::string suffix = "/real_time";
      if (name.size() > suffix.size() && name.ends_with(suffix)) {
        name.resize(name.size() - suffix.size());
      }
      for (const char* key :
           {"p10_GBps", "p10_us", "bytes_per_second", "best_sum_us", "best_sum_GBps"}) {
        auto it = r.counters.find(key);
        if (it != r.counters.end()) values_[key][name].push_back(it->second.value);
      }
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nSummary (p10 = 10th-percentile call; %% = of p10 STREAM read, same threads)\n");
    for (int threads : {1, 2}) {
      const std::string suffix = "/threads:" + std::to_string(threads);
      const double read = Get("p10_GBps", "BM_Stream/read" + suffix);
      if (read <= 0) continue;
      const double read_pf = Get("p10_GBps", "BM_Stream/read_pf" + suffix);
      std::printf(
          "  STREAM %d thread(s), p10: read %.2f GB/s, copy %.2f, triad %.2f; read with 2 KiB"
          " software prefetch (read_pf) %.2f; mean over all calls: read %.2f\n",
          threads, read, Get("p10_GBps", "BM_Stream/copy" + suffix),
          Get("p10_GBps", "BM_Stream/triad" + suffix), read_pf,
          Get("bytes_per_second", "BM_Stream/read" + suffix) / 1e9);
      for (const auto& [name, v] : values_["p10_GBps"]) {
        if (!name.ends_with(suffix)) continue;
        const bool decode = name.rfind("BM_Decode", 0) == 0;
        if (name.rfind("BM_MatVec", 0) != 0 && !decode) continue;
        const double rate = Get("p10_GBps", name);
        std::printf("    %-48s %6.2f GB/s %5.1f%% of read", name.c_str(), rate,
                    100.0 * rate / read);
        if (read_pf > 0) std::printf(" %5.1f%% of read_pf", 100.0 * rate / read_pf);
        if (decode) {
          const double best = Get("best_sum_GBps", name);
          std::printf("   %.1f tok/s; per-call best, summed: %.2f GB/s %5.1f%% of read, %.1f tok/s",
                      1e6 / Get("p10_us", name), best, 100.0 * best / read,
                      1e6 / Get("best_sum_us", name));
        }
        std::printf("\n");
      }
    }
    std::printf(
        "\n  Gathered p10 time / dense MatVec p10 time of the same matrix; / the plain read of "
        "the same rows (BM_GatherRead)\n");
    for (const auto& [name, v] : values_["p10_us"]) {
      const bool cols = name.rfind("BM_GatherCols/", 0) == 0;
      const bool rows = name.rfind("BM_GatherRows/", 0) == 0;
      if (!cols && !rows) continue;
      // BM_GatherCols/Q8_0/2048x5632/density:50/threads:2 -> BM_MatVec/Q8_0/2048x5632/threads:2
      const size_t type_begin = name.find('/') + 1;
      const size_t shape_begin = name.find('/', type_begin) + 1;
      const size_t shape_end = name.find("/density:");
      const std::string threads = name.substr(name.rfind('/'));
      const std::string dense =
          "BM_MatVec/" + name.substr(type_begin, shape_end - type_begin) + threads;
      // Both forms read rows of the [5632, 2048] arena (the column form's wt).
      const std::string read = "BM_GatherRead/" +
                               name.substr(type_begin, shape_begin - type_begin) + "5632x2048" +
                               name.substr(shape_end);
      const double t_dense = Get("p10_us", dense);
      const double t_full = Get("p10_us", name.substr(0, shape_end) + "/density:100" + threads);
      const double t_read = Get("p10_us", read);
      const double t = Get("p10_us", name);
      if (t_dense <= 0) continue;
      std::printf("    %-56s %5.1f%% of dense, %5.1f%% of density 100", name.c_str(),
                  100.0 * t / t_dense, t_full > 0 ? 100.0 * t / t_full : 0.0);
      if (t_read > 0) std::printf(", %5.1f%% of the plain read", 100.0 * t / t_read);
      std::printf("\n");
    }
    std::printf("\n  Plain read of the active rows / plain read of all rows, in order (the floor)\n");
    for (const auto& [name, v] : values_["p10_us"]) {
      if (name.rfind("BM_GatherRead/", 0) != 0) continue;
      const size_t shape_end = name.find("/density:");
      const std::string threads = name.substr(name.rfind('/'));
      const double t_all = Get("p10_us", name.substr(0, shape_end) + "/density:100" + threads);
      if (t_all <= 0) continue;
      std::printf("    %-56s %5.1f%% of density 100\n", name.c_str(),
                  100.0 * Get("p10_us", name) / t_all);
    }
  }

 private:
  // Median over repetitions of a counter of a benchmark; 0 when absent.
  double Get(const std::string& key, const std::string& name) {
    auto& m = values_[key];
    auto it = m.find(name);
    if (it == m.end() || it->second.empty()) return 0;
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  }

  std::map<std::string, std::map<std::string, std::vector<double>>> values_;
};

std::string ShapeName(Shape2 s) { return std::to_string(s.rows) + "x" + std::to_string(s.cols); }

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

void RegisterAll() {
  using benchmark::RegisterBenchmark;
  const DType kTypes[] = {DType::kQ4_0, DType::kQ8_0, DType::kF16, DType::kBF16, DType::kF32};
  for (int threads : {1, 2}) {
    RegisterBenchmark("BM_Stream/read_pf", BM_Stream, StreamOp::kReadPrefetch)
        ->Arg(threads)
        ->ArgName("threads")
        ->UseRealTime();
    RegisterBenchmark("BM_Stream/read", BM_Stream, StreamOp::kRead)
        ->Arg(threads)
        ->ArgName("threads")
        ->UseRealTime();
    RegisterBenchmark("BM_Stream/copy", BM_Stream, StreamOp::kCopy)
        ->Arg(threads)
        ->ArgName("threads")
        ->UseRealTime();
    RegisterBenchmark("BM_Stream/triad", BM_Stream, StreamOp::kTriad)
        ->Arg(threads)
        ->ArgName("threads")
        ->UseRealTime();
  }
  for (DType t : kTypes) {
    for (Shape2 s : kShapes) {
      for (int threads : {1, 2}) {
        RegisterBenchmark(("BM_MatVec/" + std::string(DTypeName(t)) + "/" + ShapeName(s) +
                           "/threads:" + std::to_string(threads))
                              .c_str(),
                          BM_MatVec, t, s, threads, std::nullopt)
            ->UseRealTime();
      }
    }
  }
  // The other GGUF types (SmolLM2: Q4_1; Gemma 3 Q4_K_M: Q5_0, Q4_K, Q6_K; every *_K_M file:
  // Q5_K; Q5_1, Q3_K, Q2_K), at the FFN shapes.
  const DType kMoreTypes[] = {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K,
                              DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  for (DType t : kMoreTypes) {
    for (Shape2 s : {Shape2{2048, 5632}, Shape2{5632, 2048}}) {
      for (int threads : {1, 2}) {
        RegisterBenchmark(("BM_MatVec/" + std::string(DTypeName(t)) + "/" + ShapeName(s) +
                           "/threads:" + std::to_string(threads))
                              .c_str(),
                          BM_MatVec, t, s, threads, std::nullopt)
            ->UseRealTime();
      }
    }
  }
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kF16}) {
    for (bool tiled : {false, true}) {
      if (tiled && t == DType::kF16) continue;
      for (int threads : {1, 2}) {
        RegisterBenchmark(("BM_DecodeMatVecs/" + std::string(DTypeName(t)) + "/llama-1b" +
                           (tiled ? "/tiled" : "") + "/threads:" + std::to_string(threads))
                              .c_str(),
                          BM_DecodeMatVecs, t, threads, tiled)
            ->UseRealTime();
      }
    }
  }
  for (Isa isa : SupportedIsas()) {
    if (isa == Isa::kScalar) continue;
    for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kF16, DType::kQ4_1, DType::kQ4_K}) {
      RegisterBenchmark(("BM_MatVecPath/" + std::string(IsaName(isa)) + "/" + DTypeName(t) +
                         "/2048x5632/threads:2")
                            .c_str(),
                        BM_MatVec, t, Shape2{2048, 5632}, 2, isa)
          ->UseRealTime();
    }
  }
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kF16, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K}) {
    for (int64_t n : {16, 64}) {
      RegisterBenchmark(("BM_MatMul/" + std::string(DTypeName(t)) +
                         "/2048x5632/tokens:" + std::to_string(n) + "/threads:2")
                            .c_str(),
                        BM_MatMul, t, Shape2{2048, 5632}, 2, n)
          ->UseRealTime();
    }
  }
  // A 1.1B model's prefill shapes for the K types, one thread (the 16-row kernels' keep buffer
  // and token chunk): down [2048, 5632] and gate/up [5632, 2048], 128 tokens.
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (const Shape2 s : {Shape2{2048, 5632}, Shape2{5632, 2048}}) {
      RegisterBenchmark(("BM_MatMul/" + std::string(DTypeName(t)) + "/" + ShapeName(s) +
                         "/tokens:128/threads:1")
                            .c_str(),
                        BM_MatMul, t, s, 1, 128)
          ->UseRealTime();
    }
  }
  // The row form of the gathered product for the real models' other int8 types (sparse decode of
  // their gate/up projections).
  for (DType t : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int threads : {1, 2}) {
      RegisterBenchmark(("BM_GatherRows/" + std::string(DTypeName(t)) +
                         "/5632x2048/density:50/threads:" + std::to_string(threads))
                            .c_str(),
                        BM_GatherRows, t, Shape2{5632, 2048}, threads, 0.5)
          ->UseRealTime();
    }
  }
  // Gemma 3 270M's prefill shapes, 128 tokens, the types of its Q4_K_M file: gate/up [2048, 640]
  // (Q5_0; q/k alike, v Q8_0), down [640, 2048] (Q4_K, Q6_K).
  for (DType t : {DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const Shape2 s =
        IsBlockQuantized(t) && BlockSize(t) == 256 ? Shape2{640, 2048} : Shape2{2048, 640};
    for (int threads : {1, 2}) {
      RegisterBenchmark(("BM_MatMul/" + std::string(DTypeName(t)) + "/" + ShapeName(s) +
                         "/tokens:128/threads:" + std::to_string(threads))
                            .c_str(),
                        BM_MatMul, t, s, threads, 128)
          ->UseRealTime();
    }
  }
  for (DType t : kTypes) {
    for (double density : {1.0, 0.5, 0.25}) {
      for (int threads : {1, 2}) {
        const std::string d = std::to_string(static_cast<int>(density * 100));
        const std::string th = "/threads:" + std::to_string(threads);
        // Column form: the FFN down projection W [2048, 5632] stored as wt [5632, 2048].
        RegisterBenchmark(
            ("BM_GatherCols/" + std::string(DTypeName(t)) + "/2048x5632/density:" + d + th).c_str(),
            BM_GatherCols, t, Shape2{2048, 5632}, threads, density)
            ->UseRealTime();
        // Row form: the gate/up projection W [5632, 2048], active outputs.
        RegisterBenchmark(
            ("BM_GatherRows/" + std::string(DTypeName(t)) + "/5632x2048/density:" + d + th).c_str(),
            BM_GatherRows, t, Shape2{5632, 2048}, threads, density)
            ->UseRealTime();
        // Both forms read rows of one [5632, 2048] arena: the plain read of those rows.
        RegisterBenchmark(
            ("BM_GatherRead/" + std::string(DTypeName(t)) + "/5632x2048/density:" + d + th).c_str(),
            BM_GatherRead, t, Shape2{5632, 2048}, threads, density)
            ->UseRealTime();
      }
    }
  }
  // The floor against the row length alone: F32 rows of 1, 2 and 4 KiB (8 KiB is F32/5632x2048
  // above; Q4_0, Q8_0 and F16 rows of 2048 are 1152, 2176 and 4096 bytes).
  for (int64_t cols : {256, 512, 1024}) {
    for (double density : {1.0, 0.5, 0.25}) {
      const std::string d = std::to_string(static_cast<int>(density * 100));
      RegisterBenchmark(("BM_GatherRead/F32/" + ShapeName(Shape2{5632, cols}) + "/density:" + d +
                         "/threads:2").c_str(),
                        BM_GatherRead, DType::kF32, Shape2{5632, cols}, 2, density)
          ->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark("BM_RmsNorm", BM_RmsNorm)->Arg(2048);
  benchmark::RegisterBenchmark("BM_SiluMul", BM_SiluMul)->Arg(5632);
  benchmark::RegisterBenchmark("BM_Softmax", BM_Softmax)->Arg(1024);
  benchmark::RegisterBenchmark("BM_TopK", BM_TopK)->Args({5632, 1408});
}

}  // namespace
}  // namespace weir::kernels

int main(int argc, char** argv) {
  using namespace weir::kernels;
  benchmark::Initialize(&argc, argv);
  auto env = IsaFromEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "kernels_bench: %s\n", env.status().ToString().c_str());
    return 2;
  }
  benchmark::AddCustomContext("cpu_model", CpuModel());
  benchmark::AddCustomContext("kernels_path", IsaName(ActiveIsa()));
  benchmark::AddCustomContext("arena_mib", std::to_string(ArenaBytes() >> 20));
  RegisterAll();
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
