// weir calibrate: collect activation statistics over a text and write the calibration file that
// CATS and TEAL thresholds are read from (`--calib` of run, ppl, bench, sweep); on a mixture of
// experts also how often each expert is chosen (`weir pack --calib` stores them hottest first).
#include <cstdio>

#include "common/cli.h"
#include "common/commands.h"
#include "common/model_flags.h"
#include "format/mapped_file.h"
#include "model/perplexity.h"
#include "sparsity/calibration.h"

namespace weir::tools {

namespace {
// Feeds every linear-layer input the session computes into the sparsity Calibrator.
class CalibratorObserver : public model::ActivationObserver {
 public:
  explicit CalibratorObserver(sparsity::Calibrator* c) : c_(c) {}
  void OnInput(int layer, sparsity::Site site, const float* x, int64_t dim) override {
    c_->Add(layer, site, std::span<const float>(x, static_cast<size_t>(dim)));
  }
  void OnGate(int layer, const float* g, int64_t d_ff) override {
    c_->AddGate(layer, std::span<const float>(g, static_cast<size_t>(d_ff)));
  }
  void OnExperts(int layer, const int32_t* experts, int k) override {
    c_->AddExperts(layer, std::span<const int32_t>(experts, static_cast<size_t>(k)), n_expert_);
  }
  int n_expert_ = 0;

 private:
  sparsity::Calibrator* c_;
};
}  // namespace

int CalibrateMain(int argc, char** argv) {
  CLI::App app("Collect activation statistics over a text for sparsity thresholds (cats, teal)\n"
               "and, for a mixture of experts, how often each expert is chosen per layer (the\n"
               "hot set of `weir pack --calib`).", "calibrate");
  ModelFlags mf;
  mf.ctx = 256;
  std::string file, out;
  int chunks = 8;
  int64_t max_samples = 4096;
  bool json = false, no_progress = false;
  AddModelFlags(app, &mf);
  app.get_option("--ctx-size")->description("tokens per calibration sequence (default 256)");
  app.add_option("-f,--file", file, "calibration text")->required();
  app.add_option("-o,--output", out, "calibration file to write (JSON)")->required();
  app.add_option("--chunks", chunks, "sequences of CTX tokens to run (default 8)")->check(CLI::Range(1, 100000));
  app.add_option("--samples", max_samples, "magnitudes kept per layer and site (default 4096)")->check(CLI::Range(16, 1 << 24));
  app.add_flag("--json", json, "print a JSON summary");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  if (mf.ctx == 0) mf.ctx = 256;

  auto text = format::ReadSmallFile(file, 1ull << 30);
  if (!text.ok()) return Fail("calibrate", text.status());
  auto m = LoadModel(mf);
  if (!m.ok()) return Fail("calibrate", m.status());
  const model::Model& model = **m;
  if (!model.tokenizer()) return Fail("calibrate", Status::InvalidArgument("the model has no tokenizer"));
  std::vector<int32_t> ids = model.tokenizer()->Encode(*text, model.tokenizer()->add_bos());
  ThreadPool pool(ThreadCount(mf));
  model::SessionOptions so;
  so.ctx = mf.ctx;
  so.kv_types = mf.kv_types;
  so.n_batch = std::min(mf.ctx, 64);
  auto session = model::Session::Create(model, &pool, so);
  if (!session.ok()) return Fail("calibrate", session.status());
  sparsity::Calibrator calibrator(model.config().n_layers, max_samples);
  CalibratorObserver observer(&calibrator);
  observer.n_expert_ = model.config().n_expert;  // a mixture of experts: routing counts too
  (*session)->set_observer(&observer);
  model::PerplexityOptions po;
  po.max_chunks = chunks;
  int total = std::min<int>(chunks, static_cast<int>(ids.size() / static_cast<size_t>(mf.ctx)));
  ProgressBar bar("calibrate", static_cast<uint64_t>(std::max(total, 0)), !json && !no_progress);
  auto r = model::Perplexity(**session, ids, model.tokenizer()->bos_id(), po,
                             [&](int done, int) { bar.Update(static_cast<uint64_t>(done)); });
  bar.Finish();
  if (!r.ok()) return Fail("calibrate", r.status());
  sparsity::Calibration calib = calibrator.Finish(
      StrFormat("weir calibrate: %s over %d chunks of %d tokens of %s", model.file().path.c_str(), r->chunks,
                mf.ctx, file.c_str()));
  if (Status st = calib.Save(out); !st.ok()) return Fail("calibrate", st);
  if (json) {
    PrintJson({{"output", out}, {"chunks", r->chunks}, {"ctx", mf.ctx}, {"ppl", r->ppl}, {"layers", calib.n_layer()}});
  } else {
    std::printf("wrote %s (%d layers, %d chunks of %d tokens; ppl on the calibration text %.3f)\n", out.c_str(),
                calib.n_layer(), r->chunks, mf.ctx, r->ppl);
  }
  return kExitOk;
}

}  // namespace weir::tools
