// Speculative decoding's flags (weir run, bench): --draft KIND (several allowed), --draft-max,
// --draft-min, --draft-fixed; the draft built for a target session, and its stats printed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/model_flags.h"
#include "speculative/draft_spec.h"
#include "speculative/speculative.h"

namespace weir::tools {

struct DraftFlags {
  std::vector<std::string> specs;
  speculative::SpeculativeOptions options;
  bool fixed = false;
  std::vector<speculative::DraftSpec> parsed;  // ParseDraftFlags
  bool enabled() const { return !specs.empty(); }
};

void AddDraftFlags(CLI::App& app, DraftFlags* flags);
// Whether a self draft is asked for (its sparse products need untiled weights); after
// ParseDraftFlags.
bool HasSelfDraft(const DraftFlags& flags);
// Parses the specs (InvalidArgument / Unsupported on a bad one: a usage error).
Status ParseDraftFlags(DraftFlags* flags);
// The draft of the flags for a target whose session options are final (nullptr without
// --draft); a draft model is loaded as the target was (model_flags: threads, --mmap).
Result<std::unique_ptr<speculative::Draft>> BuildDraft(const DraftFlags& flags, const model::Model& target,
                                                       const model::SessionOptions& session,
                                                       ThreadPool* pool,
                                                       const sparsity::Calibration* calibration,
                                                       const ModelFlags& model_flags);
// One line for stderr: drafted, accepted, tokens per pass, where the time went.
std::string FormatSpeculativeStats(const speculative::Draft& draft, const speculative::SpeculativeStats& s);
nlohmann::json SpeculativeStatsJson(const speculative::Draft& draft, const speculative::SpeculativeStats& s);

}  // namespace weir::tools
