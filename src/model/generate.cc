#include "model/generate.h"

#include <chrono>

namespace weir::model {

Result<GenerateStats> Generate(Session& session, Sampler& sampler, std::span<const int32_t> prompt,
                               int n_predict, int32_t eos_id,
                               const std::function<bool(int32_t)>& on_token) {
  using Clock = std::chrono::steady_clock;
  GenerateStats st;
  st.prompt_tokens = static_cast<int>(prompt.size());
  auto t0 = Clock::now();
  WEIR_ASSIGN_OR_RETURN(const float* logits, session.Prefill(prompt));
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
    if (i + 1 == n_predict || session.pos() >= session.ctx()) break;
    WEIR_ASSIGN_OR_RETURN(logits, session.Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast));
  }
  st.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return st;
}

}  // namespace weir::model
