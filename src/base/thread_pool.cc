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

void ThreadPool::RunChunk(int index) {
  size_t begin = static_cast<size_t>(index) * job_chunk_;
  size_t end = std::min(job_n_, begin + job_chunk_);
  if (begin < end) (*job_)(begin, end, index);
}

void ThreadPool::ParallelFor(size_t n, const RangeFn& fn, size_t grain) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  size_t n_grains = (n + grain - 1) / grain;
  size_t per = (n_grains + n_threads_ - 1) / n_threads_;
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = per * grain;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  RunChunk(0);
  while (pending_.load(std::memory_order_acquire) != 0) {
    // The caller's chunk is usually the same size as the others; a short spin suffices.
  }
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    int spins = 0;
    while (g == seen && spins < 20000) {
      ++spins;
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
