#include "base/thread_pool.h"

#include <algorithm>

namespace weir {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

void ThreadPool::RunChunk(int index) {
  if (job_dynamic_) {
    for (;;) {
      size_t begin = job_next_.fetch_add(job_chunk_, std::memory_order_relaxed);
      if (begin >= job_n_) return;
      (*job_)(begin, std::min(job_n_, begin + job_chunk_), index);
    }
  }
  size_t begin = static_cast<size_t>(index) * job_chunk_;
  size_t end = std::min(job_n_, begin + job_chunk_);
  if (begin < end) (*job_)(begin, end, index);
}

void ThreadPool::ParallelFor(size_t n, const RangeFn& fn, size_t grain) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  size_t n_grains = (n + grain - 1) / grain;
  size_t per = (n_grains + n_threads_ - 1) / n_threads_;
  Run(n, fn, per * grain, /*dynamic=*/false);
}

void ThreadPool::ParallelForDynamic(size_t n, const RangeFn& fn, size_t grain) {
  if (n == 0) return;
  Run(n, fn, std::max<size_t>(1, grain), /*dynamic=*/true);
}

void ThreadPool::Run(size_t n, const RangeFn& fn, size_t chunk, bool dynamic) {
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  job_dynamic_ = dynamic;
  job_next_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  RunChunk(0);
  // The caller's share is usually about as long as the others', so spin briefly; on a machine
  // with more runnable threads than cores, yield so a descheduled worker can finish its share.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 1024) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    int spins = 0;
    while (g == seen && spins < 2000) {
      ++spins;
      CpuRelax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      g = generation_.load();
    }
    seen = g;
    if (stop_.load()) return;
    RunChunk(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace weir
