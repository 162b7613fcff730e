// weir m2fit: trains M2Cache's per-layer neuron predictors on recorded activations of a
// calibration text (m2cache/trained_predictor.h) and writes them as a predictor file
// (m2cache/predictor_file.h) that `--m2cache predictor=trained:FILE` and
// `weir m2search --predictor trained:FILE` use. Each layer starts from the calibrated rank-r
// low-rank predictor of the same text and is trained to rank the layer's true top neurons first.
#include <cstdio>
#include <mutex>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "common/m2cache_flags.h"
#include "common/model_flags.h"
#include "m2cache/mix_config.h"
#include "m2cache/predictor_file.h"
#include "model/m2cache_weights.h"

namespace weir::tools {

int M2fitMain(int argc, char** argv) {
  CLI::App app("Train M2Cache's neuron predictors (one per MLP layer, the cost of a rank-R low-rank one:\n"
               "score = s * |act(U A x)| or U A x + b) on the MLP inputs of a calibration text, starting from the\n"
               "calibrated low-rank predictor, with Adam on a logistic loss whose labels mark each\n"
               "token's true top TOP fraction of neurons by |act(gate) * up|. Layers train in parallel;\n"
               "a seed gives the same file on every run.\n"
               "Example: weir m2fit -m model.gguf --calib tinystories.txt -o model.m2p &&\n"
               "  weir ppl -m model.gguf -f wiki.test.raw --m2cache high=0,low=0.5,predictor=trained:model.m2p",
               "m2fit");
  ModelFlags mf;
  AddModelFlags(app, &mf);
  std::string out, calib;
  int rank = 64, calib_tokens = 4096;
  m2cache::TrainOptions to;
  app.add_option("-o,--output", out, "the predictor file to write (replaced atomically)")->required();
  app.add_option("--calib", calib, "the training text (never the evaluation text)")->required();
  app.add_option("--calib-tokens", calib_tokens, "tokens of --calib to train on (default 4096; the first 2048 "
                 "also fit the starting low-rank predictor)")->check(CLI::Range(16, 1 << 20));
  app.add_option("--rank", rank, "the predictor's rank r (default 64: the cost of the default lowrank predictor)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--top", to.top_fraction, "the labels mark each token's top TOP of the neurons (default 0.5)")
      ->check(CLI::Range(0.01, 0.99));
  app.add_option("--epochs", to.epochs, "passes over the samples (default 4)")->check(CLI::Range(0, 1000));
  app.add_option("--batch", to.batch, "samples per Adam step (default 32)")->check(CLI::Range(1, 1 << 16));
  app.add_option("--lr", to.learning_rate, "Adam's starting step, decaying linearly to 0 (default 1e-3)")
      ->check(CLI::Range(1e-7, 1.0));
  app.add_option("--holdout", to.holdout, "the last share of the samples, held out to pick the epoch (default 0.125)")
      ->check(CLI::Range(0.01, 0.9));
  app.add_option("--seed", to.seed, "the shuffling seed (default 1; layer l uses seed + l)");
  std::string form = "gated";
  app.add_option("--form", form,
                 "gated (default): score = s * |act(U A x)|, the low-rank predictor's own score with A, U and s "
                 "trained; logit: score = U A x + b, a linear logit (both read the same bytes)")
      ->check(CLI::IsMember({"gated", "logit"}));
  std::string inputs_from = "sparse";
  app.add_option("--inputs", inputs_from,
                 "sparse (default): record each layer's inputs from a run whose MLPs are M2Cache's with the starting "
                 "low-rank predictor at high=0,low=TOP, the inputs a sparse run sees; dense: from the model as loaded")
      ->check(CLI::IsMember({"sparse", "dense"}));
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  to.form = form == "logit" ? m2cache::PredictorForm::kLogit : m2cache::PredictorForm::kGated;
  if (out == mf.model) return Fail("m2fit", Status::InvalidArgument("-o " + out + " is the model file"));

  ThreadPool pool(ThreadCount(mf));
  mf.pool = &pool;
  mf.tile = false;
  auto loaded = LoadModel(mf);
  if (!loaded.ok()) return Fail("m2fit", loaded.status());
  const model::Model& model = **loaded;
  if (model.config().IsMoe()) return Fail("m2fit", Status::Unsupported(model.file().path + " is a mixture of experts"));
  auto ids = ReadCalibrationTokens(model, calib, calib_tokens);
  if (!ids.ok()) return Fail("m2fit", ids.status());
  const int layers = model.config().n_layers;
  const int64_t d = model.config().d_model;

  // The starting point: the default low-rank predictor fitted on the first 2048 tokens (as
  // `--m2cache calib=TEXT` fits it), with its up scale.
  auto spec = m2cache::ParseMixConfig("rank=" + std::to_string(rank));
  if (!spec.ok()) return Fail("m2fit", spec.status());
  std::fprintf(stderr, "m2fit: %s, %zu tokens of %s, %s form, rank %d, top %.3g, %d epochs, batch %d, lr %g, seed %llu\n",
               model.file().path.c_str(), ids->size(), calib.c_str(), form.c_str(), rank, to.top_fraction, to.epochs, to.batch,
               to.learning_rate, static_cast<unsigned long long>(to.seed));
  const std::span<const int32_t> fit_ids(ids->data(), std::min<size_t>(ids->size(), 2048));
  auto init = model::BuildM2Weights(model, *spec, &pool, nullptr, fit_ids);
  if (!init.ok()) return Fail("m2fit", init.status());
  std::fprintf(stderr, "m2fit: fitted the starting low-rank predictors; recording the MLP inputs (%s)\n",
               inputs_from.c_str());
  m2cache::MixConfig run = *spec;
  run.r_high = 0;
  run.r_low = to.top_fraction;
  run.cache_units = false;
  auto inputs = model::RecordMlpInputs(model, *ids, &pool, inputs_from == "sparse" ? init->get() : nullptr, run);
  if (!inputs.ok()) return Fail("m2fit", inputs.status());

  const kernels::Glu glu = model.config().arch->activation == format::Activation::kGeluTanh ? kernels::Glu::kGeluTanh
                                                                                              : kernels::Glu::kSilu;
  m2cache::PredictorFile file;
  file.top_fraction = static_cast<float>(to.top_fraction);
  file.form = to.form;
  file.layers.resize(static_cast<size_t>(layers));
  std::vector<m2cache::TrainReport> reports(static_cast<size_t>(layers));
  std::vector<Status> errors(static_cast<size_t>(layers));
  std::mutex print_mu;
  // One layer per task: each trains on one thread in a fixed order (deterministic).
  ParallelForDynamic(&pool, static_cast<size_t>(layers), [&](size_t begin, size_t end, int) {
    for (size_t l = begin; l < end; ++l) {
      const model::LayerWeights& w = model.weights().layers[l];
      const std::vector<float>& x = (*inputs)[l];
      m2cache::TrainOptions lo = to;
      lo.seed = to.seed + l;
      auto on_epoch = [&](const m2cache::EpochReport& e) {
        std::lock_guard<std::mutex> lock(print_mu);
        std::fprintf(stderr, "layer %2zu epoch %d: train loss %.5f, held-out loss %.5f, recall %.4f\n", l, e.epoch,
                     e.train_loss, e.heldout_loss, e.heldout_recall);
      };
      const std::vector<float>& scale = (*init)->up_scale[l];
      auto t = m2cache::TrainPredictor(w.w_gate, w.w_up, glu, (*init)->predictors[l], scale, x,
                                       static_cast<int64_t>(x.size()) / d, lo, on_epoch, &reports[l]);
      if (!t.ok()) {
        errors[l] = t.status();
        continue;
      }
      file.layers[l] = std::move(*t);
    }
  }, 1);
  for (int l = 0; l < layers; ++l) {
    if (!errors[static_cast<size_t>(l)].ok()) return Fail("m2fit", errors[static_cast<size_t>(l)].WithContext("layer " + std::to_string(l)));
  }
  if (Status st = m2cache::WritePredictorFile(out, file); !st.ok()) return Fail("m2fit", st);

  double lowrank = 0, start = 0, final_recall = 0;
  uint64_t bytes = 0;
  std::printf("| layer | lowrank recall | trained recall | held-out loss start -> kept | kept epoch |\n|---:|---:|---:|---:|---:|\n");
  for (int l = 0; l < layers; ++l) {
    const m2cache::TrainReport& r = reports[static_cast<size_t>(l)];
    std::printf("| %d | %.4f | %.4f | %.5f -> %.5f | %d |\n", l, r.lowrank_recall, r.final_recall, r.start_loss,
                r.final_loss, r.kept_epoch);
    lowrank += r.lowrank_recall;
    start += r.start_recall;
    final_recall += r.final_recall;
    const auto& tl = file.layers[static_cast<size_t>(l)];
    bytes += tl.factors.bytes() + tl.bias.size() * sizeof(float);
  }
  std::printf("\nheld-out recall of the top %.3g (mean over layers): lowrank %.4f, trained (start) %.4f, trained %.4f\n",
              to.top_fraction, lowrank / layers, start / layers, final_recall / layers);
  std::printf("wrote %s: %d layers, rank %d, %s read per token (%.2f MiB)\n", out.c_str(), layers, rank,
              FormatBytes(bytes).c_str(), static_cast<double>(bytes) / (1 << 20));
  return kExitOk;
}

}  // namespace weir::tools
