// The DRAM top tier of the CPU engine: plain aligned host buffers and memcpy.
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
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

 private:
  std::vector<AlignedBuffer> buffers_;
  size_t allocated_ = 0;
};

}  // namespace

std::unique_ptr<TierMemory> MakeHostTier() { return std::make_unique<HostTier>(); }

}  // namespace weir::m2cache
