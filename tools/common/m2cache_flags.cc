#include "common/m2cache_flags.h"

#include <cstdio>
#include <cstdlib>

#include "base/units.h"
#include "common/cli.h"
#include "format/mapped_file.h"
#include "m2cache/mix_config.h"
#include "model/m2cache_weights.h"
#include "m2cache/store_file.h"
#include "storage/open_device.h"

namespace weir::tools {

void AddM2CacheFlags(CLI::App& app, M2CacheFlags* flags) {
  app.add_option("--m2cache", flags->spec,
                 "M2Cache's dynamic sparse mixed-precision MLP (docs/m2cache.md): "
                 "high=F,low=F[,hi=TYPE,lo=TYPE,rank=R,predictor=lowrank|glu|oracle|trained:FILE,units=on|off,"
                 "tier=dram|cuda,recall=on|off,calib=TEXT] or plan=FILE from `weir m2search` (default "
                 "types q8_0/q4_0, rank 64; calib=TEXT fits the predictors to the MLP inputs of its "
                 "first 2048 tokens); store=FILE streams the neuron store from a file written by "
                 "`weir m2store` (its types, rank and predictors) under --memory with --storage, "
                 "window=N layers read ahead (default 2)");
}

void ClaimM2CacheMemory(M2CacheFlags* flags, std::string* memory, const std::string& storage) {
  if (!flags->enabled() || flags->store_path.empty()) return;
  flags->memory = *memory;
  memory->clear();
  flags->storage = storage;
}

Result<M2CachePlan> ReadM2CachePlan(const std::string& path) {
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
  M2CachePlan plan;
  plan.r_high = best["r_high"].get<double>();
  plan.r_low = best["r_low"].get<double>();
  plan.hi = j["hi"].get<std::string>();
  plan.lo = j["lo"].get<std::string>();
  plan.rank = j["rank"].get<int>();
  if (j.contains("predictor") && j["predictor"].is_string()) plan.predictor = j["predictor"].get<std::string>();
  if (j.contains("calib") && j["calib"].is_string()) plan.calib = j["calib"].get<std::string>();
  return plan;
}

std::string M2CachePlan::Spec() const {
  std::string spec = StrFormat("high=%.17g,low=%.17g,hi=%s,lo=%s,rank=%d,predictor=%s", r_high, r_low, hi.c_str(),
                               lo.c_str(), rank, predictor.c_str());
  // The predictors the ratios were searched with: fitted on the same calibration text.
  if (!calib.empty()) spec += ",calib=" + calib;
  return spec;
}

Result<std::vector<int32_t>> ReadCalibrationTokens(const model::Model& model, const std::string& path, int max_tokens) {
  if (model.tokenizer() == nullptr) return Status::InvalidArgument(path + ": calibration text needs a model with a tokenizer");
  WEIR_ASSIGN_OR_RETURN(std::string text, format::ReadSmallFile(path, 1ull << 30));
  std::vector<int32_t> ids = model.tokenizer()->Encode(text, false);
  if (ids.size() > static_cast<size_t>(max_tokens)) ids.resize(static_cast<size_t>(max_tokens));
  if (ids.empty()) return Status::InvalidArgument(path + ": the calibration text is empty");
  return ids;
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
      WEIR_ASSIGN_OR_RETURN(M2CachePlan plan, ReadM2CachePlan(flags->plan_path));
      piece = plan.Spec();
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
    if (part.rfind("store=", 0) == 0) {
      flags->store_path = part.substr(6);
      if (flags->store_path.empty()) return Status::InvalidArgument("--m2cache store=: name a store file");
      continue;
    }
    if (part.rfind("window=", 0) == 0) {
      char* end = nullptr;
      const long w = std::strtol(part.c_str() + 7, &end, 10);
      if (end == part.c_str() + 7 || *end != '\0' || w < 0 || w > 64) {
        return Status::InvalidArgument("--m2cache " + part + ": the preload window is 0 to 64 layers");
      }
      flags->window = static_cast<int>(w);
      continue;
    }
    if (!lib_spec.empty()) lib_spec += ',';
    lib_spec += part;
  }
  WEIR_ASSIGN_OR_RETURN(flags->config, m2cache::ParseMixConfig(lib_spec));
  return Status::Ok();
}

namespace {

// store=FILE: the predictors from the file, the rows streamed by a FileSource.
Status OpenM2CacheStore(M2CacheFlags* flags, model::SessionOptions* options) {
  const std::string& path = flags->store_path;
  if (!flags->calib_path.empty()) {
    return Status::InvalidArgument("--m2cache store=" + path + " holds its predictors; calib= fits new ones (give it "
                                   "to `weir m2store` instead)");
  }
  uint64_t budget = UINT64_MAX;
  if (!flags->memory.empty()) {
    auto b = ParseBytes(flags->memory);
    if (!b.ok()) return b.status().WithContext("--memory");
    budget = *b;
  }
  storage::DeviceOptions dev;
  dev.kind = flags->storage;
  WEIR_ASSIGN_OR_RETURN(flags->store_device, storage::OpenDevice(path, dev));
  WEIR_ASSIGN_OR_RETURN(m2cache::OpenedStore opened, m2cache::OpenStoreFile(path, flags->store_device.get()));
  // The file decides the types, the rank and the predictor (oracle only if asked for, or if the
  // file has none).
  m2cache::MixConfig& c = flags->config;
  c.types = opened.index.types;
  c.rank = opened.weights->rank;
  if (opened.predictor == m2cache::PredictorKind::kOracle) {
    if (c.predictor != m2cache::PredictorKind::kOracle) {
      return Status::InvalidArgument(path + " has no predictor (written with --predictor none): add predictor=oracle");
    }
  } else if (c.predictor == m2cache::PredictorKind::kLowRankGlu && opened.predictor != c.predictor) {
    return Status::InvalidArgument(path + " holds the gate predictor only; predictor=glu needs a store written with "
                                   "--predictor glu");
  } else if (c.predictor != m2cache::PredictorKind::kOracle &&
             flags->spec.find("predictor=") == std::string::npos) {
    c.predictor = opened.predictor;
  }
  // The ratios the store was searched with, unless the run names its own.
  const bool own_ratios = flags->spec.find("high=") != std::string::npos || flags->spec.find("low=") != std::string::npos ||
                          !flags->plan_path.empty();
  std::string ratios_from = "--m2cache";
  if (!own_ratios && opened.plan.valid()) {
    c.r_high = opened.plan.r_high;
    c.r_low = opened.plan.r_low;
    ratios_from = "the store's plan";
  } else if (!own_ratios) {
    ratios_from = "the defaults (the store has no plan)";
  }
  WEIR_ASSIGN_OR_RETURN(flags->store_source,
                        m2cache::FileSource::Create(opened.index, flags->store_device.get(), {budget, flags->window}));
  flags->weights = std::move(opened.weights);
  const std::string& dev_name = flags->store_device->name();
  flags->store_line = StrFormat("m2cache store %s (%s of layers): memory budget %s (%s), storage %s; %s", path.c_str(),
                                FormatBytes(opened.index.extent_bytes()).c_str(),
                                budget == UINT64_MAX ? "unlimited" : FormatBytes(budget).c_str(),
                                flags->memory.empty() ? "no --memory: the whole store resident" : "--memory",
                                dev_name.substr(0, dev_name.find(':')).c_str(),
                                flags->store_source->Describe().c_str());
  flags->store_line += StrFormat("; ratios high=%.4g, low=%.4g from %s", c.r_high, c.r_low, ratios_from.c_str());
  options->m2cache = flags->weights.get();
  options->m2cache_config = flags->config;
  options->m2cache_source = flags->store_source.get();
  return Status::Ok();
}

}  // namespace

Status BuildM2Cache(M2CacheFlags* flags, const model::Model& model, ThreadPool* pool, bool progress,
                    model::SessionOptions* options) {
  if (!flags->enabled()) return Status::Ok();
  if (!flags->store_path.empty()) return OpenM2CacheStore(flags, options);
  const int layers = model.config().n_layers;
  std::vector<int32_t> calib;
  if (!flags->calib_path.empty()) {
    WEIR_ASSIGN_OR_RETURN(calib, ReadCalibrationTokens(model, flags->calib_path, flags->calib_tokens));
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
  // The tier below DRAM: bytes read from storage (the SSD tier's preloads) and the time the
  // forward pass waited for them.
  j["tiers"]["ssd"] = {{"source", mlp.source().tier()},
                       {"layout", mlp.source().Describe()},
                       {"dram_bytes", mlp.source().allocated_bytes()},
                       {"storage_bytes_per_token", s.bytes_from_storage / t},
                       {"storage_reads_per_token", s.storage_reads / t},
                       {"read_ms_per_token", 1e3 * s.storage_read_seconds / t},
                       {"stall_ms_per_token", 1e3 * s.stall_seconds / t}};
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
  if (std::string(mlp.source().tier()) == "ssd") {
    out += StrFormat(" | ssd tier: %s/token read from storage (%.1f reads), read %.2f ms/token, stall %.2f ms/token",
                     FormatBytes(static_cast<uint64_t>(s.bytes_from_storage / t)).c_str(), s.storage_reads / t,
                     1e3 * s.storage_read_seconds / t, 1e3 * s.stall_seconds / t);
  }
  if (s.recall_total) out += StrFormat(" | predictor recall %.3f", s.recall());
  return out;
}

}  // namespace weir::tools
