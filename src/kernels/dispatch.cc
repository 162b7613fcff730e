#include "kernels/internal/dispatch.h"

#include "base/aligned_buffer.h"
#include "base/check.h"

namespace weir::kernels::internal {

const IsaKernels& KernelsFor(Isa isa) {
  const IsaKernels* k = nullptr;
  switch (isa) {
    case Isa::kScalar:
      k = ScalarKernels();
      break;
    case Isa::kPortable:
      k = PortableKernels();
      break;
    case Isa::kAvx2:
      k = Avx2Kernels();
      break;
    case Isa::kAvx512:
      k = Avx512Kernels();
      break;
  }
  WEIR_CHECK(k != nullptr);
  return *k;
}

const IsaKernels& ActiveKernels() { return KernelsFor(ActiveIsa()); }

void* ThreadScratch(ScratchSlot slot, size_t bytes) {
  thread_local AlignedBuffer buffers[4];
  AlignedBuffer& b = buffers[static_cast<int>(slot)];
  if (b.size() < bytes) {
    // Grow geometrically so a slowly rising size does not reallocate every call.
    size_t want = b.size() * 2 > bytes ? b.size() * 2 : bytes;
    WEIR_CHECK(b.Reset(want, 64));
  }
  return b.data();
}

}  // namespace weir::kernels::internal
