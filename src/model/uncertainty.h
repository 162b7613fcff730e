// UQEst, M2Cache's uncertainty score (paper 004 §5.2, eq. 2): the entropy of the distributions a
// model predicts for the tokens it generates after a prompt,
//   UQEst = - Σ_{i > j} Σ_k p_k^i log p_k^i
// (j = prompt length, i over the generated positions). Prompts are consecutive slices of a token
// stream (wikitext-2 in the paper); each is prefilled after BOS, then `generate` tokens are
// chosen greedily, and the entropy (nats) of each of their distributions is summed. The result
// also gives the mean per generated token, which compares runs of different lengths.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "model/session.h"

namespace weir::model {

struct UncertaintyOptions {
  int prompts = 8;     // slices of the stream
  int prompt_len = 64; // tokens per prompt
  int generate = 32;   // tokens generated (and scored) per prompt
};

struct UncertaintyResult {
  double sum = 0;   // UQEst: the summed entropy, nats
  double mean = 0;  // per generated token
  int64_t scored = 0;
};

// Needs prompts * prompt_len tokens in `tokens` and prompt_len + generate + 1 positions of context.
// progress(done, total) after each prompt.
Result<UncertaintyResult> Uncertainty(Session& session, std::span<const int32_t> tokens, int32_t bos_id,
                                      const UncertaintyOptions& options,
                                      const std::function<void(int, int)>& progress = nullptr);

}  // namespace weir::model
