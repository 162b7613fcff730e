// weir m2search: M2Cache's offline neuron-ratio search (paper 004 §5.2, Algorithm 1;
// m2cache/ratio_search.h). For a budget B (the MLP bytes of B·d_ff neurons at the low precision,
// per layer and token) it scores every mix of high- and low-precision neurons that costs the same
// with UQEst (model/uncertainty.h) on a text, optionally also with perplexity, prints the table
// and writes the best mix as a plan that `--m2cache plan=FILE` runs.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "common/m2cache_flags.h"
#include "common/model_flags.h"
#include "format/mapped_file.h"
#include "m2cache/mix_config.h"
#include "m2cache/ratio_search.h"
#include "model/m2cache_weights.h"
#include "model/perplexity.h"
#include "model/uncertainty.h"

namespace weir::tools {
namespace {

// Writes `text` to a temporary file beside `path` and renames it over `path`.
Status WritePlan(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::IoError("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

struct Scores {
  model::UncertaintyResult uq;
  double ppl = 0;
  double recall = -1;
  double mlp_bytes_per_token = 0;
};

}  // namespace

int M2searchMain(int argc, char** argv) {
  CLI::App app("M2Cache's uncertainty-guided search (Algorithm 1) of the ratio of high- to low-precision\n"
               "neurons for a byte budget. Every candidate spends the MLP bytes of BUDGET x d_ff neurons\n"
               "at the low precision; UQEst (the entropy of the distributions of greedily generated\n"
               "tokens after prompts from the text) scores them, the lowest wins.", "m2search");
  ModelFlags mf;
  mf.ctx = 512;
  AddModelFlags(app, &mf);
  std::string file, out, hi = "q8_0", lo = "q4_0", predictor = "lowrank", calib;
  int calib_tokens = 2048;
  double budget = 0.5, step = 0.05, max_high = 1.0;
  int rank = 64, ppl_chunks = 0;
  bool json = false, recall = false;
  model::UncertaintyOptions uo;
  app.add_option("-f,--file", file, "text for UQEst (and perplexity): wikitext-2 in the paper")->required();
  app.add_option("--budget", budget, "MLP bytes per token as the fraction of neurons that fit at the low precision (default 0.5)")
      ->check(CLI::Range(0.001, 1.0));
  app.add_option("--max-high", max_high, "walk r_high only up to this fraction (default 1: to r_low = 0; a fine --step near 0)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--step", step, "the search step s of r_high (default 0.05)")->check(CLI::Range(0.001, 1.0));
  app.add_option("--rank", rank, "the low-rank predictor's rank (default 64)")->check(CLI::Range(1, 4096));
  app.add_option("--predictor", predictor, "lowrank (|act(gate)|, default), glu (|act(gate) * up|, twice the bytes), oracle (the true top neurons from a dense pass: isolates the precision mix from the predictor) or trained:FILE (a `weir m2fit` file; --rank and --calib do not apply)")
      ->check([](const std::string& v) -> std::string {
        if (v == "lowrank" || v == "glu" || v == "oracle" || (v.rfind("trained:", 0) == 0 && v.size() > 8)) return "";
        return "must be lowrank, glu, oracle or trained:FILE";
      });
  app.add_option("--calib", calib, "fit the predictors to the MLP inputs of this text (its first --calib-tokens tokens; "
                 "use a text other than -f)");
  app.add_option("--calib-tokens", calib_tokens, "tokens of --calib (default 2048)")->check(CLI::Range(1, 1 << 24));
  app.add_option("--hi", hi, "the high precision (default q8_0)");
  app.add_option("--lo", lo, "the low precision (default q4_0)");
  app.add_option("--prompts", uo.prompts, "UQEst prompts (default 8)")->check(CLI::Range(1, 100000));
  app.add_option("--prompt-len", uo.prompt_len, "tokens per prompt (default 64)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--generate", uo.generate, "tokens generated and scored per prompt (default 32)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--ppl-chunks", ppl_chunks, "also the perplexity over this many chunks of -c tokens (default 0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--recall", recall, "also the predictor's recall of the true top neurons (a dense pass per token)");
  app.add_option("-o,--output", out, "write the best mix as a plan for `--m2cache plan=FILE`");
  app.add_flag("--json", json, "print the table as JSON");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  if (mf.ctx == 0) mf.ctx = 512;
  if (!out.empty() && out == mf.model) return Fail("m2search", Status::InvalidArgument("-o " + out + " is the model file"));

  auto spec = m2cache::ParseMixConfig("hi=" + hi + ",lo=" + lo + ",rank=" + std::to_string(rank) + ",predictor=" + predictor);
  if (!spec.ok()) return Fail("m2search", spec.status());
  ThreadPool pool(ThreadCount(mf));
  mf.pool = &pool;
  mf.tile = false;
  auto text = format::ReadSmallFile(file, 1ull << 30);
  if (!text.ok()) return Fail("m2search", text.status());
  auto loaded = LoadModel(mf);
  if (!loaded.ok()) return Fail("m2search", loaded.status());
  const model::Model& model = **loaded;
  const tokenizer::Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) return Fail("m2search", Status::InvalidArgument(model.file().path + ": the model has no tokenizer; pass --tokenizer"));
  const std::vector<int32_t> ids = tok->Encode(*text, false);
  const int32_t bos = tok->add_bos() ? tok->bos_id() : -1;
  const bool progress = !json && isatty(2);

  std::vector<int32_t> calib_ids;
  if (!calib.empty()) {
    auto ids_or = ReadCalibrationTokens(model, calib, calib_tokens);
    if (!ids_or.ok()) return Fail("m2search", ids_or.status());
    calib_ids = std::move(*ids_or);
  }
  ProgressBar build_bar("predictors", static_cast<uint64_t>(model.config().n_layers), progress);
  auto weights = model::BuildM2Weights(model, *spec, &pool, [&](int l) { build_bar.Update(static_cast<uint64_t>(l + 1)); },
                                       calib_ids);
  build_bar.Finish();
  if (!weights.ok()) return Fail("m2search", weights.status());
  const double n_ratio = static_cast<double>((*weights)->store->neuron_bytes(0, m2cache::kHigh)) /
                         static_cast<double>((*weights)->store->neuron_bytes(0, m2cache::kLow));

  // One candidate (or the model as loaded when config is null): UQEst, then perplexity.
  auto evaluate = [&](const m2cache::MixConfig* config) -> Result<Scores> {
    model::SessionOptions so;
    so.ctx = std::max(mf.ctx, uo.prompt_len + uo.generate + 1);
    so.n_batch = 64;
    if (config) {
      so.m2cache = weights->get();
      so.m2cache_config = *config;
    }
    WEIR_ASSIGN_OR_RETURN(auto session, model::Session::Create(model, &pool, so));
    Scores s;
    WEIR_ASSIGN_OR_RETURN(s.uq, model::Uncertainty(*session, ids, bos, uo));
    if (ppl_chunks > 0) {
      model::SessionOptions po = so;
      po.ctx = mf.ctx;
      WEIR_ASSIGN_OR_RETURN(auto ps, model::Session::Create(model, &pool, po));
      model::PerplexityOptions popt;
      popt.max_chunks = ppl_chunks;
      WEIR_ASSIGN_OR_RETURN(auto r, model::Perplexity(*ps, ids, bos, popt));
      s.ppl = r.ppl;
    }
    if (session->m2cache()) {
      const auto& st = session->m2cache()->stats();
      s.mlp_bytes_per_token = session->traffic().tokens ? static_cast<double>(st.bytes_computed) / session->traffic().tokens : 0;
      if (st.recall_total) s.recall = st.recall();
    } else {
      s.mlp_bytes_per_token = session->traffic().tokens ? static_cast<double>(session->traffic().mlp_used) / session->traffic().tokens : 0;
    }
    return s;
  };

  auto dense = evaluate(nullptr);
  if (!dense.ok()) return Fail("m2search", dense.status());
  std::vector<m2cache::RatioPoint> points = m2cache::RatioCandidates(budget, step, n_ratio);
  std::erase_if(points, [&](const m2cache::RatioPoint& p) { return p.r_high > max_high + 1e-12; });
  std::vector<Scores> scores;
  ProgressBar bar("m2search", points.size(), progress);
  auto best = m2cache::SearchRatios(&points, [&](const m2cache::RatioPoint& p) -> Result<double> {
    m2cache::MixConfig c = *spec;
    c.r_high = p.r_high;
    c.r_low = p.r_low;
    c.measure_recall = recall;
    WEIR_ASSIGN_OR_RETURN(Scores s, evaluate(&c));
    scores.push_back(s);
    bar.Update(scores.size());
    return s.uq.mean;
  });
  bar.Finish();
  if (!best.ok()) return Fail("m2search", best.status());

  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < points.size(); ++i) {
    nlohmann::json r = {{"r_high", points[i].r_high}, {"r_low", points[i].r_low},
                        {"active", points[i].r_high + points[i].r_low}, {"uq_mean", scores[i].uq.mean},
                        {"uq_sum", scores[i].uq.sum}, {"mlp_bytes_per_token", scores[i].mlp_bytes_per_token},
                        {"best", i == *best}};
    if (ppl_chunks > 0) r["ppl"] = scores[i].ppl;
    if (scores[i].recall >= 0) r["recall"] = scores[i].recall;
    rows.push_back(r);
  }
  nlohmann::json doc = {{"format", "weir-m2cache-plan"},
                        {"version", 1},
                        {"model", model.file().path},
                        {"text", file},
                        {"budget", budget},
                        {"step", step},
                        {"max_high", max_high},
                        {"hi", hi},
                        {"lo", lo},
                        {"rank", rank},
                        {"predictor", predictor},
                        {"calib", calib},
                        {"calib_tokens", calib_ids.size()},
                        {"byte_ratio", n_ratio},
                        {"uq", {{"prompts", uo.prompts}, {"prompt_len", uo.prompt_len}, {"generate", uo.generate}}},
                        {"ppl_chunks", ppl_chunks},
                        {"ppl_ctx", mf.ctx},
                        {"model_as_loaded", {{"uq_mean", dense->uq.mean}, {"ppl", dense->ppl},
                                             {"mlp_bytes_per_token", dense->mlp_bytes_per_token}}},
                        {"candidates", rows},
                        {"best", rows[*best]}};
  if (!out.empty()) {
    if (Status st = WritePlan(out, doc.dump(2) + "\n"); !st.ok()) return Fail("m2search", st);
  }
  if (json) {
    PrintJson(doc);
    return kExitOk;
  }
  std::printf("%s, budget %.3f (MLP bytes of that fraction of neurons at %s), %s/%s byte ratio %.3f, rank %d\n",
              model.file().path.c_str(), budget, lo.c_str(), hi.c_str(), lo.c_str(), n_ratio, rank);
  std::printf("UQEst: mean entropy (nats) of %d x %d generated tokens after %d-token prompts\n\n", uo.prompts,
              uo.generate, uo.prompt_len);
  std::printf("| r_high | r_low | active | MLP bytes/token | UQEst |%s%s\n", ppl_chunks > 0 ? " ppl |" : "",
              recall ? " recall |" : "");
  std::printf("|---:|---:|---:|---:|---:|%s%s\n", ppl_chunks > 0 ? "---:|" : "", recall ? "---:|" : "");
  std::printf("| model as loaded | | 1.000 | %s | %.4f |", FormatBytes(static_cast<uint64_t>(dense->mlp_bytes_per_token)).c_str(),
              dense->uq.mean);
  if (ppl_chunks > 0) std::printf(" %.3f |", dense->ppl);
  if (recall) std::printf(" |");
  std::printf("\n");
  for (size_t i = 0; i < points.size(); ++i) {
    std::printf("| %.4f | %.4f | %.3f | %s | %.4f%s |", points[i].r_high, points[i].r_low,
                points[i].r_high + points[i].r_low,
                FormatBytes(static_cast<uint64_t>(scores[i].mlp_bytes_per_token)).c_str(), scores[i].uq.mean,
                i == *best ? " (best)" : "");
    if (ppl_chunks > 0) std::printf(" %.3f |", scores[i].ppl);
    if (recall) std::printf(" %.3f |", scores[i].recall);
    std::printf("\n");
  }
  if (!out.empty()) std::printf("\nplan written to %s: run it with --m2cache plan=%s\n", out.c_str(), out.c_str());
  return kExitOk;
}

}  // namespace weir::tools
