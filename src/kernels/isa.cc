#include "kernels/isa.h"

#include <cstdlib>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <string>

#include "base/check.h"

namespace weir::kernels {
namespace {

// -1: no override on this thread; otherwise an Isa value.
thread_local int tls_override = -1;

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

bool CpuHasAvx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c();
#else
  return false;
#endif
}

bool CpuHasAvx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

Isa ProcessIsa() {
  static const Isa isa = [] {
    Result<std::optional<Isa>> env = IsaFromEnv();
    if (env.ok() && env->has_value()) return **env;
    return BestIsa();
  }();
  return isa;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

std::optional<Isa> ParseIsa(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (name == IsaName(isa)) return isa;
  }
  return std::nullopt;
}

bool IsaSupported(Isa isa) {
  static const bool has_avx2 = CpuHasAvx2();
  static const bool has_avx512 = CpuHasAvx512();
  switch (isa) {
    case Isa::kScalar:
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return has_avx2;
    case Isa::kAvx512:
      return has_avx512;
  }
  return false;
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

Isa BestIsa() {
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kPortable;
}

Result<std::optional<Isa>> IsaFromEnv() {
  const char* v = std::getenv("WEIR_KERNELS");
  if (v == nullptr || *v == '\0') return std::optional<Isa>();
  std::optional<Isa> isa = ParseIsa(v);
  if (!isa) {
    return Status::InvalidArgument(StrFormat(
        "WEIR_KERNELS='%s' names no kernel path (expected scalar, portable, avx2 or avx512)", v));
  }
  if (!IsaSupported(*isa)) {
    return Status::Unsupported(StrFormat(
        "WEIR_KERNELS='%s': this CPU cannot run that path (best is %s)", v, IsaName(BestIsa())));
  }
  return isa;
}

Isa ActiveIsa() {
  if (tls_override >= 0) return static_cast<Isa>(tls_override);
  return ProcessIsa();
}

ScopedIsaOverride::ScopedIsaOverride(Isa isa) : previous_(tls_override) {
  WEIR_CHECK(IsaSupported(isa));
  tls_override = static_cast<int>(isa);
}

ScopedIsaOverride::~ScopedIsaOverride() { tls_override = previous_; }

}  // namespace weir::kernels
