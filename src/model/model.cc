#include "model/model.h"

namespace weir::model {

Result<std::unique_ptr<Model>> Model::Load(const std::string& path,
                                           const format::LoadOptions& options) {
  WEIR_ASSIGN_OR_RETURN(format::ModelFile file, format::LoadModel(path, options));
  return FromFile(std::move(file));
}

Result<std::unique_ptr<Model>> Model::FromFile(format::ModelFile file) {
  auto m = std::unique_ptr<Model>(new Model());
  m->file_ = std::move(file);
  WEIR_ASSIGN_OR_RETURN(m->weights_, BindWeights(m->file_));
  if (m->file_.tokenizer.kind != format::TokenizerSpec::Kind::kNone) {
    auto tok = tokenizer::Tokenizer::Create(m->file_.tokenizer);
    if (!tok.ok()) return tok.status().WithContext(m->file_.path + ": tokenizer");
    m->tokenizer_.emplace(std::move(tok).value());
  }
  return m;
}

uint64_t Model::weight_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, view] : file_.tensors) total += view.nbytes();
  return total;
}

uint64_t Model::dense_bytes_per_token() const {
  uint64_t total = 0;
  for (const auto& [name, view] : file_.tensors) {
    if (name == "token_embd.weight") continue;
    if (config().IsMoe() && view.shape.ndim == 3 && view.shape[0] == config().n_expert) {
      // A token reads n_expert_used of the n_expert stacked experts.
      total += view.nbytes() / static_cast<uint64_t>(config().n_expert) *
               static_cast<uint64_t>(config().n_expert_used);
      continue;
    }
    total += view.nbytes();
  }
  total += weights_.token_embd.row_bytes();
  if (config().tied_output) total += weights_.output.nbytes();
  return total;
}

}  // namespace weir::model
