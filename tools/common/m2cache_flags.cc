#include "common/m2cache_flags.h"

#include <cstdio>

#include "base/units.h"
#include "common/cli.h"
#include "format/mapped_file.h"
#include "m2cache/mix_config.h"
#include "model/m2cache_weights.h"

namespace weir::tools {

void AddM2CacheFlags(CLI::App& app, M2CacheFlags* flags) {
  app.add_option("--m2cache", flags->spec,
                 "M2Cache's dynamic sparse mixed-precision MLP (docs/m2cache.md): "
                 "high=F,low=F[,hi=TYPE,lo=TYPE,rank=R,predictor=lowrank|oracle,units=on|off,"
                 "tier=dram|cuda,recall=on|off,calib=TEXT] or plan=FILE from `weir m2search` (default "
                 "types q8_0/q4_0, rank 64; calib=TEXT fits the predictors to the MLP inputs of its "
                 "first 2048 tokens)");
}

Result<std::string> ReadM2CachePlan(const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(std::string text, format::ReadSmallFile(path, 16u << 20));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "weir-m2cache-plan") {
    return Status::InvalidArgument(path + ": not a plan written by `weir m2search` (format weir-m2cache-plan)");
  }
  const nlohmann::json& best = j["best"];
  if (!best.is_object() || !best["r_high"].is_number() || !best["r_low"].is_number() || !j["hi"].is_string() ||
      !j["lo"].is_string() || !j["rank"].is_number_integer()) {
    return Status::InvalidArgument(path + ": the plan lacks best.r_high, best.r_low, hi, lo or rank");
  }
  char buf[200];
  std::snprintf(buf, sizeof(buf), "high=%.17g,low=%.17g,hi=%s,lo=%s,rank=%d,predictor=%s", best["r_high"].get<double>(),
                best["r_low"].get<double>(), j["hi"].get<std::string>().c_str(), j["lo"].get<std::string>().c_str(),
                j["rank"].get<int>(), j.value("predictor", std::string("lowrank")).c_str());
  std::string spec = buf;
  // The predictors the ratios were searched with: fitted on the same calibration text.
  if (j.contains("calib") && j["calib"].is_string() && !j["calib"].get<std::string>().empty()) {
    spec += ",calib=" + j["calib"].get<std::string>();
  }
  return spec;
}

Status ParseM2CacheFlags(M2CacheFlags* flags) {
  if (!flags->enabled()) return Status::Ok();
  // plan=FILE expands into the plan's keys, in place, so that later keys override them.
  std::string spec;
  size_t pos = 0;
  while (pos <= flags->spec.size()) {
    const size_t comma = flags->spec.find(',', pos);
    const std::string part = flags->spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? flags->spec.size() + 1 : comma + 1;
    std::string piece = part;
    if (part.rfind("plan=", 0) == 0) {
      flags->plan_path = part.substr(5);
      WEIR_ASSIGN_OR_RETURN(piece, ReadM2CachePlan(flags->plan_path));
    }
    if (!spec.empty()) spec += ',';
    spec += piece;
  }
  // calib=FILE names a text for the tools, not a key of the library's spec: take it out (the
  // last one wins, so a calib= after plan= overrides the plan's).
  std::string lib_spec;
  for (size_t p = 0; p <= spec.size();) {
    const size_t comma = spec.find(',', p);
    const std::string part = spec.substr(p, comma == std::string::npos ? std::string::npos : comma - p);
    p = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (part.rfind("calib=", 0) == 0) {
      flags->calib_path = part.substr(6);
      continue;
    }
    if (!lib_spec.empty()) lib_spec += ',';
    lib_spec += part;
  }
  WEIR_ASSIGN_OR_RETURN(flags->config, m2cache::ParseMixConfig(lib_spec));
  return Status::Ok();
}

Status BuildM2Cache(M2CacheFlags* flags, const model::Model& model, ThreadPool* pool, bool progress,
                    model::SessionOptions* options) {
  if (!flags->enabled()) return Status::Ok();
  const int layers = model.config().n_layers;
  std::vector<int32_t> calib;
  if (!flags->calib_path.empty()) {
    if (model.tokenizer() == nullptr) return Status::InvalidArgument("--m2cache calib=: the model has no tokenizer");
    WEIR_ASSIGN_OR_RETURN(std::string text, format::ReadSmallFile(flags->calib_path, 1ull << 30));
    calib = model.tokenizer()->Encode(text, false);
    if (calib.size() > static_cast<size_t>(flags->calib_tokens)) calib.resize(static_cast<size_t>(flags->calib_tokens));
    if (calib.empty()) return Status::InvalidArgument("--m2cache calib=" + flags->calib_path + ": the text is empty");
  }
  ProgressBar bar("m2cache", static_cast<uint64_t>(layers), progress);
  WEIR_ASSIGN_OR_RETURN(flags->weights, model::BuildM2Weights(model, flags->config, pool, [&](int l) {
                          bar.Update(static_cast<uint64_t>(l + 1));
                        }, calib));
  bar.Finish();
  options->m2cache = flags->weights.get();
  options->m2cache_config = flags->config;
  return Status::Ok();
}

nlohmann::json M2StatsJson(const m2cache::MixedMlp& mlp, uint64_t tokens) {
  const m2cache::M2Stats& s = mlp.stats();
  const double t = tokens ? static_cast<double>(tokens) : 1.0;
  const double steps = s.layer_tokens ? static_cast<double>(s.layer_tokens) : 1.0;
  nlohmann::json j = {{"spec", mlp.config().ToString()},
                      {"neurons_high_per_layer", s.neurons[m2cache::kHigh] / steps},
                      {"neurons_low_per_layer", s.neurons[m2cache::kLow] / steps},
                      {"mlp_bytes_computed_per_token", s.bytes_computed / t},
                      {"predictor_bytes_per_token", s.bytes_predictor / t},
                      {"dense_mlp_bytes_per_token", s.bytes_dense / t},
                      {"tiers",
                       {{"top", mlp.config().cache_units ? mlp.config().tier : "none"},
                        {"dram_to_top_bytes_per_token", s.bytes_into_top / t},
                        {"top_hit_rate", s.unit_hit_rate()},
                        {"top_loads_high_per_token", s.unit_loads[m2cache::kHigh] / t},
                        {"top_loads_low_per_token", s.unit_loads[m2cache::kLow] / t}}}};
  if (s.recall_total) j["recall"] = s.recall();
  return j;
}

std::string FormatM2Stats(const m2cache::MixedMlp& mlp, uint64_t tokens) {
  const m2cache::M2Stats& s = mlp.stats();
  const double t = tokens ? static_cast<double>(tokens) : 1.0;
  const double steps = s.layer_tokens ? static_cast<double>(s.layer_tokens) : 1.0;
  std::string out = StrFormat(
      "m2cache %s: %.0f high + %.0f low neurons per layer | MLP %s/token computed (dense %s), predictor %s/token",
      mlp.config().ToString().c_str(), s.neurons[m2cache::kHigh] / steps, s.neurons[m2cache::kLow] / steps,
      FormatBytes(static_cast<uint64_t>(s.bytes_computed / t)).c_str(),
      FormatBytes(static_cast<uint64_t>(s.bytes_dense / t)).c_str(),
      FormatBytes(static_cast<uint64_t>(s.bytes_predictor / t)).c_str());
  if (mlp.config().cache_units) {
    out += StrFormat(" | %s tier: %s/token copied in from DRAM, hit rate %.3f", mlp.config().tier.c_str(),
                     FormatBytes(static_cast<uint64_t>(s.bytes_into_top / t)).c_str(), s.unit_hit_rate());
  }
  if (s.recall_total) out += StrFormat(" | predictor recall %.3f", s.recall());
  return out;
}

}  // namespace weir::tools
