#include "common/model_flags.h"

#include <chrono>
#include <optional>
#include <thread>

namespace weir::tools {

void AddModelFlags(CLI::App& app, ModelFlags* f, bool with_ctx) {
  app.add_option("-m,--model", f->model,
                 "model: a .gguf file, a llama2.c .bin checkpoint, or a Hugging Face folder / "
                 ".safetensors file with config.json beside it")
      ->required();
  app.add_option("--tokenizer", f->tokenizer,
                 "tokenizer file to use instead of the one found with the model "
                 "(tokenizer.bin or tokenizer.json)");
  app.add_option("-t,--threads", f->threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  app.add_flag("--mmap", f->mmap,
               "read the weights in place from the mapped file instead of copying them into memory "
               "at load (starts sooner, decodes slower; the copy is made only when the weights fit "
               "in 3/4 of the available memory; docs/performance.md)");
  if (with_ctx) {
    app.add_option("-c,--ctx-size", f->ctx, "context size in tokens (default: the model's, max 4096)")
        ->check(CLI::Range(0, 1 << 20));
    const CLI::Validator kv_type(
        [](std::string& name) -> std::string {
          const std::optional<DType> t = DTypeFromName(name);
          if (!t) return "unknown type '" + name + "' (f32, f16, bf16, q8_0, q5_0, q4_0, ...)";
          if (Traits(*t).quantize_row == nullptr) return std::string(DTypeName(*t)) + " has no quantizer";
          return std::string();
        },
        "TYPE");
    app.add_option_function<std::string>(
           "--cache-type-k", [f](const std::string& name) { f->kv_types.k = *DTypeFromName(name); },
           "type of the cached keys (-ctk): f16 (default), f32, bf16, q8_0, q5_0, q4_0, or any type "
           "whose block divides the head dimension; counted at its size in --memory (docs/long-context.md)")
        ->check(kv_type);
    app.add_option_function<std::string>(
           "--cache-type-v", [f](const std::string& name) { f->kv_types.v = *DTypeFromName(name); },
           "type of the cached values (-ctv), as --cache-type-k")
        ->check(kv_type);
  }
}

Result<std::unique_ptr<model::Model>> LoadModel(const ModelFlags& f) {
  format::LoadOptions opt;
  opt.tokenizer_path = f.tokenizer;
  opt.placement = f.mmap ? format::WeightPlacement::kMapped : format::WeightPlacement::kAuto;
  opt.tile_linear = f.tile;
  opt.pool = f.pool;
  return model::Model::Load(f.model, opt);
}

int ThreadCount(const ModelFlags& f) {
  if (f.threads > 0) return f.threads;
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}

void AddSamplingFlags(CLI::App& app, SamplingFlags* f) {
  app.add_option("--temp", f->temp, "temperature; 0 = greedy (default 0.8)");
  app.add_option("--top-k", f->top_k, "keep the k most likely tokens; 0 = off (default 40)");
  app.add_option("--top-p", f->top_p, "nucleus sampling threshold; 1 = off (default 0.95)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", f->seed, "random seed; -1 = from the clock (default -1)");
  app.add_option("--presence-penalty", f->presence_penalty,
                 "subtracted from the logit of every token already generated (default 0)")
      ->check(CLI::Range(-2.0, 2.0));
  app.add_option("--frequency-penalty", f->frequency_penalty,
                 "subtracted from a token's logit once per time it was generated (default 0)")
      ->check(CLI::Range(-2.0, 2.0));
}

model::SamplerOptions ToSamplerOptions(const SamplingFlags& f) {
  model::SamplerOptions o;
  o.temp = f.temp;
  o.top_k = f.top_k;
  o.top_p = f.top_p;
  o.presence_penalty = f.presence_penalty;
  o.frequency_penalty = f.frequency_penalty;
  o.seed = f.seed >= 0 ? static_cast<uint64_t>(f.seed)
                       : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return o;
}

void AddSparsityFlags(CLI::App& app, SparsityFlags* f) {
  app.add_option("--sparsity", f->spec,
                 "dynamic activation sparsity NAME:DENSITY[,k=v]: dense, glu, gate, up, cats, teal, "
                 "topk-all, dip, dip-ca (docs/sparsity.md)");
  app.add_option("--calib", f->calib, "calibration file from `weir calibrate` (needed by cats, teal)");
}

Status ParseSparsityFlags(SparsityFlags* f) {
  if (!f->calib.empty()) {
    WEIR_ASSIGN_OR_RETURN(auto c, sparsity::Calibration::Load(f->calib));
    f->calibration = std::make_unique<sparsity::Calibration>(std::move(c));
  }
  if (f->spec.empty()) return Status::Ok();
  WEIR_ASSIGN_OR_RETURN(f->policy, sparsity::ParseSparsity(f->spec, f->calibration.get()));
  return Status::Ok();
}

}  // namespace weir::tools
