// The CUDA top tier of M2Cache (tier_memory.h, `--m2cache tier=cuda`, built with -DWEIR_CUDA=ON):
// the cache units live in GPU memory and the MLP part of each precision is computed there.
//
// Design, for one token of one layer:
//   ATU loads   CacheUnit::Update calls CopyIn(dst, src, bytes) once per run of changed neurons;
//               src is pageable host memory of the NeuronStore. Each copy is first memcpy'd into
//               a pinned staging ring (8 MiB, grown when a single copy is larger) and then queued
//               with cudaMemcpyAsync on the copy stream, so the host does not wait for the bus.
//               Ring space is reused only after the copies reading it have finished: when the
//               ring is full the copy stream is synchronized and the ring restarts at 0 (and
//               after every Compute, which waits for every queued copy anyway).
//   Compute     records an event on the copy stream and makes the compute stream wait for it,
//               uploads the slots and x (through a pinned buffer), runs the kernels of
//               mlp_kernels.h on the compute stream, downloads y and synchronizes.
// Buffers handed out by Allocate are zeroed with cudaMemsetAsync on the copy stream, so the
// zeroing is ordered before the copies into them and before the kernels that read them (the two
// streams are non-blocking: nothing here uses the legacy default stream).
//
// Errors: a failing CUDA call is turned into a Status naming the call and cudaGetErrorString.
// CopyIn cannot return one, so a failed copy is remembered and returned by the next Flush or
// Compute; after any CUDA failure other than an allocation that did not fit or a type without a
// kernel the tier stays failed (every later call returns the first error), because a device fault
// leaves the CUDA context unusable. Errors raised while kernels or copies run asynchronously
// surface at the synchronization that ends Compute or Flush.
//
// Thread safety: one user thread; every entry point makes the tier's device current on it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/check.h"
#include "m2cache/cuda/mlp_kernels.h"
#include "m2cache/tier_memory.h"

namespace weir::m2cache {
namespace {

constexpr size_t kRingBytes = size_t{8} << 20;  // the first staging ring
constexpr size_t kRingAlign = 64;               // copies start at multiples of this in the ring
constexpr size_t kIoAlign = 16;                 // x after the slots in the upload buffer

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

using MakeStatus = Status (*)(std::string);

// A Status for a failed CUDA call. The runtime's last-error slot is cleared too, so that the
// cudaGetLastError after a later kernel launch reports that launch only.
Status CudaFailure(MakeStatus make, const std::string& what, cudaError_t e) {
  (void)cudaGetLastError();
  return make("--m2cache tier=cuda: " + what + ": " + cudaGetErrorString(e));
}

// Grow-only pinned host memory (contents are dropped when it grows).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  // The caller makes sure no queued copy still reads or writes the old memory.
  cudaError_t Reserve(size_t bytes) {
    if (bytes <= bytes_) return cudaSuccess;
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    bytes_ = 0;
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) return e;
    data_ = static_cast<uint8_t*>(p);
    bytes_ = bytes;
    return cudaSuccess;
  }
  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

// Grow-only device memory for the per-call scratch (contents are dropped when it grows).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  // The caller makes sure no queued work still uses the old memory.
  cudaError_t Reserve(size_t bytes) {
    if (bytes <= bytes_) return cudaSuccess;
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
    const cudaError_t e = cudaMalloc(&data_, bytes);
    if (e != cudaSuccess) {
      data_ = nullptr;
      return e;
    }
    bytes_ = bytes;
    return cudaSuccess;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class CudaTier final : public TierMemory {
 public:
  explicit CudaTier(int device) : device_(device) {}
  CudaTier(const CudaTier&) = delete;
  CudaTier& operator=(const CudaTier&) = delete;

  ~CudaTier() override {
    // Nothing may still run when the memory goes; errors cannot be reported from here.
    cudaSetDevice(device_);
    if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
    if (compute_stream_ != nullptr) cudaStreamSynchronize(compute_stream_);
    for (void* p : units_) cudaFree(p);
    if (copies_queued_ != nullptr) cudaEventDestroy(copies_queued_);
    if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
    if (compute_stream_ != nullptr) cudaStreamDestroy(compute_stream_);
    // The pinned and device scratch buffers free themselves after this.
  }

  // The streams, the event and the first staging ring.
  Status Init() {
    const std::string where = "CUDA device " + std::to_string(device_) + ": ";
    cudaError_t e = cudaSetDevice(device_);
    if (e != cudaSuccess) return CudaFailure(&Status::Unsupported, where + "cudaSetDevice", e);
    e = cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess)
      return CudaFailure(&Status::Unsupported, where + "cudaStreamCreate (copies)", e);
    e = cudaStreamCreateWithFlags(&compute_stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess)
      return CudaFailure(&Status::Unsupported, where + "cudaStreamCreate (compute)", e);
    e = cudaEventCreateWithFlags(&copies_queued_, cudaEventDisableTiming);
    if (e != cudaSuccess) return CudaFailure(&Status::Unsupported, where + "cudaEventCreate", e);
    e = ring_.Reserve(kRingBytes);
    if (e != cudaSuccess) {
      return CudaFailure(
          &Status::OutOfMemory,
          where + "cudaHostAlloc of the " + std::to_string(kRingBytes) + "-byte staging ring", e);
    }
    return Status::Ok();
  }

  const char* name() const override { return "cuda"; }

  Result<void*> Allocate(size_t bytes) override {
    WEIR_RETURN_IF_ERROR(UseDevice());
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (e != cudaSuccess) {
      return CudaFailure(&Status::OutOfMemory,
                         "cannot allocate a cache unit of " + std::to_string(bytes) +
                             " bytes on device " + std::to_string(device_),
                         e);
    }
    units_.push_back(p);
    allocated_ += bytes;
    e = cudaMemsetAsync(p, 0, std::max<size_t>(bytes, 1), copy_stream_);
    if (e != cudaSuccess)
      return Fail(CudaFailure(&Status::Internal, "cudaMemsetAsync of a new cache unit", e));
    return p;
  }

  void CopyIn(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || !UseDevice().ok()) return;
    if (bytes > ring_.bytes()) {
      // One copy larger than the ring: wait for the copies reading it, then grow it.
      if (!SyncCopies().ok()) return;
      const cudaError_t e = ring_.Reserve(std::max(bytes, 2 * ring_.bytes()));
      if (e != cudaSuccess) {
        Fail(CudaFailure(&Status::OutOfMemory,
                         "cudaHostAlloc of a " + std::to_string(bytes) + "-byte staging ring", e));
        return;
      }
    } else if (ring_used_ + bytes > ring_.bytes()) {
      // The ring is full: wait for the copies still reading it and start again at 0.
      if (!SyncCopies().ok()) return;
    }
    uint8_t* staged = ring_.data() + ring_used_;
    std::memcpy(staged, src, bytes);
    const cudaError_t e = cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, copy_stream_);
    if (e != cudaSuccess) {
      Fail(CudaFailure(&Status::IoError,
                       "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes into a cache unit",
                       e));
      return;
    }
    ring_used_ = AlignUp(ring_used_ + bytes, kRingAlign);
  }

  Status Flush() override {
    WEIR_RETURN_IF_ERROR(UseDevice());
    return SyncCopies();
  }

  size_t allocated() const override { return allocated_; }

  Status Compute(const NeuronRows& rows, std::span<const int32_t> slots, kernels::Glu glu,
                 const float* x, float* y, ThreadPool* /*pool*/) override {
    WEIR_RETURN_IF_ERROR(UseDevice());
    const DType t = rows.gate.dtype;
    if (!cuda::KernelSupports(t) || rows.up.dtype != t || rows.down_t.dtype != t) {
      return Status::Unsupported(
          std::string("--m2cache tier=cuda: no GPU kernel for gate/up/down rows of type ") +
          DTypeName(rows.gate.dtype) + "/" + DTypeName(rows.up.dtype) + "/" +
          DTypeName(rows.down_t.dtype) +
          "; the cuda tier computes F32, F16, BF16, Q8_0 and Q4_0 (one type per unit)");
    }
    // The views come from CacheUnit::Create: one shape, row-major, device memory of this tier.
    const int64_t d_model = rows.gate.cols();
    const int64_t capacity = rows.gate.rows();
    WEIR_CHECK(rows.up.shape == rows.gate.shape && rows.down_t.shape == rows.gate.shape);
    WEIR_CHECK(rows.gate.layout == Layout::kRowMajor && rows.up.layout == Layout::kRowMajor &&
               rows.down_t.layout == Layout::kRowMajor);
    const size_t d = static_cast<size_t>(d_model);
    const size_t n = slots.size();
    if (n == 0) {
      std::fill(y, y + d, 0.0f);
      return Status::Ok();
    }
    for (int32_t s : slots) WEIR_CHECK(s >= 0 && s < capacity);

    // Scratch: the upload [slots | pad | x], then y in the pinned buffer.
    const size_t x_offset = AlignUp(n * sizeof(int32_t), kIoAlign);
    const size_t up_bytes = x_offset + d * sizeof(float);
    const size_t y_bytes = d * sizeof(float);
    const size_t partial_floats = cuda::MlpPartialFloats(static_cast<int64_t>(n), d_model);
    WEIR_RETURN_IF_ERROR(ReserveScratch(up_bytes + y_bytes, up_bytes, n, partial_floats, d));

    std::memcpy(io_.data(), slots.data(), n * sizeof(int32_t));
    std::memcpy(io_.data() + x_offset, x, d * sizeof(float));
    // The kernels read the units only after every copy queued so far has landed.
    cudaError_t e = cudaEventRecord(copies_queued_, copy_stream_);
    if (e != cudaSuccess) return Fail(CudaFailure(&Status::Internal, "cudaEventRecord", e));
    e = cudaStreamWaitEvent(compute_stream_, copies_queued_, 0);
    if (e != cudaSuccess) return Fail(CudaFailure(&Status::Internal, "cudaStreamWaitEvent", e));
    e = cudaMemcpyAsync(d_in_.as<void>(), io_.data(), up_bytes, cudaMemcpyHostToDevice,
                        compute_stream_);
    if (e != cudaSuccess)
      return Fail(CudaFailure(&Status::IoError, "cudaMemcpyAsync of the slots and x", e));

    cuda::MlpPartArgs args;
    args.dtype = t;
    args.gate = rows.gate.data;
    args.up = rows.up.data;
    args.down_t = rows.down_t.data;
    args.row_bytes = rows.gate.row_bytes();
    args.d_model = d_model;
    args.slots = d_in_.as<int32_t>();
    args.n = static_cast<int64_t>(n);
    args.x = reinterpret_cast<const float*>(d_in_.as<uint8_t>() + x_offset);
    args.h = d_h_.as<float>();
    args.partial = d_partial_.as<float>();
    args.y = d_y_.as<float>();
    args.glu = glu;
    e = cuda::LaunchMlpPart(args, compute_stream_);
    if (e != cudaSuccess) {
      return Fail(CudaFailure(&Status::Internal,
                              std::string("kernel launch (") + DTypeName(t) + ", " +
                                  std::to_string(n) + " slots, d_model " + std::to_string(d_model) +
                                  ")",
                              e));
    }
    e = cudaMemcpyAsync(io_.data() + up_bytes, d_y_.as<void>(), y_bytes, cudaMemcpyDeviceToHost,
                        compute_stream_);
    if (e != cudaSuccess) return Fail(CudaFailure(&Status::IoError, "cudaMemcpyAsync of y", e));
    e = cudaStreamSynchronize(compute_stream_);
    if (e != cudaSuccess) return Fail(CudaFailure(&Status::Internal, "the MLP kernels", e));
    std::memcpy(y, io_.data() + up_bytes, y_bytes);
    ring_used_ = 0;  // the compute stream waited for every queued copy, so none reads the ring
    return Status::Ok();
  }

 private:
  // Remembers the first failure (the tier stays failed) and returns it.
  Status Fail(Status s) {
    if (error_.ok()) error_ = std::move(s);
    return error_;
  }

  // The first failure so far, after making the tier's device current.
  Status UseDevice() {
    if (!error_.ok()) return error_;
    const cudaError_t e = cudaSetDevice(device_);
    if (e != cudaSuccess)
      return Fail(
          CudaFailure(&Status::Internal, "cudaSetDevice(" + std::to_string(device_) + ")", e));
    return Status::Ok();
  }

  // Waits for the copy stream; the staging ring is then free.
  Status SyncCopies() {
    const cudaError_t e = cudaStreamSynchronize(copy_stream_);
    if (e != cudaSuccess)
      return Fail(CudaFailure(&Status::IoError, "copies into the cache units", e));
    ring_used_ = 0;
    return Status::Ok();
  }

  // Grows the per-call scratch (nothing of the previous call is in flight: Compute synchronizes).
  // A scratch allocation that does not fit leaves the tier usable.
  Status ReserveScratch(size_t io_bytes, size_t in_bytes, size_t n, size_t partial_floats,
                        size_t d) {
    struct Need {
      cudaError_t e;
      const char* what;
      size_t bytes;
    };
    const Need needs[] = {
        {io_.Reserve(io_bytes), "pinned upload/download buffer", io_bytes},
        {d_in_.Reserve(in_bytes), "slots and x", in_bytes},
        {d_h_.Reserve(n * sizeof(float)), "h", n * sizeof(float)},
        {d_partial_.Reserve(partial_floats * sizeof(float)), "partial sums",
         partial_floats * sizeof(float)},
        {d_y_.Reserve(d * sizeof(float)), "y", d * sizeof(float)},
    };
    for (const Need& need : needs) {
      if (need.e != cudaSuccess) {
        return CudaFailure(
            &Status::OutOfMemory,
            std::string("scratch for ") + need.what + " (" + std::to_string(need.bytes) + " bytes)",
            need.e);
      }
    }
    return Status::Ok();
  }

  const int device_;
  cudaStream_t copy_stream_ = nullptr;     // the ATU loads, in order
  cudaStream_t compute_stream_ = nullptr;  // uploads, kernels, the download of y
  cudaEvent_t copies_queued_ = nullptr;    // recorded on the copy stream by Compute
  std::vector<void*> units_;               // cache-unit memory from Allocate (cudaMalloc)
  size_t allocated_ = 0;
  PinnedBuffer ring_;     // staging of CopyIn
  size_t ring_used_ = 0;  // bytes of the ring handed to queued copies
  PinnedBuffer io_;       // [slots | pad | x | y] of one Compute
  DeviceBuffer d_in_, d_h_, d_partial_, d_y_;
  Status error_;  // the first failure; the tier is unusable after it
};

}  // namespace

Result<std::unique_ptr<TierMemory>> MakeCudaTier(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unsupported(std::string("--m2cache tier=cuda: no CUDA device: ") +
                               cudaGetErrorString(e));
  }
  if (count == 0)
    return Status::Unsupported("--m2cache tier=cuda: no CUDA device: the runtime found 0 devices");
  if (device < 0 || device >= count) {
    return Status::InvalidArgument("--m2cache tier=cuda: CUDA device " + std::to_string(device) +
                                   " does not exist (" + std::to_string(count) + " devices)");
  }
  auto tier = std::make_unique<CudaTier>(device);
  WEIR_RETURN_IF_ERROR(tier->Init());
  return std::unique_ptr<TierMemory>(std::move(tier));
}

}  // namespace weir::m2cache
