#include "base/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "base/aligned_buffer.h"

namespace weir {

MemoryBandwidth MeasureMemoryBandwidth(ThreadPool* pool, size_t array_bytes, int reps) {
  const size_t n = array_bytes / sizeof(float);
  AlignedBuffer a(n * sizeof(float)), b(n * sizeof(float)), c(n * sizeof(float));
  float* pa = a.data<float>();
  float* pb = b.data<float>();
  float* pc = c.data<float>();
  ParallelFor(pool, n, [&](size_t s, size_t e, int) {
    for (size_t i = s; i < e; ++i) {
      pa[i] = 1.0f;
      pb[i] = 2.0f;
      pc[i] = 0.5f;
    }
  }, 4096);
  using Clock = std::chrono::steady_clock;
  auto best = [&](auto&& body) {
    double t_best = 1e30;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      body();
      t_best = std::min(t_best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return t_best;
  };
  std::atomic<uint64_t> sink{0};
  double t_read = best([&] {
    ParallelFor(pool, n, [&](size_t s, size_t e, int) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      size_t i = s;
      for (; i + 8 <= e; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += pa[i + j];
      }
      for (; i < e; ++i) acc[0] += pa[i];
      float t = 0;
      for (float v : acc) t += v;
      sink.fetch_add(static_cast<uint64_t>(t), std::memory_order_relaxed);
    }, 4096);
  });
  double t_copy = best([&] {
    ParallelFor(pool, n, [&](size_t s, size_t e, int) {
      for (size_t i = s; i < e; ++i) pc[i] = pa[i];
    }, 4096);
  });
  double t_triad = best([&] {
    ParallelFor(pool, n, [&](size_t s, size_t e, int) {
      for (size_t i = s; i < e; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    }, 4096);
  });
  const double bytes = static_cast<double>(n * sizeof(float));
  MemoryBandwidth m;
  m.read_gbs = bytes / t_read / 1e9;
  m.copy_gbs = 2 * bytes / t_copy / 1e9;
  m.triad_gbs = 3 * bytes / t_triad / 1e9;
  return m;
}

}  // namespace weir
