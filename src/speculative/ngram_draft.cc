#include "speculative/ngram_draft.h"

#include <algorithm>

namespace weir::speculative {

Status NgramDraft::Propose(std::span<const int32_t> sequence, int max, std::vector<int32_t>* out) {
  out->clear();
  const size_t len = sequence.size();
  if (max <= 0) return Status::Ok();
  for (int n = std::min<int>(n_, static_cast<int>(len) - 1); n >= 1; --n) {
    const auto key = sequence.subspan(len - static_cast<size_t>(n));
    // Latest earlier occurrence: its start s < len - n, so that something follows it.
    for (size_t s = len - static_cast<size_t>(n); s-- > 0;) {
      if (!std::equal(key.begin(), key.end(), sequence.begin() + static_cast<ptrdiff_t>(s))) continue;
      // What followed it, continued periodically past the end (the proposal's own tokens follow
      // the sequence's last ones as they followed the occurrence).
      const size_t from = s + static_cast<size_t>(n);
      for (size_t i = from; out->size() < static_cast<size_t>(max); ++i)
        out->push_back(i < len ? sequence[i] : (*out)[i - len]);
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace weir::speculative
