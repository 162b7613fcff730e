#include "prune/calibration.h"

#include <algorithm>

#include "model/session.h"

namespace weir::prune {

int CalibrationSeqLen(const format::LlamaConfig& c, const CalibrationOptions& o) {
  if (o.seqlen > 0) return o.seqlen;
  return c.ctx_len > 0 ? std::min(c.ctx_len, 4096) : 2048;
}

Result<std::vector<std::vector<int32_t>>> CalibrationSequences(std::span<const int32_t> tokens,
                                                               int32_t bos, int nsamples,
                                                               int seqlen) {
  if (nsamples <= 0) {
    return Status::InvalidArgument(
        StrFormat("calibration: nsamples %d must be positive", nsamples));
  }
  if (seqlen < 2) {
    return Status::InvalidArgument(StrFormat("calibration: seqlen %d must be at least 2", seqlen));
  }
  if (tokens.size() < 2) {
    return Status::InvalidArgument(
        StrFormat("calibration: the text has %zu tokens; at least 2 are needed", tokens.size()));
  }
  std::vector<std::vector<int32_t>> seqs;
  const size_t len = static_cast<size_t>(seqlen);
  const size_t full = tokens.size() / len;
  const size_t n = std::min(full, static_cast<size_t>(nsamples));
  for (size_t i = 0; i < n; ++i)
    seqs.emplace_back(tokens.begin() + i * len, tokens.begin() + (i + 1) * len);
  if (seqs.empty()) seqs.emplace_back(tokens.begin(), tokens.end());
  if (bos >= 0) {
    for (auto& s : seqs) s[0] = bos;
  }
  return seqs;
}

Result<ActivationNorms> Calibrate(const model::Model& model,
                                  std::span<const std::vector<int32_t>> sequences, ThreadPool* pool,
                                  int n_batch, const std::function<void(int, int)>& progress) {
  if (sequences.empty()) return Status::InvalidArgument("calibration: no sequences");
  size_t longest = 0;
  for (const auto& s : sequences) {
    if (s.empty()) return Status::InvalidArgument("calibration: an empty sequence");
    longest = std::max(longest, s.size());
  }
  if (longest > (1u << 20)) {
    return Status::InvalidArgument(
        StrFormat("calibration: sequence of %zu tokens is too long", longest));
  }
  ActivationNorms norms = ActivationNorms::ForConfig(model.config());
  NormObserver observer(&norms);
  model::SessionOptions so;
  so.ctx = static_cast<int>(longest);
  so.n_batch = std::max(1, std::min(n_batch, so.ctx));
  WEIR_ASSIGN_OR_RETURN(std::unique_ptr<model::Session> session,
                        model::Session::Create(model, pool, so));
  session->set_observer(&observer);
  const int total = static_cast<int>(sequences.size());
  for (int i = 0; i < total; ++i) {
    session->Reset();
    const std::vector<int32_t>& s = sequences[static_cast<size_t>(i)];
    for (size_t b = 0; b < s.size(); b += static_cast<size_t>(session->n_batch())) {
      const size_t n = std::min(s.size() - b, static_cast<size_t>(session->n_batch()));
      auto r = session->Forward(std::span<const int32_t>(s).subspan(b, n), model::LogitsFor::kLast);
      if (!r.ok()) return r.status().WithContext(StrFormat("calibration sequence %d", i));
    }
    if (!observer.status().ok()) return observer.status();
    if (progress) progress(i + 1, total);
  }
  session->set_observer(nullptr);
  return norms;
}

Result<CalibrationRun> CalibrateOnText(const model::Model& model, std::string_view text,
                                       const CalibrationOptions& options, ThreadPool* pool,
                                       const std::function<void(int, int)>& progress) {
  const tokenizer::Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) {
    return Status::InvalidArgument(model.file().path +
                                   ": the model has no tokenizer to read the calibration text");
  }
  const std::vector<int32_t> ids = tok->Encode(text, tok->add_bos());
  const int seqlen = CalibrationSeqLen(model.config(), options);
  WEIR_ASSIGN_OR_RETURN(auto seqs,
                        CalibrationSequences(ids, tok->bos_id(), options.nsamples, seqlen));
  CalibrationRun run;
  run.sequences = static_cast<int>(seqs.size());
  run.seqlen = static_cast<int>(seqs[0].size());
  run.text_tokens = static_cast<int64_t>(ids.size());
  for (const auto& s : seqs) run.tokens += static_cast<int64_t>(s.size());
  WEIR_ASSIGN_OR_RETURN(run.norms, Calibrate(model, seqs, pool, options.n_batch, progress));
  return run;
}

}  // namespace weir::prune
