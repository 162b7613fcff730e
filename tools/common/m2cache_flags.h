// `--m2cache SPEC` of weir run, ppl and bench: the MLP computed as M2Cache does it (paper 004
// §5.2-5.3, docs/m2cache.md): neurons predicted per token by a low-rank predictor, the best at a
// high precision and the next at a low one, from per-layer ATU cache units. SPEC is
// m2cache/mix_config.h's key=value list, plus `plan=FILE`: the ratios, types and rank a
// `weir m2search` wrote (keys after it override the file's).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "m2cache/file_source.h"
#include "m2cache/mixed_mlp.h"
#include "model/model.h"
#include "model/session.h"

namespace weir::tools {

struct M2CacheFlags {
  std::string spec;  // empty = off
  // Filled by ParseM2CacheFlags / BuildM2Cache.
  m2cache::MixConfig config;
  std::string plan_path;
  std::string calib_path;  // calib=FILE: text whose first calib_tokens tokens fit the predictors
  int calib_tokens = 2048;
  std::unique_ptr<m2cache::M2Weights> weights;
  // store=FILE (`weir m2store`): the neuron store streamed from that file by the SSD tier
  // (m2cache/file_source.h) under `memory` (--memory, "" = all of it resident), read with the
  // --storage device; window=N layers preloaded ahead (default 2).
  std::string store_path;
  int window = 2;
  std::string memory;
  std::string storage = "pread";
  std::unique_ptr<storage::BlockDevice> store_device;  // outlives store_source
  std::unique_ptr<m2cache::FileSource> store_source;
  std::string store_line;  // "m2cache store FILE: ... budget ...", for the start of a run
  bool enabled() const { return !spec.empty(); }
};

void AddM2CacheFlags(CLI::App& app, M2CacheFlags* flags);
// With store=FILE, --memory bounds the store's DRAM (not a weir pack's): moves *memory (the
// --memory flag) and the --storage choice into flags. Call after ParseM2CacheFlags.
void ClaimM2CacheMemory(M2CacheFlags* flags, std::string* memory, const std::string& storage);
// Reads the plan (plan=FILE) and parses the spec into flags->config.
Status ParseM2CacheFlags(M2CacheFlags* flags);
// A plan written by `weir m2search -o`: the best ratios and what they were searched with.
struct M2CachePlan {
  double r_high = 0, r_low = 0;
  std::string hi, lo, predictor = "lowrank", calib;
  int rank = 0;
  // The --m2cache spec it stands for ("high=..,low=..,hi=..,lo=..,rank=..,predictor=..[,calib=..]").
  std::string Spec() const;
};
Result<M2CachePlan> ReadM2CachePlan(const std::string& path);
// The first `max_tokens` tokens of a calibration text (an error when it has none).
Result<std::vector<int32_t>> ReadCalibrationTokens(const model::Model& model, const std::string& path, int max_tokens);
// Builds the neuron store and predictors of a loaded model (seconds; progress on stderr when
// `progress`), fitted on the calib= text when given, and points `options` at them; with
// store=FILE opens the file instead (its types, rank and predictors) and streams it.
Status BuildM2Cache(M2CacheFlags* flags, const model::Model& model, ThreadPool* pool, bool progress,
                    model::SessionOptions* options);

// Counters per token for --stats and --json: neurons per layer at each precision, recall, and the
// bytes each tier moved.
nlohmann::json M2StatsJson(const m2cache::MixedMlp& mlp, uint64_t tokens);
std::string FormatM2Stats(const m2cache::MixedMlp& mlp, uint64_t tokens);

}  // namespace weir::tools
