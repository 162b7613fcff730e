// Picks the kernel table of the active path and hands out per-thread scratch for the public
// kernels. Not part of the public API (tests and benches may use it).
//
// Thread safety: ActiveKernels is safe anywhere; ThreadScratch returns memory owned by the calling
// thread (valid until that thread's next ThreadScratch call with the same slot).
#pragma once

#include <cstddef>

#include "kernels/internal/isa_kernels.h"
#include "kernels/isa.h"

namespace weir::kernels::internal {

const IsaKernels& KernelsFor(Isa isa);
// KernelsFor(ActiveIsa()).
const IsaKernels& ActiveKernels();

// Independent scratch areas of the calling thread.
enum class ScratchSlot { kActivation = 0, kPartialSums = 1, kTopK = 2, kDequantRows = 3 };
// At least `bytes` bytes, 64-byte aligned, contents unspecified. Grows (never shrinks) the
// calling thread's buffer for that slot; only a growth allocates.
void* ThreadScratch(ScratchSlot slot, size_t bytes);

}  // namespace weir::kernels::internal
