#include "speculative/speculative.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace weir::speculative {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// How many tokens to ask the draft for next (the header's rule).
class DraftLength {
 public:
  DraftLength(int max, bool adaptive) : max_(max), k_(max), adaptive_(adaptive) {}
  int Next() {
    if (off_) return 0;
    if (pause_ > 0) {
      --pause_;
      return 0;
    }
    return k_;
  }
  void Update(int proposed, int accepted) {
    if (!adaptive_ || proposed == 0) return;
    k_ = accepted == proposed ? std::min(max_, k_ + 2) : std::max(1, accepted + 1);
    if (accepted > 0) {
      misses_ = 0;
      pauses_ = 0;
      return;
    }
    if (++misses_ < 2) return;
    misses_ = 0;
    if (++pauses_ > kPauses) {
      off_ = true;
      return;
    }
    pause_ = kFirstPause << (pauses_ - 1);
  }

 private:
  static constexpr int kFirstPause = 8, kPauses = 2;  // pauses of 8 and 16 tokens, then off
  int max_, k_;
  bool adaptive_;
  int misses_ = 0, pauses_ = 0, pause_ = 0;
  bool off_ = false;
};

}  // namespace

Result<model::GenerateStats> GenerateSpeculative(
    model::Session& target, Draft& draft, model::Sampler& sampler, std::span<const int32_t> prompt,
    int n_predict, int32_t eos_id, const std::function<bool(int32_t)>& on_token,
    const model::ContextShift& shift, const SpeculativeOptions& options, SpeculativeStats* spec) {
  if (options.draft_max < 1) return Status::InvalidArgument("draft_max must be at least 1");
  model::GenerateStats st;
  st.prompt_tokens = static_cast<int>(prompt.size());
  const auto t0 = Clock::now();
  WEIR_ASSIGN_OR_RETURN(const float* logits, target.Prefill(prompt));
  WEIR_RETURN_IF_ERROR(draft.Prefill(prompt));  // a draft model's own prompt
  const auto t1 = Clock::now();
  st.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  WEIR_RETURN_IF_ERROR(Continue(target, draft, sampler, &seq, logits, n_predict, eos_id, on_token,
                                shift, options, spec, &st));
  st.decode_seconds = Since(t1);
  return st;
}

Status Continue(model::Session& target, Draft& draft, model::Sampler& sampler,
                std::vector<int32_t>* sequence, const float* logits, int n_predict, int32_t eos_id,
                const std::function<bool(int32_t)>& on_token, const model::ContextShift& shift,
                const SpeculativeOptions& options, SpeculativeStats* spec, model::GenerateStats* stats) {
  if (options.draft_max < 1) return Status::InvalidArgument("draft_max must be at least 1");
  SpeculativeStats local_spec;
  SpeculativeStats& sp = spec ? *spec : local_spec;
  model::GenerateStats local_stats;
  model::GenerateStats& st = stats ? *stats : local_stats;
  const int vocab = target.model().config().vocab_size;

  // seq: the prompt and every emitted token (after a shift, the cut sequence); all but its last
  // token are in the target's KV cache.
  std::vector<int32_t>& seq = *sequence;
  const int limit = st.generated_tokens + n_predict;
  auto emit = [&](int32_t t) {  // false: generation ends here
    ++st.generated_tokens;
    seq.push_back(t);
    if (on_token && !on_token(t)) return false;
    if (t == eos_id) {
      st.stopped_at_eos = true;
      return false;
    }
    return st.generated_tokens < limit;
  };

  DraftLength length(std::min(options.draft_max, target.n_batch() - 1), options.adaptive);
  std::vector<int32_t> proposal, input;
  bool go = n_predict > 0 && emit(sampler.Sample(logits));
  while (go) {
    const int room = target.ctx() - target.pos();
    if (room == 0) {
      if (!shift.enabled) {
        st.stopped_at_full_context = true;
        break;
      }
      seq = model::ShiftedSequence(seq, target.ctx(), shift.keep);
      target.Reset();
      WEIR_ASSIGN_OR_RETURN(logits, target.Prefill(seq));
      ++st.context_shifts;
      go = emit(sampler.Sample(logits));
      continue;
    }
    // Propose.
    const int k = std::min({length.Next(), room - 1, limit - st.generated_tokens});
    proposal.clear();
    if (k > 0) {
      const auto td = Clock::now();
      WEIR_RETURN_IF_ERROR(draft.Propose(seq, k, &proposal));
      if (proposal.size() > static_cast<size_t>(k)) proposal.resize(static_cast<size_t>(k));
      sp.draft_seconds += Since(td);
    }
    if (proposal.size() < static_cast<size_t>(std::max(options.draft_min, 0))) proposal.clear();

    // Verify: the last emitted token and the proposal in one pass.
    input.assign(1, seq.back());
    input.insert(input.end(), proposal.begin(), proposal.end());
    const int pos0 = target.pos();
    const auto tv = Clock::now();
    WEIR_ASSIGN_OR_RETURN(logits, target.Forward(input, proposal.empty() ? model::LogitsFor::kLast
                                                                          : model::LogitsFor::kAll));
    sp.verify_seconds += Since(tv);
    ++sp.target_passes;
    int accepted = 0;
    bool ended_on_draft = false;  // the last emitted token was an accepted proposal
    for (size_t i = 0;; ++i) {
      const int32_t want = i < proposal.size() ? proposal[i] : -1;
      const int32_t y = sampler.Verify(logits + i * static_cast<size_t>(vocab), want);
      ++sp.emitted;
      go = emit(y);
      if (y != want) break;
      ++accepted;
      if (!go) {
        ended_on_draft = true;
        break;
      }
    }
    sp.drafted += proposal.size();
    sp.accepted += static_cast<uint64_t>(accepted);
    length.Update(static_cast<int>(proposal.size()), accepted);

    // Keep in the cache what was fed and accepted, minus the last emitted token (Generate's state:
    // every token but the last is cached).
    const int keep = pos0 + 1 + accepted - (ended_on_draft ? 1 : 0);
    if (!target.Rewind(keep)) {
      target.Reset();
      WEIR_RETURN_IF_ERROR(target.Prefill(std::span<const int32_t>(seq).first(seq.size() - 1)).status());
    }
  }
  return Status::Ok();
}

}  // namespace weir::speculative
