// The DRAM top tier of the CPU engine: plain aligned host buffers and memcpy.
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/gather.h"
#include "m2cache/tier_memory.h"

namespace weir::m2cache {
namespace {

class HostTier final : public TierMemory {
 public:
  const char* name() const override { return "dram"; }
  Result<void*> Allocate(size_t bytes) override {
    AlignedBuffer buf;
    if (!buf.Reset(bytes)) return Status::OutOfMemory("m2cache: cannot allocate a cache unit of " + std::to_string(bytes) + " bytes");
    void* p = buf.data<void>();
    buffers_.push_back(std::move(buf));
    allocated_ += bytes;
    return p;
  }
  void CopyIn(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  Status Flush() override { return Status::Ok(); }
  size_t allocated() const override { return allocated_; }
  Status Compute(const NeuronRows& rows, std::span<const int32_t> slots, kernels::Glu glu, const float* x, float* y,
                 ThreadPool* pool) override {
    const size_t n = static_cast<size_t>(rows.gate.rows());
    if (g_.size() < n) g_.resize(n), u_.resize(n), h_.resize(n);
    HostMlpPart(rows, slots, glu, x, y, g_.data(), u_.data(), h_.data(), pool);
    return Status::Ok();
  }

 private:
  std::vector<float> g_, u_, h_;  // grow-only scratch
  std::vector<AlignedBuffer> buffers_;
  size_t allocated_ = 0;
};

}  // namespace

void HostMlpPart(const NeuronRows& rows, std::span<const int32_t> slots, kernels::Glu glu, const float* x, float* y,
                 float* g, float* u, float* h, ThreadPool* pool) {
  const int64_t n = static_cast<int64_t>(slots.size());
  kernels::GatherMatVecRows(rows.gate, slots.data(), n, x, g, pool);
  kernels::GatherMatVecRows(rows.up, slots.data(), n, x, u, pool);
  for (int32_t s : slots) {
    kernels::GatedActivation(glu, g + s, u + s, 1);
    h[s] = g[s];
  }
  kernels::GatherMatVecCols(rows.down_t, slots.data(), n, h, y, pool);
}

std::unique_ptr<TierMemory> MakeHostTier() { return std::make_unique<HostTier>(); }

}  // namespace weir::m2cache

namespace weir::m2cache {

Result<std::unique_ptr<TierMemory>> MakeTier(const std::string& name) {
  if (name == "dram") return MakeHostTier();
  if (name == "cuda") {
#ifdef WEIR_HAVE_CUDA
    return MakeCudaTier(0);
#else
    return Status::Unsupported("--m2cache tier=cuda: this weir was built without CUDA; rebuild with -DWEIR_CUDA=ON");
#endif
  }
  return Status::InvalidArgument("--m2cache tier=" + name + ": the tiers are dram and cuda");
}

}  // namespace weir::m2cache
