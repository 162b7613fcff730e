// TierMemory: the memory of the top cache tier, where a layer's cache unit lives and where the
// MLP is computed from (M2Cache §5.3). The DRAM tier below it is the neuron store in host memory.
//   dram (MakeHostTier)   the CPU engine: units in ordinary host memory, loads are memcpy
//   cuda (cuda/cuda_tier.cu) GPU memory, loads are cudaMemcpyAsync from pinned host memory on a
//                         copy stream, built with -DWEIR_CUDA=ON
// A buffer's pointer is only dereferenced by the compute of its own tier.
//
// Thread safety: one user thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "m2cache/neuron_store.h"

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
  // One precision's part of the MLP from rows in this tier (views from a CacheUnit), for one
  // token: with h_k = act(gate[s_k] · x) · (up[s_k] · x) over the slots s_k,
  //   y[d_model] = Σ_k h_k · down_t[s_k]
  // x and y are host arrays; y is overwritten. Copies queued before are flushed first.
  virtual Status Compute(const NeuronRows& rows, std::span<const int32_t> slots, kernels::Glu glu, const float* x,
                         float* y, ThreadPool* pool) = 0;
};

std::unique_ptr<TierMemory> MakeHostTier();

// The tier named "dram" or "cuda". "cuda" fails with a clear message when weir was built without
// -DWEIR_CUDA=ON or no GPU is present.
Result<std::unique_ptr<TierMemory>> MakeTier(const std::string& name);

#ifdef WEIR_HAVE_CUDA
// GPU memory of CUDA device `device` (m2cache/cuda/cuda_tier.cu).
Result<std::unique_ptr<TierMemory>> MakeCudaTier(int device);
#endif

// The host computation of TierMemory::Compute over host-readable rows (the store's, or a dram
// tier's unit): gathered rows of gate and up, the activation, gathered down columns
// (kernels/gather.h). g, u, h: scratch of at least rows.gate.rows() floats.
void HostMlpPart(const NeuronRows& rows, std::span<const int32_t> slots, kernels::Glu glu, const float* x, float* y,
                 float* g, float* u, float* h, ThreadPool* pool);

}  // namespace weir::m2cache
