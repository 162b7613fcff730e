// A STREAM-style measurement of this machine's memory bandwidth, taken at run time: read
// (sum of an array), copy and triad over arrays much larger than the caches. Benchmarks report
// achieved bandwidth as a fraction of a reading taken right beside them, because on shared
// machines the ceiling drifts from minute to minute.
#pragma once

#include <cstddef>

#include "base/thread_pool.h"

namespace weir {

struct MemoryBandwidth {
  double read_gbs = 0;   // bytes read / s
  double copy_gbs = 0;   // (read + written) bytes / s
  double triad_gbs = 0;  // a = b + s*c: (2 reads + 1 write) bytes / s
};

// Best of `reps` passes over arrays of array_bytes each, split over the pool's threads.
MemoryBandwidth MeasureMemoryBandwidth(ThreadPool* pool, size_t array_bytes = 256u << 20, int reps = 5);

}  // namespace weir
