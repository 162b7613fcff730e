// weir prune-eval: the pruning evaluation grid -- for each target P, target method and
// pruning mode: prune in memory, write the GGUF (file size), load it back, perplexity on each
// evaluation text and greedy decode speed. Calibration and outlier statistics are computed once
// per model and reused for every cell (Mosaic profiles a model once, §3.3). Prints Markdown or
// JSON, plus which of Mosaic's orderings hold; --plot writes an SVG of log10 perplexity vs P.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "common/cli.h"
#include "common/commands.h"
#include "common/model_flags.h"
#include "format/llama_gguf_writer.h"
#include "format/mapped_file.h"
#include "model/generate.h"
#include "model/perplexity.h"
#include "prune/calibration.h"
#include "prune/metric.h"
#include "prune/prune_metadata.h"
#include "prune/pruner.h"
#include "prune/targets.h"
#include "sim/svg_plot.h"

namespace weir::tools {

namespace {

struct EvalText {
  std::string path;
  std::string name;  // file name
  std::vector<int32_t> ids;
};

struct Cell {
  double p = 0;
  std::string method, mode;  // "dense" for the unpruned baseline
  double removed = 0, sparsity = 0;
  uint64_t file_bytes = 0;
  double decode_tok_s = 0;
  double prune_s = 0;
  std::vector<double> ppl;  // per eval text
  std::string dims;         // per-layer n_head/d_ff after pruning, compact
};

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string DimsString(const format::LlamaConfig& c) {
  std::string s;
  for (const auto& L : c.layers) {
    if (!s.empty()) s += " ";
    s += StrFormat("%d/%d/%d", L.n_head, L.n_head_kv, L.d_ff);
  }
  return s;
}

// Writes `file` to `path`, loads it back and measures it.
Status Measure(const format::ModelFile& file, const std::string& path,
               const std::vector<std::pair<std::string, format::GgufValue>>& metadata,
               const std::vector<EvalText>& texts, int ctx, int chunks, int decode_tokens,
               ThreadPool* pool, Cell* cell) {
  WEIR_RETURN_IF_ERROR(format::WriteLlamaGguf(file, path, std::nullopt, nullptr, metadata));
  struct stat sb {};
  cell->file_bytes = ::stat(path.c_str(), &sb) == 0 ? static_cast<uint64_t>(sb.st_size) : 0;
  auto loaded = model::Model::Load(path);
  ::unlink(path.c_str());  // the mapping stays valid
  if (!loaded.ok()) return loaded.status();
  const model::Model& m = **loaded;
  cell->dims = DimsString(m.config());
  model::SessionOptions so;
  so.ctx = ctx;
  so.n_batch = std::min(ctx, 64);
  WEIR_ASSIGN_OR_RETURN(auto session, model::Session::Create(m, pool, so));
  const int32_t bos = m.tokenizer() ? m.tokenizer()->bos_id() : -1;
  for (const EvalText& t : texts) {
    model::PerplexityOptions po;
    po.max_chunks = chunks;
    auto r = model::Perplexity(*session, t.ids, bos, po);
    if (!r.ok()) return r.status().WithContext(t.path);
    cell->ppl.push_back(r->ppl);
  }
  // Greedy decode from BOS, median of 3 runs.
  std::vector<double> speeds;
  for (int rep = 0; rep < 3 && decode_tokens > 0; ++rep) {
    session->Reset();
    model::SamplerOptions sopt;
    sopt.temp = 0;
    model::Sampler sampler(m.config().vocab_size, sopt);
    const int32_t start = bos >= 0 ? bos : 0;
    const int n = std::min(decode_tokens, session->ctx() - 1);
    auto g = model::Generate(*session, sampler, std::span<const int32_t>(&start, 1), n, -1,
                             [](int32_t) { return true; });
    if (!g.ok()) return g.status();
    speeds.push_back(g->decode_tok_s());
  }
  if (!speeds.empty()) {
    std::sort(speeds.begin(), speeds.end());
    cell->decode_tok_s = speeds[speeds.size() / 2];
  }
  return Status::Ok();
}

// "yes" when a[0] < a[1] < ... (strict), "no" otherwise.
bool Increasing(const std::vector<double>& v) {
  for (size_t i = 1; i < v.size(); ++i) {
    if (!(v[i - 1] < v[i])) return false;
  }
  return true;
}

}  // namespace

int PruneEvalMain(int argc, char** argv) {
  CLI::App app(
      "Pruning evaluation grid: perplexity, file size and decode speed for each target P,\n"
      "target method and pruning mode. Calibrates once per model.",
      "prune-eval");
  ModelFlags mf;
  mf.ctx = 256;
  std::string calib, targets_s = "0.2,0.4,0.6,0.8", methods_s = "global,layer,projection",
                     modes_s = "unstructured,structured,composite", tmp = "/tmp", plot,
                     average_name = "params";
  std::vector<std::string> eval_paths;
  int chunks = 8, decode_tokens = 64;
  double alpha = 5, lambda = 0.08, share = 0.5;
  prune::CalibrationOptions co;
  co.nsamples = 16;
  co.seqlen = 256;
  bool json = false, no_progress = false;
  AddModelFlags(app, &mf);
  app.get_option("--ctx-size")->description("perplexity chunk length (default 256)");
  app.add_option("-f,--file", calib, "calibration text")->required();
  app.add_option("--eval", eval_paths,
                 "evaluation text (repeatable; default: the calibration text)");
  app.add_option("--targets", targets_s, "comma-separated targets P (default 0.2,0.4,0.6,0.8)");
  app.add_option("--methods", methods_s,
                 "comma-separated methods (default global,layer,projection)");
  app.add_option("--modes", modes_s,
                 "comma-separated modes (default unstructured,structured,composite)");
  app.add_option("--nsamples", co.nsamples, "calibration sequences (default 16)");
  app.add_option("--seqlen", co.seqlen, "calibration sequence length (default 256)");
  app.add_option("--chunks", chunks, "perplexity chunks per text (default 8; 0 = all)");
  app.add_option("--decode", decode_tokens, "tokens per decode-speed run (default 64; 0 = skip)");
  app.add_option("--alpha", alpha, "outlier threshold (default 5)");
  app.add_option("--lambda", lambda, "target spread (default 0.08)");
  app.add_option("--share", share, "composite structured share (default 0.5)");
  app.add_option("--average", average_name, "params (default) or uniform");
  app.add_option("--tmp", tmp, "directory for the temporary pruned files (default /tmp)");
  app.add_option("--plot", plot, "write an SVG of log10 perplexity (first eval text) vs P");
  app.add_flag("--json", json, "print JSON instead of Markdown");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  std::vector<double> ps;
  for (const std::string& s : SplitList(targets_s)) {
    char* end = nullptr;
    const double p = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0' || !prune::CheckTargetFraction(p).ok()) {
      std::fprintf(stderr, "weir prune-eval: target '%s' is not a number in [0, 1)\n", s.c_str());
      return kExitUsage;
    }
    ps.push_back(p);
  }
  std::vector<prune::TargetMethod> methods;
  std::vector<prune::PruneMode> modes;
  for (const std::string& s : SplitList(methods_s)) {
    auto m = prune::ParseTargetMethod(s);
    if (!m.ok())
      return std::fprintf(stderr, "weir prune-eval: %s\n", m.status().message().c_str()),
             kExitUsage;
    methods.push_back(*m);
  }
  for (const std::string& s : SplitList(modes_s)) {
    auto m = prune::ParsePruneMode(s);
    if (!m.ok())
      return std::fprintf(stderr, "weir prune-eval: %s\n", m.status().message().c_str()),
             kExitUsage;
    modes.push_back(*m);
  }
  auto average = prune::ParseTargetAverage(average_name);
  if (!average.ok())
    return std::fprintf(stderr, "weir prune-eval: %s\n", average.status().message().c_str()),
           kExitUsage;
  if (ps.empty() || methods.empty() || modes.empty()) {
    std::fprintf(stderr, "weir prune-eval: --targets, --methods and --modes must not be empty\n");
    return kExitUsage;
  }
  if (mf.ctx < 8) mf.ctx = 256;

  auto m = LoadModel(mf);
  if (!m.ok()) return Fail("prune-eval", m.status());
  const model::Model& model = **m;
  if (model.tokenizer() == nullptr) {
    return Fail("prune-eval",
                Status::InvalidArgument(model.file().path +
                                        ": the model has no tokenizer; pass --tokenizer"));
  }
  auto calib_text = format::ReadSmallFile(calib, 1ull << 30);
  if (!calib_text.ok())
    return Fail("prune-eval", calib_text.status().WithContext("calibration text"));
  if (eval_paths.empty()) eval_paths.push_back(calib);
  std::vector<EvalText> texts;
  for (const std::string& p : eval_paths) {
    auto t = format::ReadSmallFile(p, 1ull << 30);
    if (!t.ok()) return Fail("prune-eval", t.status().WithContext("evaluation text"));
    texts.push_back({p, BaseName(p), model.tokenizer()->Encode(*t, model.tokenizer()->add_bos())});
  }
  auto layers = prune::BindProjections(model.file());
  if (!layers.ok()) return Fail("prune-eval", layers.status());
  ThreadPool pool(ThreadCount(mf));
  const bool show = !json && !no_progress;

  auto cal = prune::CalibrateOnText(model, *calib_text, co, &pool);
  if (!cal.ok()) return Fail("prune-eval", cal.status().WithContext(calib));
  auto stats = prune::ComputeOutlierStats(model.file(), cal->norms, alpha, &pool);
  if (!stats.ok()) return Fail("prune-eval", stats.status());

  const std::string tmp_path =
      StrFormat("%s/weir_prune_eval_%d.gguf", tmp.c_str(), static_cast<int>(::getpid()));
  std::vector<Cell> cells;
  Cell dense;
  dense.method = dense.mode = "dense";
  if (Status st =
          Measure(model.file(), tmp_path, {}, texts, mf.ctx, chunks, decode_tokens, &pool, &dense);
      !st.ok()) {
    return Fail("prune-eval", st);
  }
  cells.push_back(dense);
  ProgressBar bar("prune-eval", ps.size() * methods.size() * modes.size(), show);
  uint64_t done = 0;
  for (double p : ps) {
    for (prune::TargetMethod method : methods) {
      prune::TargetOptions to;
      to.lambda = lambda;
      to.average = *average;
      auto targets = prune::ComputeTargets(method, p, *layers, &*stats, to);
      if (!targets.ok()) return Fail("prune-eval", targets.status());
      for (prune::PruneMode mode : modes) {
        Cell c;
        c.p = p;
        c.method = prune::TargetMethodName(method);
        c.mode = prune::PruneModeName(mode);
        prune::PruneOptions po;
        po.mode = mode;
        po.structured_share = share;
        const auto t0 = std::chrono::steady_clock::now();
        auto pruned = prune::Prune(model.file(), cal->norms, *targets, po, &pool);
        if (!pruned.ok()) return Fail("prune-eval", pruned.status());
        c.prune_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        c.removed = pruned->report.removed();
        c.sparsity = pruned->report.sparsity();
        prune::PruneProvenance prov{alpha, BaseName(calib), cal->sequences, cal->seqlen};
        Status st = Measure(pruned->file, tmp_path,
                            prune::PruneMetadata(*targets, po, pruned->report, prov), texts, mf.ctx,
                            chunks, decode_tokens, &pool, &c);
        if (!st.ok())
          return Fail("prune-eval",
                      st.WithContext(c.method + "/" + c.mode + StrFormat(" P=%g", p)));
        cells.push_back(c);
        bar.Update(++done);
      }
    }
  }
  bar.Finish();

  // Orderings: per (P, mode, text) is ppl(projection) < ppl(layer) < ppl(global)? Per (P, method,
  // text) is ppl(unstructured) < ppl(composite) < ppl(structured)?
  auto find = [&](double p, const std::string& method, const std::string& mode) -> const Cell* {
    for (const Cell& c : cells) {
      if (c.p == p && c.method == method && c.mode == mode) return &c;
    }
    return nullptr;
  };
  nlohmann::json orderings = nlohmann::json::array();
  std::string order_md;
  for (size_t ti = 0; ti < texts.size(); ++ti) {
    for (double p : ps) {
      for (const char* mode : {"unstructured", "structured", "composite"}) {
        const Cell *g = find(p, "global", mode), *l = find(p, "layer", mode),
                   *pr = find(p, "projection", mode);
        if (!g || !l || !pr) continue;
        const bool holds = Increasing({pr->ppl[ti], l->ppl[ti], g->ppl[ti]});
        const bool proj_best = pr->ppl[ti] <= std::min(l->ppl[ti], g->ppl[ti]);
        orderings.push_back({{"text", texts[ti].name},
                             {"p", p},
                             {"mode", mode},
                             {"kind", "projection<layer<global"},
                             {"holds", holds},
                             {"projection_lowest", proj_best}});
        order_md += StrFormat("| %s | %.1f | %s | projection < layer < global | %s%s |\n",
                              texts[ti].name.c_str(), p, mode, holds ? "yes" : "no",
                              !holds && proj_best ? " (projection lowest)" : "");
      }
      for (const char* method : {"global", "layer", "projection"}) {
        const Cell *u = find(p, method, "unstructured"), *s = find(p, method, "structured"),
                   *c = find(p, method, "composite");
        if (!u || !s || !c) continue;
        const bool holds = u->ppl[ti] <= c->ppl[ti] && c->ppl[ti] <= s->ppl[ti];
        orderings.push_back({{"text", texts[ti].name},
                             {"p", p},
                             {"method", method},
                             {"kind", "unstructured<=composite<=structured"},
                             {"holds", holds}});
        order_md += StrFormat("| %s | %.1f | %s | unstructured <= composite <= structured | %s |\n",
                              texts[ti].name.c_str(), p, method, holds ? "yes" : "no");
      }
    }
  }

  if (!plot.empty()) {
    sim::PlotSpec spec;
    spec.title = "weir prune-eval: " + BaseName(model.file().path) + " on " + texts[0].name;
    spec.x_label = "pruning target P";
    spec.y_label = "log10 perplexity";
    spec.y_from_zero = false;
    for (prune::TargetMethod method : methods) {
      for (prune::PruneMode mode : modes) {
        sim::PlotSeries s;
        s.name = std::string(prune::TargetMethodName(method)) + "/" +
                 std::string(prune::PruneModeName(mode));
        s.x.push_back(0);
        s.y.push_back(std::log10(dense.ppl[0]));
        for (double p : ps) {
          if (const Cell* c = find(p, s.name.substr(0, s.name.find('/')),
                                   std::string(prune::PruneModeName(mode)))) {
            s.x.push_back(p);
            s.y.push_back(std::log10(c->ppl[0]));
          }
        }
        spec.series.push_back(s);
      }
    }
    const std::string svg = sim::LinePlotSvg(spec);
    FILE* f = std::fopen(plot.c_str(), "wb");
    if (!f || std::fwrite(svg.data(), 1, svg.size(), f) != svg.size()) {
      if (f) std::fclose(f);
      return Fail("prune-eval", Status::IoError("cannot write " + plot));
    }
    std::fclose(f);
  }

  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const Cell& c : cells) {
      nlohmann::json ppl;
      for (size_t i = 0; i < texts.size(); ++i) ppl[texts[i].name] = c.ppl[i];
      rows.push_back({{"p", c.p},
                      {"method", c.method},
                      {"mode", c.mode},
                      {"removed", c.removed},
                      {"sparsity", c.sparsity},
                      {"file_bytes", c.file_bytes},
                      {"decode_tok_s", c.decode_tok_s},
                      {"prune_seconds", c.prune_s},
                      {"ppl", ppl},
                      {"dims", c.dims}});
    }
    PrintJson(
        {{"model", model.file().path},
         {"calibration", {{"file", calib}, {"sequences", cal->sequences}, {"seqlen", cal->seqlen}}},
         {"ctx", mf.ctx},
         {"chunks", chunks},
         {"alpha", alpha},
         {"lambda", lambda},
         {"share", share},
         {"average", average_name},
         {"rows", rows},
         {"orderings", orderings}});
    return kExitOk;
  }
  std::printf("### %s\n\n", BaseName(model.file().path).c_str());
  std::printf(
      "calibration: %d x %d tokens of %s; perplexity: ctx %d, %d chunks; alpha %g, lambda %g, "
      "share %g, "
      "targets averaged by %s\n\n",
      cal->sequences, cal->seqlen, BaseName(calib).c_str(), mf.ctx, chunks, alpha, lambda, share,
      average_name.c_str());
  std::printf("| P | method | mode | removed | sparsity | file KiB | decode tok/s |");
  for (const EvalText& t : texts) std::printf(" ppl %s |", t.name.c_str());
  std::printf("\n|---|---|---|---:|---:|---:|---:|");
  for (size_t i = 0; i < texts.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (const Cell& c : cells) {
    std::printf("| %.1f | %s | %s | %.1f%% | %.1f%% | %.1f | %.0f |", c.p, c.method.c_str(),
                c.mode.c_str(), 100 * c.removed, 100 * c.sparsity, c.file_bytes / 1024.0,
                c.decode_tok_s);
    for (double v : c.ppl) std::printf(" %.2f |", v);
    std::printf("\n");
  }
  std::printf("\n| text | P | group | ordering | holds |\n|---|---|---|---|---|\n%s",
              order_md.c_str());
  return kExitOk;
}

}  // namespace weir::tools
