// `--m2cache SPEC`: key=value pairs, comma-separated, any order:
//   high=F     fraction of each layer's neurons at the high precision (default 0.1)
//   low=F      fraction at the low precision (default 0.4); high + low <= 1
//   hi=TYPE    the high precision (q8_0 by default; f16, bf16, q8_0, q5_0, ... any weir type
//              whose block divides d_model)
//   lo=TYPE    the low precision (q4_0 by default)
//   rank=R     the low-rank predictor's rank (64 by default)
//   predictor=lowrank|glu|oracle   lowrank: |act(ĝ)| from the low-rank gate; glu: |act(ĝ) · û|
//              from low-rank gate and up (twice the bytes); oracle: the true top set from a
//              dense pass (an upper bound; it reads every neuron, so it saves no bytes)
//   predictor=trained:FILE   the logits of a predictor trained by `weir m2fit` (predictor_file.h)
//   units=on|off   compute from the per-layer ATU cache units (on) or straight from the store
//   tier=dram|cuda the top tier holding the units: dram (the CPU engine, default) or cuda (GPU
//              memory and CUDA kernels; needs a build with -DWEIR_CUDA=ON and a GPU)
//   recall=on|off  also count the predictor's recall of the true top set (a dense pass per token)
// Errors name the spec and the bad part.
#pragma once

#include <string>

#include "base/status.h"
#include "m2cache/mixed_mlp.h"

namespace weir::m2cache {

Result<MixConfig> ParseMixConfig(const std::string& spec);

}  // namespace weir::m2cache
