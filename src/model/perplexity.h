// Perplexity over a token stream, by default with llama.cpp's perplexity scheme so numbers
// compare directly: the stream is cut into non-overlapping chunks of ctx tokens, the first token
// of each chunk is replaced by BOS, and only the predictions in the second half of each chunk are
// scored (positions ctx/2 .. ctx-2 predicting the next token). Score::kAll scores every
// prediction of the chunk (positions 0 .. ctx-2).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/session.h"

namespace weir::model {

struct PerplexityOptions {
  enum class Score { kSecondHalf, kAll };
  Score score = Score::kSecondHalf;
  int max_chunks = 0;  // 0 = all
  // When set, receives the argmax of every scored position's logits, in scoring order (to count
  // how often two runs' greedy choices differ).
  std::vector<int32_t>* argmax = nullptr;
};

struct PerplexityResult {
  double ppl = 0;
  double ppl_stderr = 0;  // ppl * standard error of the mean negative log-likelihood
  double mean_nll = 0;
  int64_t tokens_scored = 0;
  int chunks = 0;
};

// Uses the session's context size as the chunk length. progress(done, total) after each chunk.
Result<PerplexityResult> Perplexity(Session& session, std::span<const int32_t> tokens, int32_t bos_id,
                                    const PerplexityOptions& options,
                                    const std::function<void(int, int)>& progress = nullptr);

}  // namespace weir::model
