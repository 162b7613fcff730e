#include "speculative/model_draft.h"

#include <algorithm>

#include "model/sampler.h"

namespace weir::speculative {

Result<std::unique_ptr<ModelDraft>> ModelDraft::Create(std::string name, const model::Model& model,
                                                       std::unique_ptr<model::Model> owned,
                                                       ThreadPool* pool,
                                                       const model::SessionOptions& options) {
  std::unique_ptr<ModelDraft> d(new ModelDraft());
  d->name_ = std::move(name);
  d->owned_ = std::move(owned);
  WEIR_ASSIGN_OR_RETURN(d->session_, model::Session::Create(model, pool, options));
  return d;
}

uint64_t ModelDraft::allocated_bytes() const {
  return session_->allocated_bytes() + (owned_ ? owned_->weight_bytes() : 0);
}

Status ModelDraft::Propose(std::span<const int32_t> sequence, int max, std::vector<int32_t>* out) {
  out->clear();
  model::Session& s = *session_;
  const int room = s.ctx() - static_cast<int>(sequence.size());
  max = std::min(max, room);
  if (max <= 0 || sequence.empty()) return Status::Ok();
  // Keep the cached prefix the sequence shares (at least one token is run anew, for its logits).
  size_t common = std::mismatch(cached_.begin(), cached_.end(), sequence.begin(), sequence.end()).first -
                  cached_.begin();
  common = std::min(common, sequence.size() - 1);
  if (!s.Rewind(static_cast<int>(common))) {
    s.Reset();
    common = 0;
  }
  cached_.assign(sequence.begin(), sequence.begin() + static_cast<ptrdiff_t>(common));
  WEIR_ASSIGN_OR_RETURN(const float* logits, s.Prefill(sequence.subspan(common)));
  cached_.insert(cached_.end(), sequence.begin() + static_cast<ptrdiff_t>(common), sequence.end());
  const int vocab = s.model().config().vocab_size;
  for (int i = 0; i < max; ++i) {
    const int32_t tok = model::Sampler::Argmax(logits, vocab);
    out->push_back(tok);
    if (i + 1 == max) break;
    WEIR_ASSIGN_OR_RETURN(logits, s.Forward(std::span<const int32_t>(&tok, 1), model::LogitsFor::kLast));
    cached_.push_back(tok);
  }
  return Status::Ok();
}

}  // namespace weir::speculative
