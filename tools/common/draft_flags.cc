#include "common/draft_flags.h"

#include "base/units.h"
#include "common/model_flags.h"

namespace weir::tools {

void AddDraftFlags(CLI::App& app, DraftFlags* f) {
  app.add_option("--draft", f->specs,
                 "speculative decoding: a draft proposes tokens, the model verifies them in one pass "
                 "and the output stays the model's (docs/speculative.md). KIND: ngram[:N] (prompt "
                 "lookup, N = 1..16, default 3), self[:POLICY] (the model under a sparsity policy, "
                 "default dip:0.75) or a draft model's path (same vocabulary); repeat the flag to try "
                 "several in order")
      ->take_all();
  app.add_option("--draft-max", f->options.draft_max, "most tokens drafted per pass (default 8)")
      ->check(CLI::Range(1, 64));
  app.add_option("--draft-min", f->options.draft_min,
                 "shorter proposals are not verified; a plain step instead (default 0)")
      ->check(CLI::Range(0, 64));
  app.add_flag("--draft-fixed", f->fixed,
               "always ask for --draft-max tokens (default: adapt to the acceptance rate)");
}

bool HasSelfDraft(const DraftFlags& f) {
  for (const speculative::DraftSpec& d : f.parsed) {
    if (d.kind == speculative::DraftSpec::Kind::kSelf) return true;
  }
  return false;
}

namespace {
format::LoadOptions DraftLoadOptions(const ModelFlags& mf) {
  format::LoadOptions o;
  o.placement = mf.mmap ? format::WeightPlacement::kMapped : format::WeightPlacement::kAuto;
  o.tile_linear = true;  // a draft model runs dense
  o.pool = mf.pool;
  return o;
}
}  // namespace

Status ParseDraftFlags(DraftFlags* f) {
  f->options.adaptive = !f->fixed;
  f->parsed.clear();
  for (const std::string& s : f->specs) {
    WEIR_ASSIGN_OR_RETURN(auto d, speculative::ParseDraftSpec(s));
    f->parsed.push_back(std::move(d));
  }
  if (f->options.draft_min > f->options.draft_max) {
    return Status::InvalidArgument(StrFormat("--draft-min %d is above --draft-max %d", f->options.draft_min,
                                             f->options.draft_max));
  }
  return Status::Ok();
}

Result<std::unique_ptr<speculative::Draft>> BuildDraft(const DraftFlags& f, const model::Model& target,
                                                       const model::SessionOptions& session,
                                                       ThreadPool* pool,
                                                       const sparsity::Calibration* calibration,
                                                       const ModelFlags& mf) {
  if (!f.enabled()) return std::unique_ptr<speculative::Draft>();
  return speculative::MakeDraft(f.parsed, {&target, session, pool, calibration, DraftLoadOptions(mf)});
}

std::string FormatSpeculativeStats(const speculative::Draft& draft, const speculative::SpeculativeStats& s) {
  return StrFormat("draft %s: %llu drafted, %llu accepted (%.1f %%) | %.2f tokens per pass over %llu "
                   "passes | draft %.2f s, verify %.2f s",
                   draft.name().c_str(), static_cast<unsigned long long>(s.drafted),
                   static_cast<unsigned long long>(s.accepted), 100.0 * s.acceptance(), s.tokens_per_pass(),
                   static_cast<unsigned long long>(s.target_passes), s.draft_seconds, s.verify_seconds);
}

nlohmann::json SpeculativeStatsJson(const speculative::Draft& draft, const speculative::SpeculativeStats& s) {
  return {{"draft", draft.name()},
          {"drafted", s.drafted},
          {"accepted", s.accepted},
          {"acceptance", s.acceptance()},
          {"target_passes", s.target_passes},
          {"emitted", s.emitted},
          {"tokens_per_pass", s.tokens_per_pass()},
          {"draft_seconds", s.draft_seconds},
          {"verify_seconds", s.verify_seconds}};
}

}  // namespace weir::tools
