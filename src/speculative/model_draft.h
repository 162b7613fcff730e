// ModelDraft: a model's greedy continuation as the draft. Either a separate small model with the
// target's vocabulary (llama.cpp's -md), which the draft owns, or the target's own Model under a
// sparsity policy ("self": the weights are shared, only the draft's session is its own).
//
// The draft keeps its session's KV cache in step with the sequence across calls: each Propose
// rewinds to the longest prefix the cache shares with the sequence (after a verify pass that is
// the accepted tokens), runs what is new, then decodes `max` tokens greedily.
#pragma once

#include <memory>

#include "model/model.h"
#include "model/session.h"
#include "speculative/draft.h"

namespace weir::speculative {

class ModelDraft : public Draft {
 public:
  // `model` is the draft's model; `owned` keeps it alive when the draft loaded it (nullptr for
  // self, which borrows the target's). `options` are the draft session's (sparsity for self).
  static Result<std::unique_ptr<ModelDraft>> Create(std::string name, const model::Model& model,
                                                    std::unique_ptr<model::Model> owned,
                                                    ThreadPool* pool,
                                                    const model::SessionOptions& options);
  std::string name() const override { return name_; }
  Status Propose(std::span<const int32_t> sequence, int max, std::vector<int32_t>* out) override;
  Status Prefill(std::span<const int32_t> prompt) override;
  uint64_t allocated_bytes() const override;
  const model::Session& session() const { return *session_; }

 private:
  ModelDraft() = default;
  // Brings the session's cache to `sequence` (rewinding to the shared prefix, running the rest)
  // and returns the last token's logits.
  Result<const float*> CatchUp(std::span<const int32_t> sequence);

  std::string name_;
  std::unique_ptr<model::Model> owned_;
  std::unique_ptr<model::Session> session_;
  std::vector<int32_t> cached_;  // the tokens in the session's KV cache, in order
};

}  // namespace weir::speculative
