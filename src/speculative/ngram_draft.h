// NgramDraft: prompt lookup. The sequence's last n tokens (n = N, then N-1, ... down to 1) are
// looked for earlier in the sequence; the tokens that followed their latest earlier occurrence
// are proposed (continued periodically when the occurrence ends the sequence). It costs a scan of the sequence and reads no weights, so it pays wherever text
// repeats its context (code edits, quotes, summaries, chat turns that cite the prompt).
#pragma once

#include "speculative/draft.h"

namespace weir::speculative {

class NgramDraft : public Draft {
 public:
  // n: the longest n-gram matched (1 to 16; 3 by default in --draft ngram).
  explicit NgramDraft(int n) : n_(n) {}
  std::string name() const override { return "ngram:" + std::to_string(n_); }
  Status Propose(std::span<const int32_t> sequence, int max, std::vector<int32_t>* out) override;

 private:
  int n_;
};

}  // namespace weir::speculative
