// ThreadPool::ParallelForDynamic (added for the kernels, which split rows with it).
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/thread_pool.h"

namespace weir {
namespace {

TEST(ThreadPoolDynamicTest, CoversRangeExactlyOnceInGrainChunks) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (size_t n : {0, 1, 7, 64, 1000, 4099}) {
      for (size_t grain : {1, 16, 100}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> bad_thread{0}, bad_chunk{0};
        ParallelForDynamic(
            &pool, n,
            [&](size_t b, size_t e, int t) {
              if (t < 0 || t >= threads) bad_thread.fetch_add(1);
              if (b % grain != 0 || (e - b > grain) || (e != n && e - b != grain)) {
                bad_chunk.fetch_add(1);
              }
              for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
            },
            grain);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n;
        EXPECT_EQ(bad_thread.load(), 0);
        // A one-thread pool (or a range of one chunk) runs inline as a single call.
        if (threads > 1 && n > grain) {
          EXPECT_EQ(bad_chunk.load(), 0) << threads << " " << n << " " << grain;
        }
      }
    }
  }
}

TEST(ThreadPoolDynamicTest, InterleavesWithStaticJobs) {
  ThreadPool pool(2);
  std::atomic<long> sum{0};
  for (int round = 0; round < 200; ++round) {
    pool.ParallelFor(100, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) sum.fetch_add(static_cast<long>(i));
    });
    pool.ParallelForDynamic(
        100,
        [&](size_t b, size_t e, int) {
          for (size_t i = b; i < e; ++i) sum.fetch_add(static_cast<long>(i));
        },
        7);
  }
  EXPECT_EQ(sum.load(), 200L * 2 * 4950);
}

}  // namespace
}  // namespace weir
