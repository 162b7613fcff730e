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

Result<const float*> ModelDraft::CatchUp(std::span<const int32_t> sequence) {
  model::Session& s = *session_;
  // Keep the cached prefix the sequence shares (at least one token is run anew, for its logits).
  size_t common = std::mismatch(cached_.begin(), cached_.end(), sequence.begin(), sequence.end()).first -
                  cached_.begin();
  common = std::min(common, sequence.size() - 1);
  if (!s.Rewind(static_cast<int>(common))) {
    s.Reset();
    common = 0;
  }
  cached_.assign(sequence.begin(), sequence.begin() + static_cast<ptrdiff_t>(common));
  auto logits = s.Prefill(sequence.subspan(common));
  if (!logits.ok()) {  // the cache holds an unknown part of the rest: start over next time
    s.Reset();
    cached_.clear();
    return logits.status();
  }
  cached_.insert(cached_.end(), sequence.begin() + static_cast<ptrdiff_t>(common), sequence.end());
  return *logits;
}

Status ModelDraft::Prefill(std::span<const int32_t> prompt) {
  if (prompt.empty() || static_cast<int>(prompt.size()) > session_->ctx()) return Status::Ok();
  return CatchUp(prompt).status();
}

Status ModelDraft::Propose(std::span<const int32_t> sequence, int max, std::vector<int32_t>* out) {
  out->clear();
  model::Session& s = *session_;
  max = std::min(max, s.ctx() - static_cast<int>(sequence.size()));
  if (max <= 0 || sequence.empty()) return Status::Ok();
  WEIR_ASSIGN_OR_RETURN(const float* logits, CatchUp(sequence));
  const int vocab = s.model().config().vocab_size;
  for (int i = 0; i < max; ++i) {
    const int32_t tok = model::Sampler::Argmax(logits, vocab);
    out->push_back(tok);
    if (i + 1 == max) break;
    auto next = s.Forward(std::span<const int32_t>(&tok, 1), model::LogitsFor::kLast);
    if (!next.ok()) {
      s.Reset();
      cached_.clear();
      return next.status();
    }
    logits = *next;
    cached_.push_back(tok);
  }
  return Status::Ok();
}

}  // namespace weir::speculative
