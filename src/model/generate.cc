#include "model/generate.h"

#include <algorithm>
#include <chrono>

namespace weir::model {

std::vector<int32_t> ShiftedSequence(std::span<const int32_t> tokens, int ctx, int keep) {
  const size_t kept = static_cast<size_t>(std::clamp(keep, 0, ctx / 2));
  const size_t head = std::min(kept, tokens.size());
  const size_t tail = std::min(static_cast<size_t>(std::max(1, (ctx - static_cast<int>(kept)) / 2)),
                               tokens.size() - head);
  std::vector<int32_t> out(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(head));
  out.insert(out.end(), tokens.end() - static_cast<ptrdiff_t>(tail), tokens.end());
  return out;
}

Result<GenerateStats> Generate(Session& session, Sampler& sampler, std::span<const int32_t> prompt,
                               int n_predict, int32_t eos_id,
                               const std::function<bool(int32_t)>& on_token,
                               const ContextShift& shift) {
  using Clock = std::chrono::steady_clock;
  GenerateStats st;
  st.prompt_tokens = static_cast<int>(prompt.size());
  auto t0 = Clock::now();
  WEIR_ASSIGN_OR_RETURN(const float* logits, session.Prefill(prompt));
  // The cached sequence, kept only when a shift may need it.
  std::vector<int32_t> cached;
  if (shift.enabled) cached.assign(prompt.begin(), prompt.end());
  auto t1 = Clock::now();
  st.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (int i = 0; i < n_predict; ++i) {
    int32_t tok = sampler.Sample(logits);
    ++st.generated_tokens;
    if (on_token && !on_token(tok)) break;
    if (tok == eos_id) {
      st.stopped_at_eos = true;
      break;
    }
    if (i + 1 == n_predict) break;
    if (session.pos() < session.ctx()) {
      WEIR_ASSIGN_OR_RETURN(logits, session.Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast));
      if (shift.enabled) cached.push_back(tok);
      continue;
    }
    if (!shift.enabled) {
      st.stopped_at_full_context = true;
      break;
    }
    cached.push_back(tok);
    cached = ShiftedSequence(cached, session.ctx(), shift.keep);
    session.Reset();
    WEIR_ASSIGN_OR_RETURN(logits, session.Prefill(cached));
    ++st.context_shifts;
  }
  st.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return st;
}

}  // namespace weir::model
