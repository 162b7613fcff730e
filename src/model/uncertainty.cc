#include "model/uncertainty.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace weir::model {
namespace {

// Entropy (nats) of softmax(logits), and the argmax (the lowest index on a tie).
double Entropy(const float* logits, int vocab, int32_t* argmax) {
  int32_t best = 0;
  for (int i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  *argmax = best;
  const double mx = logits[best];
  double z = 0, s = 0;
  for (int i = 0; i < vocab; ++i) {
    const double l = logits[i] - mx;
    const double e = std::exp(l);
    z += e;
    s += e * l;
  }
  // H = log z - E[l] with p = e^l / z.
  return std::log(z) - s / z;
}

}  // namespace

Result<UncertaintyResult> Uncertainty(Session& session, std::span<const int32_t> tokens, int32_t bos_id,
                                      const UncertaintyOptions& o, const std::function<void(int, int)>& progress) {
  if (o.prompts < 1 || o.prompt_len < 1 || o.generate < 1) {
    return Status::InvalidArgument("uncertainty: prompts, prompt length and generated tokens must be positive");
  }
  const int64_t need = static_cast<int64_t>(o.prompts) * o.prompt_len;
  if (static_cast<int64_t>(tokens.size()) < need) {
    return Status::InvalidArgument("uncertainty: the text has " + std::to_string(tokens.size()) + " tokens; " +
                                   std::to_string(o.prompts) + " prompts of " + std::to_string(o.prompt_len) +
                                   " need " + std::to_string(need));
  }
  const int extra = bos_id >= 0 ? 1 : 0;
  if (o.prompt_len + extra + o.generate > session.ctx()) {
    return Status::InvalidArgument("uncertainty: a prompt of " + std::to_string(o.prompt_len) + " tokens and " +
                                   std::to_string(o.generate) + " generated ones do not fit a context of " +
                                   std::to_string(session.ctx()));
  }
  const int vocab = session.model().config().vocab_size;
  UncertaintyResult r;
  std::vector<int32_t> prompt;
  for (int p = 0; p < o.prompts; ++p) {
    session.Reset();
    prompt.clear();
    if (bos_id >= 0) prompt.push_back(bos_id);
    prompt.insert(prompt.end(), tokens.begin() + static_cast<int64_t>(p) * o.prompt_len,
                  tokens.begin() + static_cast<int64_t>(p + 1) * o.prompt_len);
    WEIR_ASSIGN_OR_RETURN(const float* logits, session.Prefill(prompt));
    for (int g = 0; g < o.generate; ++g) {
      int32_t next = 0;
      r.sum += Entropy(logits, vocab, &next);
      ++r.scored;
      if (g + 1 == o.generate) break;
      const int32_t one[1] = {next};
      WEIR_ASSIGN_OR_RETURN(logits, session.Forward(one, LogitsFor::kLast));
    }
    if (progress) progress(p + 1, o.prompts);
  }
  r.mean = r.scored ? r.sum / static_cast<double>(r.scored) : 0;
  return r;
}

}  // namespace weir::model
