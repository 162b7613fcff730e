// Draft: what proposes the tokens a speculative decoder (speculative/speculative.h) hands the
// target model to verify. A draft is deterministic: it proposes its own greedy continuation (the
// acceptance rule of Sampler::Verify keeps the target's distribution exactly for any
// deterministic proposal), and it may propose fewer tokens than asked, or none.
//
// Kinds (speculative/draft_spec.h parses `--draft`):
//   NgramDraft (ngram_draft.h)  the continuation of the sequence's latest earlier occurrence of
//                               its last N tokens; no model.
//   ModelDraft (model_draft.h)  a model's greedy continuation: a separate small model with the
//                               target's vocabulary, or the target's own weights under a
//                               sparsity policy ("self").
//   DraftChain (below)          several drafts in order: the first that proposes anything wins.
//
// Thread safety: one draft serves one decoder (one thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace weir::speculative {

class Draft {
 public:
  virtual ~Draft() = default;
  // "ngram:3", "self:dip:0.5", the model's path: for stats and logs.
  virtual std::string name() const = 0;
  // Up to `max` tokens to follow `sequence` (everything decoded so far: prompt, then the emitted
  // tokens, the last of which the target has not run yet) into `out` (cleared first).
  // An error is the draft model's (streamed weights that cannot be read); the decoder stops.
  virtual Status Propose(std::span<const int32_t> sequence, int max, std::vector<int32_t>* out) = 0;
  // Takes in a prompt ahead of the first Propose (a draft model prefills it), so that its cost
  // counts as the prompt's. Optional: Propose catches up on whatever is new anyway.
  virtual Status Prefill(std::span<const int32_t> prompt) {
    (void)prompt;
    return Status::Ok();
  }
  // Bytes the draft holds beyond the target (a draft model's weights, session and KV cache).
  virtual uint64_t allocated_bytes() const { return 0; }
};

// Several drafts tried in order (e.g. ngram, then self): the first non-empty proposal is used.
class DraftChain : public Draft {
 public:
  explicit DraftChain(std::vector<std::unique_ptr<Draft>> drafts) : drafts_(std::move(drafts)) {}
  std::string name() const override;
  Status Propose(std::span<const int32_t> sequence, int max, std::vector<int32_t>* out) override;
  Status Prefill(std::span<const int32_t> prompt) override;
  uint64_t allocated_bytes() const override;
  // Proposals that came from each draft, in order.
  const std::vector<uint64_t>& proposals_by_draft() const { return used_; }

 private:
  std::vector<std::unique_ptr<Draft>> drafts_;
  std::vector<uint64_t> used_ = std::vector<uint64_t>(drafts_.size(), 0);
};

}  // namespace weir::speculative
