// The GPU tier's MLP kernels (mlp_kernels.h has the maths and the work split).
#include <cuda_fp16.h>

#include <climits>

#include "m2cache/cuda/mlp_kernels.h"

namespace weir::m2cache::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kGateUpThreads = 128;  // 4 warps, one slot each
constexpr int kDownThreads = 128;    // outputs per block of the down product
constexpr int kSumThreads = 256;
constexpr int kMaxGridY = 65535;

__device__ __forceinline__ float HalfBitsToFloat(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

// The f16 scale at the start of a block, read bytewise (blocks are 34 or 18 bytes, so only
// 2-byte aligned).
__device__ __forceinline__ float BlockScale(const uint8_t* block) {
  return HalfBitsToFloat(static_cast<uint16_t>(block[0] | (block[1] << 8)));
}

// Value i of a row of type T, as dtype.h's dequantize_row gives it.
template <DType T>
__device__ __forceinline__ float Weight(const uint8_t* row, int i);

template <>
__device__ __forceinline__ float Weight<DType::kF32>(const uint8_t* row, int i) {
  return reinterpret_cast<const float*>(row)[i];
}

template <>
__device__ __forceinline__ float Weight<DType::kF16>(const uint8_t* row, int i) {
  return HalfBitsToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
}

template <>
__device__ __forceinline__ float Weight<DType::kBF16>(const uint8_t* row, int i) {
  return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[i]) << 16);
}

// Q8_0 block { f16 d; i8 qs[32]; }: x = d * q.
template <>
__device__ __forceinline__ float Weight<DType::kQ8_0>(const uint8_t* row, int i) {
  const uint8_t* block = row + static_cast<size_t>(i / kQK) * sizeof(BlockQ8_0);
  const int8_t q = static_cast<int8_t>(block[2 + i % kQK]);
  return BlockScale(block) * static_cast<float>(q);
}

// Q4_0 block { f16 d; u8 qs[16]; }: value j < 16 is the low nibble of qs[j], value j + 16 its
// high nibble; x = d * (q - 8).
template <>
__device__ __forceinline__ float Weight<DType::kQ4_0>(const uint8_t* row, int i) {
  const uint8_t* block = row + static_cast<size_t>(i / kQK) * sizeof(BlockQ4_0);
  const int j = i % kQK;
  const uint8_t byte = block[2 + (j % (kQK / 2))];
  const int q = j < kQK / 2 ? (byte & 0x0F) : (byte >> 4);
  return BlockScale(block) * static_cast<float>(q - 8);
}

// The sum over a warp, in lane 0 (a fixed shuffle tree, so the same on every run).
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_down_sync(0xFFFFFFFFu, v, offset);
  return v;
}

// act(g) * u, the formulas of kernels::GatedActivation (kernels/ops.cc, reference.cc).
__device__ __forceinline__ float GatedActivation(kernels::Glu glu, float g, float u) {
  if (glu == kernels::Glu::kGeluTanh) {
    constexpr float kSqrt2OverPi = 0.79788456080286535588f;
    constexpr float kCubic = 0.044715f;
    return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kCubic * g * g))) * u;
  }
  return g / (1.0f + expf(-g)) * u;
}

// h[k] = act(gate[slots[k]] · x) * (up[slots[k]] · x): warp k of the grid takes slot k.
template <DType T>
__global__ void GateUpKernel(const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up,
                             size_t row_bytes, int d_model, const int32_t* __restrict__ slots,
                             int n, const float* __restrict__ x, float* __restrict__ h,
                             kernels::Glu glu) {
  const int k =
      static_cast<int>((static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp);
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (k >= n) return;  // the whole warp leaves together, so the shuffles below see full warps
  const size_t offset = static_cast<size_t>(slots[k]) * row_bytes;
  const uint8_t* g_row = gate + offset;
  const uint8_t* u_row = up + offset;
  float g = 0.0f, u = 0.0f;
  for (int i = lane; i < d_model; i += kWarp) {
    const float xi = x[i];
    g += Weight<T>(g_row, i) * xi;
    u += Weight<T>(u_row, i) * xi;
  }
  g = WarpSum(g);
  u = WarpSum(u);
  if (lane == 0) h[k] = GatedActivation(glu, g, u);
}

// partial[c][r] = Σ_{k in chunk c, in order} h[k] * down_t[slots[k]][r]; grid (outputs, chunks).
template <DType T>
__global__ void DownKernel(const uint8_t* __restrict__ down_t, size_t row_bytes, int d_model,
                           const int32_t* __restrict__ slots, int n, const float* __restrict__ h,
                           float* __restrict__ partial) {
  __shared__ int32_t chunk_slots[kDownChunk];
  __shared__ float chunk_h[kDownChunk];
  const int chunk = static_cast<int>(blockIdx.y);
  const int k0 = chunk * kDownChunk;
  const int m = min(kDownChunk, n - k0);
  for (int t = static_cast<int>(threadIdx.x); t < m; t += static_cast<int>(blockDim.x)) {
    chunk_slots[t] = slots[k0 + t];
    chunk_h[t] = h[k0 + t];
  }
  __syncthreads();
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= d_model) return;
  float acc = 0.0f;
  for (int t = 0; t < m; ++t) {
    acc += chunk_h[t] * Weight<T>(down_t + static_cast<size_t>(chunk_slots[t]) * row_bytes, r);
  }
  partial[static_cast<size_t>(chunk) * static_cast<size_t>(d_model) + static_cast<size_t>(r)] = acc;
}

// y[r] = Σ_c partial[c][r], chunks in order.
__global__ void SumChunksKernel(const float* __restrict__ partial, int n_chunks, int d_model,
                                float* __restrict__ y) {
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= d_model) return;
  float acc = 0.0f;
  for (int c = 0; c < n_chunks; ++c)
    acc += partial[static_cast<size_t>(c) * static_cast<size_t>(d_model) + r];
  y[r] = acc;
}

int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

template <DType T>
cudaError_t Launch(const MlpPartArgs& a, cudaStream_t stream) {
  const int d = static_cast<int>(a.d_model);
  const int n = static_cast<int>(a.n);
  const int n_chunks = CeilDiv(n, kDownChunk);
  const auto* gate = static_cast<const uint8_t*>(a.gate);
  const auto* up = static_cast<const uint8_t*>(a.up);
  const auto* down_t = static_cast<const uint8_t*>(a.down_t);
  GateUpKernel<T>
      <<<CeilDiv(static_cast<int64_t>(n) * kWarp, kGateUpThreads), kGateUpThreads, 0, stream>>>(
          gate, up, a.row_bytes, d, a.slots, n, a.x, a.h, a.glu);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const dim3 down_grid(static_cast<unsigned>(CeilDiv(d, kDownThreads)),
                       static_cast<unsigned>(n_chunks));
  DownKernel<T>
      <<<down_grid, kDownThreads, 0, stream>>>(down_t, a.row_bytes, d, a.slots, n, a.h, a.partial);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  SumChunksKernel<<<CeilDiv(d, kSumThreads), kSumThreads, 0, stream>>>(a.partial, n_chunks, d, a.y);
  return cudaGetLastError();
}

}  // namespace

bool KernelSupports(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
      return true;
    default:
      return false;
  }
}

size_t MlpPartialFloats(int64_t n, int64_t d_model) {
  return static_cast<size_t>((n + kDownChunk - 1) / kDownChunk) * static_cast<size_t>(d_model);
}

cudaError_t LaunchMlpPart(const MlpPartArgs& a, cudaStream_t stream) {
  // The kernels index with int and put the chunks on grid.y; the tier checks the shapes before,
  // so these only guard against a caller's bug.
  if (a.n <= 0 || a.d_model <= 0 || a.d_model > INT_MAX || a.n > INT_MAX / kWarp ||
      (a.n + kDownChunk - 1) / kDownChunk > kMaxGridY) {
    return cudaErrorInvalidValue;
  }
  switch (a.dtype) {
    case DType::kF32:
      return Launch<DType::kF32>(a, stream);
    case DType::kF16:
      return Launch<DType::kF16>(a, stream);
    case DType::kBF16:
      return Launch<DType::kBF16>(a, stream);
    case DType::kQ8_0:
      return Launch<DType::kQ8_0>(a, stream);
    case DType::kQ4_0:
      return Launch<DType::kQ4_0>(a, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace weir::m2cache::cuda
