// Which instruction-set path the kernels run on.
//
//   scalar   : the reference kernels (kernels::ref), one row at a time; slow, defines the results.
//   portable : Highway (libhwy) code with Highway's own runtime target choice; what an ARM or
//              any non-x86 build runs. On x86 it picks the best target Highway compiled for.
//   avx2     : hand-written AVX2 + FMA + F16C kernels (Haswell and later, Zen).
//   avx512   : hand-written AVX-512 F/BW/VL + VNNI kernels (Ice Lake, Sapphire Rapids, Zen 4).
//
// The default is the best path this CPU supports (checked with __builtin_cpu_supports). The
// environment variable WEIR_KERNELS=scalar|portable|avx2|avx512 forces one (for tests and
// benchmarks); it is read once, at the first kernel call. A path the CPU lacks is never used: an
// unsupported or misspelled value falls back to the best path (IsaFromEnv reports the problem).
//
// ScopedIsaOverride switches the calling thread to another path for a scope; the kernels pick
// their path on the calling thread before fanning out to the pool, so the override covers the
// whole call. Tests use it to run every available path in one process.
//
// Thread safety: all functions are safe to call concurrently. The process-wide choice is a
// function-local static (CPU features cannot change while the process runs); the override is
// thread_local.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace weir::kernels {

enum class Isa { kScalar = 0, kPortable = 1, kAvx2 = 2, kAvx512 = 3 };

// "scalar", "portable", "avx2", "avx512".
const char* IsaName(Isa isa);
std::optional<Isa> ParseIsa(std::string_view name);

// Whether this CPU (and this build) can run the path. Scalar and portable always can.
bool IsaSupported(Isa isa);
// Every supported path, scalar first.
std::vector<Isa> SupportedIsas();
// The fastest supported path.
Isa BestIsa();

// The value of WEIR_KERNELS: nullopt when unset or empty; an error when it names no path or one
// this CPU cannot run.
Result<std::optional<Isa>> IsaFromEnv();

// The path kernels called on this thread use now: the innermost ScopedIsaOverride, else
// WEIR_KERNELS when valid, else BestIsa().
Isa ActiveIsa();

// Forces `isa` on the calling thread while alive. `isa` must be supported (checked).
class ScopedIsaOverride {
 public:
  explicit ScopedIsaOverride(Isa isa);
  ~ScopedIsaOverride();
  ScopedIsaOverride(const ScopedIsaOverride&) = delete;
  ScopedIsaOverride& operator=(const ScopedIsaOverride&) = delete;

 private:
  int previous_;
};

}  // namespace weir::kernels
