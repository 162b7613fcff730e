// Synthetic mask sources with stated statistics, for simulating models and sparsity levels
// that were never run here. Spec strings (the --masks flag):
//
//   dense                    every unit active every token.
//   uniform:D                each unit active independently with probability D per token
//   uniform:d=D,seed=S       (no popularity skew, no temporal correlation).
//   zipf:D                   exactly round(D * n) units active per token (top-k sparsity),
//   zipf:d=D,s=S,r=R,seed=N  chosen by skewed popularity with temporal correlation:
//       * popularity: stream units get ranks by a seeded random permutation; the unit of rank i
//         (0-based) has weight 1 / (i + 1)^S. S = 0 is no skew; S = 1 (default) is classic Zipf.
//       * correlation: round(R * k) of the previous token's k active units, picked uniformly,
//         stay active (R = 0 default: independent tokens; R = 1: the set never changes);
//       * the remaining units are drawn without replacement with probability proportional to
//         weight (Efraimidis-Spirakis keys), so more popular units are active more often.
//
// MoE streams (n_experts > 1): per token a router first picks n_experts_active experts
// uniformly at random (with R > 0, each previously picked expert is kept with probability R);
// units of other experts are inactive, and D applies within the picked experts. So the
// stream's overall density is D * n_experts_active / n_experts.
//
// Each stream has its own generator seeded from (seed, stream index), so a stream's masks do
// not depend on which other streams are generated, and Rewind() replays them exactly.
//
// Thread safety: a source is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "sim/mask_source.h"

namespace weir::sim {

struct SyntheticSpec {
  enum class Kind { kDense, kUniform, kZipf };
  Kind kind = Kind::kDense;
  double density = 1.0;  // D
  double zipf_s = 1.0;   // S
  double repeat = 0.0;   // R
  uint64_t seed = 1;
};

Result<SyntheticSpec> ParseSyntheticSpec(const std::string& text);
std::string DescribeSyntheticSpec(const SyntheticSpec& spec);

Result<std::unique_ptr<MaskSource>> MakeSyntheticSource(MaskLayout layout,
                                                        const SyntheticSpec& spec,
                                                        int64_t n_tokens);

}  // namespace weir::sim
