// Generate: the prefill-then-decode loop shared by `weir run`, the demo and benchmarks.
// Timing is measured here (wall clock around prefill and around decode) so every tool reports
// speeds the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "model/sampler.h"
#include "model/session.h"

namespace weir::model {

struct GenerateStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prompt_seconds = 0;
  double decode_seconds = 0;  // from the first sampled token to the last
  bool stopped_at_eos = false;
  double prompt_tok_s() const { return prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? generated_tokens / decode_seconds : 0; }
};

// Feeds `prompt`, then samples up to n_predict tokens (stopping after eos_id when >= 0 or when
// the context is full), calling on_token for each sampled token; on_token returning false stops.
Result<GenerateStats> Generate(Session& session, Sampler& sampler, std::span<const int32_t> prompt,
                               int n_predict, int32_t eos_id,
                               const std::function<bool(int32_t)>& on_token);

}  // namespace weir::model
