// ThreadPool: a fixed set of worker threads created once per process and passed explicitly to
// whatever computes (kernels split their output rows over it). ParallelFor blocks until every
// chunk ran; the calling thread takes part, so a pool of n threads has n-1 workers.
//
// Workers spin briefly (~100 µs, with a pause instruction) on a generation counter before
// sleeping, because a decode step issues hundreds of small parallel sections per token and a
// condition-variable wake costs tens of µs. The caller spins ~50 µs for the others to finish,
// then yields, so a worker descheduled by other load on the machine can get the core back.
//
// Thread safety: ParallelFor may be called from one thread at a time (the owner of the pool).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace weir {

class ThreadPool {
 public:
  // n_threads >= 1 counts the caller; n_threads == 1 runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) over a split of [0, n) into at most size() contiguous
  // chunks whose boundaries are multiples of `grain` (except the last). Returns when all ran.
  using RangeFn = std::function<void(size_t begin, size_t end, int thread_index)>;
  void ParallelFor(size_t n, const RangeFn& fn, size_t grain = 1);

  // Like ParallelFor, but the threads take chunks of `grain` indices from a shared counter until
  // none are left, so a thread slowed down by other load on the machine simply takes fewer. fn
  // may run several times on one thread; thread_index is the thread running it (0 = the caller).
  void ParallelForDynamic(size_t n, const RangeFn& fn, size_t grain);

 private:
  void WorkerLoop(int index);
  void RunChunk(int index);
  void Run(size_t n, const RangeFn& fn, size_t chunk, bool dynamic);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // The current job, valid while pending_ > 0.
  const RangeFn* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_chunk_ = 0;
  bool job_dynamic_ = false;
  std::atomic<size_t> job_next_{0};  // next unclaimed index of a dynamic job
};

// Runs fn over [0, n) on `pool` when given, else inline on the caller.
inline void ParallelFor(ThreadPool* pool, size_t n, const ThreadPool::RangeFn& fn,
                        size_t grain = 1) {
  if (pool == nullptr || pool->size() == 1 || n <= grain) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  pool->ParallelFor(n, fn, grain);
}

// Runs fn over [0, n) on `pool` with dynamic chunks when given, else inline on the caller.
inline void ParallelForDynamic(ThreadPool* pool, size_t n, const ThreadPool::RangeFn& fn,
                               size_t grain) {
  if (pool == nullptr || pool->size() == 1 || n <= grain) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  pool->ParallelForDynamic(n, fn, grain);
}

}  // namespace weir
