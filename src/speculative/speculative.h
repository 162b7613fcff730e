// Speculative decoding: a draft (draft.h) proposes K tokens, the target model runs the last
// emitted token and the K proposals as one forward pass (one read of its weights, which is what a
// streamed model pays for), and the sampler keeps the longest prefix the target agrees with,
// plus the target's own next token. The output is the target's:
//   greedy       the same tokens as Generate (model/generate.h). The verify pass computes every
//                position with the numbers of single-token decode (the kernels are
//                batch-invariant: each token's dot products sum in the same order whatever the
//                batch; tests/model/verify_pass_test.cc checks it bit for bit), so there are no
//                rounding ties to explain.
//   temperature  Sampler::Verify's rule: every token is distributed exactly as Sample's.
// Rejected positions are dropped from the KV cache with Session::Rewind (sliding-window rings
// hold a batch beyond their window, so the rewind always succeeds there).
//
// K adapts to the draft: it grows by 2 after a pass that accepted everything and falls to one
// more than the accepted count otherwise. Two passes in a row that accept nothing pause drafting
// for 8 tokens; two more such passes pause it for 16, and the next two turn drafting off for the
// rest of the call. A model draft must catch up on every token
// it skipped before it proposes again (a prefill of its own), so a draft that never matches
// costs its prompt, a handful of short verify passes and those catch-ups, and then nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "model/generate.h"
#include "model/sampler.h"
#include "model/session.h"
#include "speculative/draft.h"

namespace weir::speculative {

struct SpeculativeOptions {
  int draft_max = 8;     // most tokens proposed per pass (>= 1; capped by n_batch - 1)
  int draft_min = 0;     // proposals shorter than this are not verified (a plain step instead)
  bool adaptive = true;  // K from the running acceptance (above); false: always draft_max
};

struct SpeculativeStats {
  uint64_t drafted = 0;        // tokens proposed and verified
  uint64_t accepted = 0;       // of them, the ones the target agreed with
  uint64_t target_passes = 0;  // target forward calls while decoding (verify passes + plain steps)
  uint64_t emitted = 0;        // tokens emitted by those passes
  double draft_seconds = 0;    // in Draft::Propose
  double verify_seconds = 0;   // in the target's forward passes while decoding
  double acceptance() const { return drafted ? static_cast<double>(accepted) / drafted : 0; }
  double tokens_per_pass() const {
    return target_passes ? static_cast<double>(emitted) / target_passes : 0;
  }
};

// Generate (model/generate.h) with a draft: the same contract and stats (context shifts
// included), the speculative counters added to `spec` (not reset). options.draft_max < 1 is
// InvalidArgument. It prefills `prompt`, then Continue()s.
Result<model::GenerateStats> GenerateSpeculative(
    model::Session& target, Draft& draft, model::Sampler& sampler, std::span<const int32_t> prompt,
    int n_predict, int32_t eos_id, const std::function<bool(int32_t)>& on_token,
    const model::ContextShift& shift, const SpeculativeOptions& options, SpeculativeStats* spec);

// The decoding half, for callers that prefill themselves (weir chat keeps its cache across
// turns): `sequence` holds every token of the target's KV cache (target.pos() of them) and
// `logits` are the last one's. Samples up to n_predict tokens as GenerateSpeculative does,
// appending each to `sequence`; on return the cache holds all of `sequence` but its last token.
// `stats` receives generated_tokens, the stop reasons and context_shifts.
Status Continue(model::Session& target, Draft& draft, model::Sampler& sampler,
                std::vector<int32_t>* sequence, const float* logits, int n_predict, int32_t eos_id,
                const std::function<bool(int32_t)>& on_token, const model::ContextShift& shift,
                const SpeculativeOptions& options, SpeculativeStats* spec, model::GenerateStats* stats);

}  // namespace weir::speculative
