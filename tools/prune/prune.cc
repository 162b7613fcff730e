// weir prune: Mosaic-style pruning of a model with calibration on a text file. Calibrates the
// input norms of every projection, derives per-projection targets (global / OWL layer /
// Mosaic projection), prunes (unstructured / structured / composite) and writes a GGUF whose
// weir.prune.* metadata records the targets. See docs/pruning.md.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "common/model_flags.h"
#include "format/llama_gguf_writer.h"
#include "format/mapped_file.h"
#include "prune/calibration.h"
#include "prune/metric.h"
#include "prune/prune_metadata.h"
#include "prune/prune_report.h"
#include "prune/pruner.h"
#include "prune/targets.h"

namespace weir::tools {

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The writer creates OUT.tmp next to OUT and renames it: the directory must take new files.
Status CheckWritableDir(const std::string& out) {
  const size_t slash = out.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : out.substr(0, slash + 1);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::IoError(StrFormat("%s: cannot write to the directory %s: %s", out.c_str(),
                                     dir.c_str(), std::strerror(errno)));
  }
  return Status::Ok();
}

}  // namespace

int PruneMain(int argc, char** argv) {
  CLI::App app(
      "Prune a model (Mosaic: projection outlier distribution, composite pruning).\n"
      "Calibrates on a text file, derives a target per (layer, projection) averaging P\n"
      "(weighted by parameters), prunes and writes a GGUF. Architectures: " +
          prune::PrunableArchList() +
          "\n(mixture-of-experts models are refused). See docs/pruning.md.",
      "prune");
  ModelFlags mf;
  std::string text_path, out, method_name = "projection", mode_name = "unstructured",
                              average_name = "params";
  double target = -1, alpha = 5, lambda = 0.08, share = 0.5;
  prune::CalibrationOptions co;
  bool json = false, no_progress = false;
  AddModelFlags(app, &mf, /*with_ctx=*/false);
  app.add_option("-f,--file", text_path, "calibration text")->required();
  app.add_option("--target", target,
                 "pruning target P in [0, 1): fraction of projection parameters")
      ->required();
  app.add_option("--method", method_name,
                 "targets: global, layer (OWL) or projection (Mosaic; default)");
  app.add_option("--mode", mode_name, "unstructured (default), structured or composite");
  app.add_option("-o,--output", out, "output .gguf")->required();
  app.add_option("--alpha", alpha, "outlier threshold: omega > alpha * mean (default 5)");
  app.add_option("--lambda", lambda,
                 "spread of layer/projection targets: P +- lambda (default 0.08)");
  app.add_option("--share", share,
                 "composite: share of each target removed as whole heads/neurons (default 0.5)");
  app.add_option("--average", average_name,
                 "targets average to P weighted by 'params' (default) or 'uniform' (Eq. 1-2)");
  app.add_option("--nsamples", co.nsamples,
                 "calibration sequences (default 128, fewer if the text is short)");
  app.add_option("--seqlen", co.seqlen,
                 "tokens per calibration sequence (default: the model's context)");
  app.add_flag("--json", json, "print a JSON report");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  if (Status st = prune::CheckTargetFraction(target); !st.ok()) {
    std::fprintf(stderr, "weir prune: --target %g is outside [0, 1)\n", target);
    return kExitUsage;
  }
  auto method = prune::ParseTargetMethod(method_name);
  auto mode = prune::ParsePruneMode(mode_name);
  auto average = prune::ParseTargetAverage(average_name);
  for (const Status* st : {&method.status(), &mode.status(), &average.status()}) {
    if (!st->ok()) {
      std::fprintf(stderr, "weir prune: %s\n", st->message().c_str());
      return kExitUsage;
    }
  }
  if (!(alpha > 0) || !(lambda >= 0) || !(share >= 0 && share <= 1) || co.nsamples <= 0 ||
      co.seqlen < 0) {
    std::fprintf(stderr,
                 "weir prune: need --alpha > 0 (got %g), --lambda >= 0 (got %g), --share in [0, 1] "
                 "(got %g), "
                 "--nsamples > 0 (got %d), --seqlen >= 0 (got %d)\n",
                 alpha, lambda, share, co.nsamples, co.seqlen);
    return kExitUsage;
  }

  const auto t_start = std::chrono::steady_clock::now();
  auto text = format::ReadSmallFile(text_path, 1ull << 30);
  if (!text.ok()) return Fail("prune", text.status().WithContext("calibration text"));
  auto m = LoadModel(mf);
  if (!m.ok()) return Fail("prune", m.status());
  const model::Model& model = **m;
  // Every refusal comes before calibration, which takes minutes on a real model: the
  // architecture and the model's shapes, the flags against the model, what the GGUF writer
  // would refuse, and the output's directory.
  prune::PruneOptions po;
  po.mode = *mode;
  po.structured_share = share;
  if (Status st = prune::CheckPrunable(model.file(), po, target); !st.ok()) {
    return Fail("prune", st);
  }
  auto layers = prune::BindProjections(model.file());
  if (!layers.ok()) return Fail("prune", layers.status());
  if (Status st = CheckWritableDir(out); !st.ok()) return Fail("prune", st);
  ThreadPool pool(ThreadCount(mf));

  // 1. Calibration.
  const bool show = !json && !no_progress;
  std::unique_ptr<ProgressBar> bar;  // made at the first sequence, when the count is known
  auto t0 = std::chrono::steady_clock::now();
  auto cal = prune::CalibrateOnText(model, *text, co, &pool, [&](int done, int total) {
    if (!bar) bar = std::make_unique<ProgressBar>("calibrate", static_cast<uint64_t>(total), show);
    bar->Update(static_cast<uint64_t>(done));
  });
  bar.reset();
  if (!cal.ok()) return Fail("prune", cal.status().WithContext(text_path));
  const double calibrate_s = SecondsSince(t0);

  // 2. Outlier statistics and targets.
  t0 = std::chrono::steady_clock::now();
  std::optional<prune::OutlierStats> stats;
  if (*method != prune::TargetMethod::kGlobal) {
    auto s = prune::ComputeOutlierStats(model.file(), cal->norms, alpha, &pool);
    if (!s.ok()) return Fail("prune", s.status());
    stats = std::move(s).value();
  }
  prune::TargetOptions to;
  to.lambda = lambda;
  to.average = *average;
  auto targets = prune::ComputeTargets(*method, target, *layers, stats ? &*stats : nullptr, to);
  if (!targets.ok()) return Fail("prune", targets.status());
  const double stats_s = SecondsSince(t0);

  // 3. Prune.
  t0 = std::chrono::steady_clock::now();
  auto pruned = prune::Prune(model.file(), cal->norms, *targets, po, &pool);
  if (!pruned.ok()) return Fail("prune", pruned.status());
  const double prune_s = SecondsSince(t0);

  // 4. Write.
  t0 = std::chrono::steady_clock::now();
  prune::PruneProvenance prov;
  prov.alpha = alpha;
  prov.calibration_file = BaseName(text_path);
  prov.calibration_sequences = cal->sequences;
  prov.calibration_seqlen = cal->seqlen;
  ProgressBar wbar("write " + out, 1000, show);
  Status st = format::WriteLlamaGguf(
      pruned->file, out, std::nullopt,
      [&](double f) { wbar.Update(static_cast<uint64_t>(f * 1000)); },
      prune::PruneMetadata(*targets, po, pruned->report, prov));
  wbar.Finish();
  if (!st.ok()) return Fail("prune", st);
  const double write_s = SecondsSince(t0);
  struct stat sb {};
  const uint64_t out_bytes = ::stat(out.c_str(), &sb) == 0 ? static_cast<uint64_t>(sb.st_size) : 0;
  const auto& rep = pruned->report;

  if (json) {
    nlohmann::json j = TargetsJson(*targets, rep, stats ? &*stats : nullptr);
    j["model"] = model.file().path;
    j["output"] = out;
    j["output_bytes"] = out_bytes;
    j["mode"] = std::string(prune::PruneModeName(*mode));
    j["alpha"] = alpha;
    if (*mode == prune::PruneMode::kComposite) j["share"] = share;
    j["calibration"] = {{"file", text_path},
                        {"sequences", cal->sequences},
                        {"seqlen", cal->seqlen},
                        {"tokens", cal->tokens},
                        {"text_tokens", cal->text_tokens}};
    j["params_before"] = rep.params_before;
    j["params_after"] = rep.params_after;
    j["nonzero_after"] = rep.nonzero_after;
    j["sparsity"] = rep.sparsity();
    j["removed"] = rep.removed();
    j["seconds"] = {{"calibrate", calibrate_s},
                    {"targets", stats_s},
                    {"prune", prune_s},
                    {"write", write_s},
                    {"total", SecondsSince(t_start)}};
    PrintJson(j);
    return kExitOk;
  }
  std::printf("calibration: %d sequences x %d tokens from %s (%lld text tokens)\n", cal->sequences,
              cal->seqlen, text_path.c_str(), static_cast<long long>(cal->text_tokens));
  std::fputs(TargetsTable(*targets, rep).c_str(), stdout);
  std::printf(
      "projection params: %lld -> %lld stored (%.2f%% removed), %lld nonzero (sparsity %.2f%%)\n",
      static_cast<long long>(rep.params_before), static_cast<long long>(rep.params_after),
      100 * rep.removed(), static_cast<long long>(rep.nonzero_after), 100 * rep.sparsity());
  std::printf("wrote %s (%s)\n", out.c_str(), FormatBytes(out_bytes).c_str());
  std::printf("time: calibrate %.2fs, targets %.2fs, prune %.2fs, write %.2fs, total %.2fs\n",
              calibrate_s, stats_s, prune_s, write_s, SecondsSince(t_start));
  return kExitOk;
}

}  // namespace weir::tools
