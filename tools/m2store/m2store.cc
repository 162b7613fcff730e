// weir m2store: writes M2Cache's neuron store of a model (every MLP neuron at the two
// precisions, and the low-rank predictors) as a store file (m2cache/store_file.h), the SSD tier
// that `weir run|ppl --m2cache store=FILE --memory BYTES` streams under a DRAM budget (paper 004
// §5.4: each layer one 4 KiB-aligned extent, preloaded ahead of the layer being computed).
#include <unistd.h>

#include <cstdio>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "common/m2cache_flags.h"
#include "common/model_flags.h"
#include "format/mapped_file.h"
#include "m2cache/mix_config.h"
#include "m2cache/store_file.h"
#include "model/m2cache_weights.h"

namespace weir::tools {

int M2storeMain(int argc, char** argv) {
  CLI::App app("Write M2Cache's neuron store of a model (each MLP neuron at a high and a low precision,\n"
               "and the low-rank predictors) as a file that `weir run|ppl --m2cache store=FILE,high=F,low=F\n"
               "--memory BYTES` streams from storage: the first layers stay in DRAM, the rest are read\n"
               "a layer at a time, window=N layers ahead (default 2), within the budget.\n"
               "Example: weir m2store -m model.gguf -o model.m2s && weir run -m model.gguf\n"
               "  --m2cache store=model.m2s,high=0.1,low=0.4 --memory 64MiB -p \"Hello\"",
               "m2store");
  ModelFlags mf;
  AddModelFlags(app, &mf);
  std::string out, hi = "q8_0", lo = "q4_0", predictor = "lowrank", calib;
  int rank = 64, calib_tokens = 2048;
  app.add_option("-o,--output", out, "the store file to write (replaced atomically)")->required();
  app.add_option("--hi", hi, "the high precision (default q8_0)");
  app.add_option("--lo", lo, "the low precision (default q4_0)");
  app.add_option("--rank", rank, "the low-rank predictor's rank (default 64)")->check(CLI::Range(1, 4096));
  app.add_option("--predictor", predictor,
                 "lowrank (gate, default), glu (gate and up) or none (runs need predictor=oracle)")
      ->check(CLI::IsMember({"lowrank", "glu", "none"}));
  app.add_option("--calib", calib, "fit the predictors to the MLP inputs of this text (its first --calib-tokens tokens)");
  app.add_option("--calib-tokens", calib_tokens, "tokens of --calib (default 2048)")->check(CLI::Range(1, 1 << 24));
  std::string plan_path;
  app.add_option("--plan", plan_path,
                 "a plan from `weir m2search -o`: its best ratios go into the store (runs of the store use them "
                 "unless they give high=/low=), and its types, rank, predictor and calibration text are used");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  if (out == mf.model) return Fail("m2store", Status::InvalidArgument("-o " + out + " is the model file"));
  m2cache::StorePlan store_plan;
  if (!plan_path.empty()) {
    auto plan = ReadM2CachePlan(plan_path);
    if (!plan.ok()) return Fail("m2store", plan.status());
    // The plan's settings, unless a flag names another (then they must agree).
    auto take = [&](const char* flag, std::string* value, const std::string& from_plan) -> Status {
      if (app.count(flag) > 0 && *value != from_plan) {
        return Status::InvalidArgument(std::string(flag) + " " + *value + " disagrees with the plan's " + from_plan);
      }
      *value = from_plan;
      return Status::Ok();
    };
    std::string rank_s = std::to_string(rank);
    for (Status st : {take("--hi", &hi, plan->hi), take("--lo", &lo, plan->lo),
                      take("--rank", &rank_s, std::to_string(plan->rank)), take("--predictor", &predictor, plan->predictor)}) {
      if (!st.ok()) return Fail("m2store", st);
    }
    rank = std::stoi(rank_s);
    if (predictor == "oracle") predictor = "none";
    if (calib.empty()) calib = plan->calib;
    store_plan = {plan->r_high, plan->r_low};
  }

  auto config = m2cache::ParseMixConfig("hi=" + hi + ",lo=" + lo + ",rank=" + std::to_string(rank) + ",predictor=" +
                                        (predictor == "none" ? std::string("oracle") : predictor));
  if (!config.ok()) return Fail("m2store", config.status());
  ThreadPool pool(ThreadCount(mf));
  mf.pool = &pool;
  mf.tile = false;
  auto loaded = LoadModel(mf);
  if (!loaded.ok()) return Fail("m2store", loaded.status());
  const model::Model& model = **loaded;
  std::vector<int32_t> calib_ids;
  if (!calib.empty()) {
    auto ids_or = ReadCalibrationTokens(model, calib, calib_tokens);
    if (!ids_or.ok()) return Fail("m2store", ids_or.status());
    calib_ids = std::move(*ids_or);
  }
  const bool progress = isatty(2);
  const uint64_t layers = static_cast<uint64_t>(model.config().n_layers);
  ProgressBar build_bar("neurons", layers, progress);
  auto weights = model::BuildM2Weights(model, *config, &pool, [&](int l) { build_bar.Update(static_cast<uint64_t>(l + 1)); },
                                       calib_ids);
  build_bar.Finish();
  if (!weights.ok()) return Fail("m2store", weights.status());
  ProgressBar write_bar("write", layers, progress);
  const Status st = m2cache::WriteStoreFile(**weights, out, [&](int l) { write_bar.Update(static_cast<uint64_t>(l + 1)); },
                                            store_plan);
  write_bar.Finish();
  if (!st.ok()) return Fail("m2store", st);
  std::fprintf(stderr, "wrote %s: %llu layers, neurons %s at %s + %s, predictors %s (%s)\n", out.c_str(),
               static_cast<unsigned long long>(layers), FormatBytes((*weights)->store->bytes()).c_str(),
               DTypeName(config->types.high), DTypeName(config->types.low),
               FormatBytes((*weights)->predictor_bytes()).c_str(), predictor.c_str());
  return 0;
}

}  // namespace weir::tools
