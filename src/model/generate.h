// Generate: the prefill-then-decode loop shared by `weir run`, the demo and benchmarks.
// Timing is measured here (wall clock around prefill and around decode) so every tool reports
// speeds the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

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
  bool stopped_at_full_context = false;  // the context filled before n_predict, no shift asked
  int context_shifts = 0;                // times the sequence was cut and prefilled anew
  double prompt_tok_s() const { return prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? generated_tokens / decode_seconds : 0; }
};

// What Generate does when the context fills before n_predict tokens are sampled. Off: it stops
// there. On: the sequence is cut to its first `keep` tokens (at most half the context) and the
// most recent half of the rest, the session starts again and prefills that, and generation goes
// on. The cut sequence is prefilled anew rather than its cached keys re-rotated to new
// positions, so what follows a shift is exactly what a fresh run on the cut sequence computes.
struct ContextShift {
  bool enabled = false;
  int keep = 0;
};

// Feeds `prompt`, then samples up to n_predict tokens (stopping after eos_id when >= 0 or when
// the context is full and `shift` is off), calling on_token for each sampled token; on_token
// returning false stops. Prefills after a shift count as decode time.
Result<GenerateStats> Generate(Session& session, Sampler& sampler, std::span<const int32_t> prompt,
                               int n_predict, int32_t eos_id,
                               const std::function<bool(int32_t)>& on_token,
                               const ContextShift& shift = {});

// The sequence a shift leaves of `tokens` (the cached sequence plus the token to feed next) in a
// context of `ctx`: the first min(keep, ctx / 2) tokens and the last (ctx - kept) / 2.
std::vector<int32_t> ShiftedSequence(std::span<const int32_t> tokens, int ctx, int keep);

}  // namespace weir::model
