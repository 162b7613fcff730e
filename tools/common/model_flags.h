// Flags shared by the commands that load and run a model (-m, -t, -c, --tokenizer, sampling),
// declared once here so every command spells them the same way (llama.cpp's spellings).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "base/status.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/sampler.h"
#include "sparsity/calibration.h"
#include "sparsity/policy.h"

namespace weir::tools {

struct ModelFlags {
  std::string model;
  std::string tokenizer;
  int threads = 0;  // 0 = all cores
  int ctx = 0;      // 0 = the model's context length
  // --cache-type-k / --cache-type-v (-ctk / -ctv): F16 unless asked, as llama.cpp.
  model::KvTypes kv_types{DType::kF16, DType::kF16};
  bool mmap = false;  // read the weights in place from the mapped file (no copy at load)
  // Not a flag: commands that run dense sessions only set it, so that the copied weights are
  // tiled for the dense products (format::LoadOptions::tile_linear).
  bool tile = false;
  // Not a flag: threads for copying the weights at load (the command's pool), or nullptr.
  ThreadPool* pool = nullptr;
};

void AddModelFlags(CLI::App& app, ModelFlags* flags, bool with_ctx = true);
Result<std::unique_ptr<model::Model>> LoadModel(const ModelFlags& flags);
int ThreadCount(const ModelFlags& flags);

struct SamplingFlags {
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  int64_t seed = -1;  // -1 = from the clock
  float presence_penalty = 0;
  float frequency_penalty = 0;
};

void AddSamplingFlags(CLI::App& app, SamplingFlags* flags);
model::SamplerOptions ToSamplerOptions(const SamplingFlags& flags);

// --sparsity NAME:DENSITY[,k=v] and --calib FILE (docs/sparsity.md).
struct SparsityFlags {
  std::string spec;   // empty = dense
  std::string calib;  // calibration file from `weir calibrate`
  // Filled by ParseSparsityFlags; the policy may point into calibration.
  std::unique_ptr<sparsity::Calibration> calibration;
  std::unique_ptr<sparsity::SparsityPolicy> policy;
};
void AddSparsityFlags(CLI::App& app, SparsityFlags* flags);
Status ParseSparsityFlags(SparsityFlags* flags);

}  // namespace weir::tools
