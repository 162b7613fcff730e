#include "speculative/draft_spec.h"

#include <charconv>

#include "speculative/model_draft.h"
#include "speculative/ngram_draft.h"
#include "sparsity/policy.h"

namespace weir::speculative {

Result<DraftSpec> ParseDraftSpec(const std::string& spec) {
  DraftSpec d;
  const size_t colon = spec.find(':');
  const std::string head = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (spec.empty()) return Status::InvalidArgument("--draft: empty spec (ngram[:N], self[:POLICY] or a model path)");
  if (head == "ngram") {
    d.kind = DraftSpec::Kind::kNgram;
    if (colon != std::string::npos) {
      auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), d.ngram);
      if (ec != std::errc() || p != rest.data() + rest.size() || d.ngram < 1 || d.ngram > 16) {
        return Status::InvalidArgument("--draft " + spec + ": N must be an integer from 1 to 16");
      }
    }
    return d;
  }
  if (head == "self") {
    d.kind = DraftSpec::Kind::kSelf;
    d.policy = colon == std::string::npos ? "" : rest;
    if (colon != std::string::npos && rest.empty()) {
      return Status::InvalidArgument("--draft " + spec + ": name a sparsity policy after self: (e.g. self:dip:0.5)");
    }
    return d;
  }
  if (head == "mtp") {
    return Status::Unsupported("--draft mtp: no model weir loads carries multi-token-prediction layers "
                               "(DeepSeek V3's nextn, GLM-4.5's); use ngram, self or a draft model");
  }
  d.kind = DraftSpec::Kind::kModel;
  d.path = spec;
  return d;
}

namespace {

Result<std::unique_ptr<Draft>> MakeOne(const DraftSpec& spec, const DraftTarget& t) {
  model::SessionOptions so;
  so.ctx = t.session.ctx;
  so.n_batch = t.session.n_batch;
  switch (spec.kind) {
    case DraftSpec::Kind::kNgram:
      return std::unique_ptr<Draft>(new NgramDraft(spec.ngram));
    case DraftSpec::Kind::kSelf: {
      if (t.session.streamed != nullptr || t.session.m2cache != nullptr) {
        return Status::Unsupported("--draft self on a streamed pack or an M2Cache run is not built yet; "
                                   "use --draft ngram or a draft model");
      }
      const std::string policy = spec.policy.empty() ? kDefaultSelfPolicy : spec.policy;
      WEIR_ASSIGN_OR_RETURN(auto p, sparsity::ParseSparsity(policy, t.calibration));
      so.sparsity = p.get();
      WEIR_ASSIGN_OR_RETURN(auto d, ModelDraft::Create("self:" + p->info().spec, *t.model, nullptr, t.pool, so));
      return std::unique_ptr<Draft>(std::move(d));
    }
    case DraftSpec::Kind::kModel: {
      WEIR_ASSIGN_OR_RETURN(auto m, model::Model::Load(spec.path, t.draft_load));
      const int ours = t.model->config().vocab_size, theirs = m->config().vocab_size;
      if (ours != theirs) {
        return Status::InvalidArgument("--draft " + spec.path + ": its vocabulary has " + std::to_string(theirs) +
                                       " tokens, the model's has " + std::to_string(ours) +
                                       "; a draft model must share the model's vocabulary");
      }
      const model::Model& ref = *m;
      WEIR_ASSIGN_OR_RETURN(auto d, ModelDraft::Create(spec.path, ref, std::move(m), t.pool, so));
      return std::unique_ptr<Draft>(std::move(d));
    }
  }
  return Status::InvalidArgument("--draft: unknown kind");
}

}  // namespace

Result<std::unique_ptr<Draft>> MakeDraft(const std::vector<DraftSpec>& specs, const DraftTarget& target) {
  if (specs.empty()) return Status::InvalidArgument("--draft: no spec");
  std::vector<std::unique_ptr<Draft>> drafts;
  for (const DraftSpec& s : specs) {
    WEIR_ASSIGN_OR_RETURN(auto d, MakeOne(s, target));
    drafts.push_back(std::move(d));
  }
  if (drafts.size() == 1) return std::move(drafts[0]);
  return std::unique_ptr<Draft>(new DraftChain(std::move(drafts)));
}

}  // namespace weir::speculative
