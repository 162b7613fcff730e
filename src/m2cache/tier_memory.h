// TierMemory: the memory of the top cache tier, where a layer's cache unit lives and where the
// MLP is computed from (M2Cache §5.3). The DRAM tier below it is the neuron store in host memory.
//   dram (MakeHostTier)   the CPU engine: units in ordinary host memory, loads are memcpy
//   cuda (cuda_tier.h)    GPU memory, loads are cudaMemcpyAsync from pinned host memory on a
//                         copy stream, built with -DWEIR_CUDA=ON
// A buffer's pointer is only dereferenced by the compute of its own tier.
//
// Thread safety: one user thread.
#pragma once

#include <cstddef>
#include <memory>

#include "base/status.h"

namespace weir::m2cache {

class TierMemory {
 public:
  virtual ~TierMemory() = default;
  virtual const char* name() const = 0;
  // A zeroed buffer of `bytes`, owned by the tier until it is destroyed.
  virtual Result<void*> Allocate(size_t bytes) = 0;
  // Queues a copy of `bytes` from host memory into this tier.
  virtual void CopyIn(void* dst, const void* src, size_t bytes) = 0;
  // Waits until every queued copy has landed.
  virtual Status Flush() = 0;
  // Bytes allocated so far.
  virtual size_t allocated() const = 0;
};

std::unique_ptr<TierMemory> MakeHostTier();

}  // namespace weir::m2cache
