#include "format/hf_config.h"

#include <cmath>

#include "base/printable.h"
#include "format/json_util.h"
#include "format/llama_limits.h"
#include "format/rope_scaling.h"

namespace weir::format {

namespace {

// An integer field in 1..max; `required` decides whether absence is an error.
Result<std::optional<int64_t>> GetDim(const Json& cfg, const char* key, int64_t max, bool required,
                                      const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(std::optional<int64_t> v, GetOptionalInt(cfg, key, path));
  if (!v) {
    if (required) {
      return Status::InvalidArgument(
          StrFormat("%s: missing required field '%s'", path.c_str(), key));
    }
    return v;
  }
  if (*v <= 0 || *v > max) {
    return Status::InvalidArgument(StrFormat("%s: field '%s' = %lld is outside 1..%lld",
                                             path.c_str(), key, static_cast<long long>(*v),
                                             static_cast<long long>(max)));
  }
  return v;
}

Result<int32_t> GetTokenId(const Json& cfg, const char* key, const std::string& path) {
  const Json* v = FindField(cfg, key);
  if (!v) return -1;
  const Json* first = v;
  if (v->is_array()) {
    if (v->empty()) return -1;
    first = &(*v)[0];
  }
  int64_t id;
  if (!JsonToInt64(*first, &id) || id < 0 || id >= limits::kMaxVocabSize) {
    return Status::InvalidArgument(
        StrFormat("%s: field '%s' must be a token id (or a list of "
                  "ids) in 0..%lld, got %s",
                  path.c_str(), key, static_cast<long long>(limits::kMaxVocabSize - 1),
                  JsonPreview(*v).c_str()));
  }
  return static_cast<int32_t>(id);
}

// rope_scaling (transformers' names; "type" is the older spelling of "rope_type"):
//   null, or rope_type "default"        plain RoPE
//   "linear", factor F                  positions divided by F (config.rope_scaling_factor)
//   "llama3", factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
//                                       Llama 3.1's per-pair factors (format/rope_scaling.h),
//                                       which the reader adds as rope_freqs.weight
// Other types (dynamic, yarn, longrope, ...) are refused by name.
Status ReadRopeScaling(const Json& cfg, const std::string& path, double theta,
                       HfLlamaConfig* out) {
  const char* p = path.c_str();
  const Json* scaling = FindField(cfg, "rope_scaling");
  if (scaling == nullptr) return Status::Ok();
  if (!scaling->is_object()) {
    return Status::InvalidArgument(StrFormat("%s: rope_scaling must be an object or null, got %s",
                                             p, JsonPreview(*scaling, 80).c_str()));
  }
  const std::string where = path + " rope_scaling";
  WEIR_ASSIGN_OR_RETURN(std::optional<std::string> type,
                        GetOptionalString(*scaling, "rope_type", where));
  if (!type) {
    WEIR_ASSIGN_OR_RETURN(type, GetOptionalString(*scaling, "type", where));
  }
  if (!type) {
    return Status::InvalidArgument(StrFormat("%s: rope_scaling %s names no rope_type", p,
                                             JsonPreview(*scaling, 80).c_str()));
  }
  // A required positive number of the rope_scaling object.
  auto number = [&](const char* key) -> Result<double> {
    WEIR_ASSIGN_OR_RETURN(std::optional<double> v, GetOptionalNumber(*scaling, key, where));
    if (!v) {
      return Status::InvalidArgument(StrFormat("%s: rope_scaling of type '%s' needs field '%s'",
                                               p, type->c_str(), key));
    }
    if (!std::isfinite(*v) || *v <= 0) {
      return Status::InvalidArgument(
          StrFormat("%s: rope_scaling.%s = %g must be finite and > 0", p, key, *v));
    }
    return *v;
  };
  LlamaConfig& c = out->config;
  if (*type == "default") return Status::Ok();
  if (*type == "linear") {
    WEIR_ASSIGN_OR_RETURN(double factor, number("factor"));
    c.rope_scaling_factor = static_cast<float>(factor);
    return Status::Ok();
  }
  if (*type == "llama3") {
    Llama3RopeScaling l3;
    WEIR_ASSIGN_OR_RETURN(l3.factor, number("factor"));
    WEIR_ASSIGN_OR_RETURN(l3.low_freq_factor, number("low_freq_factor"));
    WEIR_ASSIGN_OR_RETURN(l3.high_freq_factor, number("high_freq_factor"));
    WEIR_ASSIGN_OR_RETURN(l3.original_max_position_embeddings,
                          number("original_max_position_embeddings"));
    WEIR_ASSIGN_OR_RETURN(out->rope_freqs, Llama3RopeFreqs(l3, theta, c.rope_dim, where));
    return Status::Ok();
  }
  return Status::Unsupported(
      StrFormat("%s: rope_scaling type '%s' is not supported (weir implements null, 'default', "
                "'linear' and 'llama3')",
                p, Printable(*type).c_str()));
}

}  // namespace

Result<HfLlamaConfig> ParseHfLlamaConfig(std::string_view json_text, const std::string& path) {
  const char* p = path.c_str();
  WEIR_ASSIGN_OR_RETURN(Json cfg, ParseJsonText(json_text, path));
  if (!cfg.is_object()) {
    return Status::InvalidArgument(
        StrFormat("%s: top level must be a JSON object, got %s", p, JsonTypeName(cfg)));
  }

  // Architecture.
  bool is_llama = false;
  std::string arch_text = "none";
  if (const Json* archs = FindField(cfg, "architectures")) {
    if (!archs->is_array()) {
      return Status::InvalidArgument(StrFormat("%s: field 'architectures' must be a list, got %s",
                                               p, JsonPreview(*archs).c_str()));
    }
    arch_text = JsonPreview(*archs, 120);
    for (const Json& a : *archs) {
      if (a.is_string() && a.get<std::string>() == "LlamaForCausalLM") is_llama = true;
    }
  }
  WEIR_ASSIGN_OR_RETURN(std::optional<std::string> model_type,
                        GetOptionalString(cfg, "model_type", path));
  if (model_type && *model_type == "llama") is_llama = true;
  if (!is_llama) {
    return Status::Unsupported(
        StrFormat("%s: not a Llama model (architectures %s, model_type '%s'); weir reads "
                  "LlamaForCausalLM",
                  p, arch_text.c_str(), model_type ? Printable(*model_type).c_str() : "none"));
  }

  // Features weir does not implement: refuse rather than compute something else.
  WEIR_ASSIGN_OR_RETURN(std::optional<std::string> act, GetOptionalString(cfg, "hidden_act", path));
  if (act && *act != "silu") {
    return Status::Unsupported(
        StrFormat("%s: hidden_act '%s' is not supported (only silu)", p, Printable(*act).c_str()));
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    WEIR_ASSIGN_OR_RETURN(std::optional<bool> b, GetOptionalBool(cfg, key, path));
    if (b && *b) {
      return Status::Unsupported(StrFormat("%s: %s = true is not supported", p, key));
    }
  }

  HfLlamaConfig out;
  LlamaConfig& c = out.config;
  WEIR_ASSIGN_OR_RETURN(auto d_model, GetDim(cfg, "hidden_size", limits::kMaxModelDim, true, path));
  WEIR_ASSIGN_OR_RETURN(auto d_ff,
                        GetDim(cfg, "intermediate_size", limits::kMaxFfnDim, true, path));
  WEIR_ASSIGN_OR_RETURN(auto n_layers,
                        GetDim(cfg, "num_hidden_layers", limits::kMaxLayers, true, path));
  WEIR_ASSIGN_OR_RETURN(auto n_head,
                        GetDim(cfg, "num_attention_heads", limits::kMaxHeads, true, path));
  WEIR_ASSIGN_OR_RETURN(auto n_head_kv,
                        GetDim(cfg, "num_key_value_heads", limits::kMaxHeads, false, path));
  WEIR_ASSIGN_OR_RETURN(auto head_dim, GetDim(cfg, "head_dim", limits::kMaxHeadDim, false, path));
  WEIR_ASSIGN_OR_RETURN(auto vocab, GetDim(cfg, "vocab_size", limits::kMaxVocabSize, true, path));
  WEIR_ASSIGN_OR_RETURN(auto ctx,
                        GetDim(cfg, "max_position_embeddings", limits::kMaxContext, false, path));
  c.d_model = static_cast<int>(*d_model);
  c.d_ff = static_cast<int>(*d_ff);
  c.n_layers = static_cast<int>(*n_layers);
  c.n_head = static_cast<int>(*n_head);
  c.n_head_kv = static_cast<int>(n_head_kv.value_or(*n_head));
  if (head_dim) {
    c.head_dim = static_cast<int>(*head_dim);
  } else {
    if (c.d_model % c.n_head != 0) {
      return Status::InvalidArgument(StrFormat(
          "%s: hidden_size %d is not a multiple of num_attention_heads %d and head_dim is not "
          "given",
          p, c.d_model, c.n_head));
    }
    c.head_dim = c.d_model / c.n_head;
  }
  if (c.n_head % c.n_head_kv != 0) {
    return Status::InvalidArgument(
        StrFormat("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", p,
                  c.n_head, c.n_head_kv));
  }
  c.vocab_size = static_cast<int>(*vocab);
  c.ctx_len = static_cast<int>(ctx.value_or(0));
  c.rope_dim = c.head_dim;
  c.rope_style = RopeStyle::kRotateHalf;

  WEIR_ASSIGN_OR_RETURN(std::optional<double> eps, GetOptionalNumber(cfg, "rms_norm_eps", path));
  WEIR_ASSIGN_OR_RETURN(std::optional<double> theta, GetOptionalNumber(cfg, "rope_theta", path));
  double eps_v = eps.value_or(1e-6), theta_v = theta.value_or(10000.0);
  if (!std::isfinite(eps_v) || eps_v <= 0 || eps_v >= 1) {
    return Status::InvalidArgument(StrFormat("%s: rms_norm_eps %g must be in (0, 1)", p, eps_v));
  }
  if (!std::isfinite(theta_v) || theta_v <= 1 || theta_v > 1e12) {
    return Status::InvalidArgument(StrFormat("%s: rope_theta %g must be in (1, 1e12]", p, theta_v));
  }
  c.rms_eps = static_cast<float>(eps_v);
  c.rope_theta = static_cast<float>(theta_v);
  WEIR_RETURN_IF_ERROR(ReadRopeScaling(cfg, path, theta_v, &out));
  c.layers.assign(c.n_layers, LayerDims{c.n_head, c.n_head_kv, c.d_ff});

  WEIR_ASSIGN_OR_RETURN(std::optional<bool> tie, GetOptionalBool(cfg, "tie_word_embeddings", path));
  out.tie_word_embeddings = tie.value_or(false);
  out.tie_word_embeddings_stated = tie.has_value();
  WEIR_ASSIGN_OR_RETURN(out.bos_token_id, GetTokenId(cfg, "bos_token_id", path));
  WEIR_ASSIGN_OR_RETURN(out.eos_token_id, GetTokenId(cfg, "eos_token_id", path));

  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const Json& v = it.value();
    if (v.is_string()) {
      out.metadata.emplace_back("hf." + it.key(), v.get<std::string>());
    } else if (v.is_primitive()) {
      out.metadata.emplace_back("hf." + it.key(), JsonPreview(v, 200));
    }
  }
  return out;
}

}  // namespace weir::format
