// Model: a loaded Llama-family model -- its file (format-independent view), bound weight views
// and tokenizer. Read-only after Load, so sessions on several threads may share it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "format/model_file.h"
#include "model/llama_weights.h"
#include "tokenizer/tokenizer.h"

namespace weir::model {

class Model {
 public:
  static Result<std::unique_ptr<Model>> Load(const std::string& path,
                                             const format::LoadOptions& options = {});
  // Wraps an already loaded file (e.g. one produced in memory by a converter).
  static Result<std::unique_ptr<Model>> FromFile(format::ModelFile file);

  const format::ModelFile& file() const { return file_; }
  const format::LlamaConfig& config() const { return file_.config; }
  const LlamaWeights& weights() const { return weights_; }
  // Absent when the file carries no tokenizer (the model still runs on token ids).
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  // Bytes of all weight tensors.
  uint64_t weight_bytes() const;
  // Weight bytes a dense decode step reads: every layer tensor, the output norm and head, and
  // one row of the token embedding (of a mixture of experts, n_expert_used experts per layer).
  uint64_t dense_bytes_per_token() const;

 private:
  format::ModelFile file_;
  LlamaWeights weights_;
  std::optional<tokenizer::Tokenizer> tokenizer_;
};

}  // namespace weir::model
