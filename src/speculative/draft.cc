#include "speculative/draft.h"

namespace weir::speculative {

std::string DraftChain::name() const {
  std::string s;
  for (const auto& d : drafts_) {
    if (!s.empty()) s += '+';
    s += d->name();
  }
  return s;
}

Status DraftChain::Propose(std::span<const int32_t> sequence, int max, std::vector<int32_t>* out) {
  out->clear();
  for (size_t i = 0; i < drafts_.size(); ++i) {
    WEIR_RETURN_IF_ERROR(drafts_[i]->Propose(sequence, max, out));
    if (!out->empty()) {
      ++used_[i];
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status DraftChain::Prefill(std::span<const int32_t> prompt) {
  for (const auto& d : drafts_) WEIR_RETURN_IF_ERROR(d->Prefill(prompt));
  return Status::Ok();
}

uint64_t DraftChain::allocated_bytes() const {
  uint64_t b = 0;
  for (const auto& d : drafts_) b += d->allocated_bytes();
  return b;
}

}  // namespace weir::speculative
