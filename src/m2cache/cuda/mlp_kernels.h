// The CUDA kernels of the GPU tier's MLP part (TierMemory::Compute, tier_memory.h), for one token
// over the rows of a cache unit in GPU memory:
//   h[k] = act(gate[slots[k]] · x) · (up[slots[k]] · x)           k < n
//   y[r] = Σ_k h[k] · down_t[slots[k]][r]                           r < d_model
// Weights are dequantized on the fly (F32, F16, BF16, Q8_0, Q4_0; the block layouts of
// tensor/dtype.h) and every product and sum is f32 from the dequantized values; x is used as it
// is (the CPU kernels quantize it to int8 blocks, so the two tiers differ by that rounding).
//   gate/up: one warp per slot strides over the row and reduces with shuffles.
//   down:    the slots are cut into chunks of kDownChunk; one thread per (output r, chunk) sums
//            its chunk in slot order into partial[chunk][r], and a second kernel adds the chunks
//            in order. The result is the same on every run (no atomics).
// Only included by the .cu files of this folder (built with -DWEIR_CUDA=ON).
//
// Thread safety: free functions; launches go to the caller's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace weir::m2cache::cuda {

constexpr int kDownChunk = 64;  // slots summed by one thread of the down product

// True for the types the kernels read.
bool KernelSupports(DType t);

// Floats of `partial` scratch LaunchMlpPart needs for n slots and d_model outputs.
size_t MlpPartialFloats(int64_t n, int64_t d_model);

// One Compute call; every pointer is device memory.
struct MlpPartArgs {
  DType dtype = DType::kF32;       // of gate, up and down_t (one type: a cache unit's precision)
  const void* gate = nullptr;      // [capacity, d_model]
  const void* up = nullptr;        // [capacity, d_model]
  const void* down_t = nullptr;    // [capacity, d_model]
  size_t row_bytes = 0;            // bytes of one row of each
  int64_t d_model = 0;             // a multiple of the type's block size
  const int32_t* slots = nullptr;  // [n], each < capacity
  int64_t n = 0;                   // > 0
  const float* x = nullptr;        // [d_model]
  float* h = nullptr;              // [n] scratch
  float* partial = nullptr;        // [MlpPartialFloats(n, d_model)] scratch
  float* y = nullptr;              // [d_model] output, overwritten
  kernels::Glu glu = kernels::Glu::kSilu;
};

// Queues the three kernels on `stream`; returns the launch error (cudaSuccess if none). Errors
// while the kernels run surface at the stream's next synchronization.
cudaError_t LaunchMlpPart(const MlpPartArgs& args, cudaStream_t stream);

}  // namespace weir::m2cache::cuda
