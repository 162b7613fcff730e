// `--draft KIND` (weir run, bench, chat, serve), parsed and built:
//   ngram[:N]       prompt lookup of the last N (1 to 16, default 3) tokens (ngram_draft.h)
//   self[:POLICY]   the target's own weights under a sparsity policy (model/sparsity syntax,
//                   default dip:0.75, the best measured: docs/speculative.md), with its own
//                   session (model_draft.h)
//   PATH            a separate model with the target's vocabulary (model_draft.h)
//   mtp             refused: no model weir loads carries multi-token-prediction layers
// Several specs make a DraftChain, tried in the order given.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "model/model.h"
#include "model/session.h"
#include "sparsity/calibration.h"
#include "speculative/draft.h"

namespace weir::speculative {

struct DraftSpec {
  enum class Kind { kNgram, kSelf, kModel };
  Kind kind = Kind::kNgram;
  int ngram = 3;       // kNgram
  std::string policy;  // kSelf: the sparsity spec
  std::string path;    // kModel
};

// The default policy of `self` on a resident model.
inline constexpr const char* kDefaultSelfPolicy = "dip:0.75";

// InvalidArgument naming the spec and what is wrong with it.
Result<DraftSpec> ParseDraftSpec(const std::string& spec);

struct DraftTarget {
  const model::Model* model = nullptr;      // the target
  model::SessionOptions session;            // the target's session options (ctx, n_batch)
  ThreadPool* pool = nullptr;
  const sparsity::Calibration* calibration = nullptr;  // for self policies that need one
  format::LoadOptions draft_load;           // how a draft model is loaded
};

// One draft for the specs (a DraftChain when there are several). A model draft whose vocabulary
// differs from the target's is InvalidArgument naming both sizes.
Result<std::unique_ptr<Draft>> MakeDraft(const std::vector<DraftSpec>& specs, const DraftTarget& target);

}  // namespace weir::speculative
