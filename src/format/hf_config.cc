#include "format/hf_config.h"

#include <algorithm>
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

// An optional number field that must be finite and > 0; nullopt when absent or null.
Result<std::optional<double>> GetPositive(const Json& cfg, const char* key,
                                          const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(std::optional<double> v, GetOptionalNumber(cfg, key, path));
  if (v && (!std::isfinite(*v) || *v <= 0 || *v > 1e12)) {
    return Status::InvalidArgument(
        StrFormat("%s: field '%s' = %g must be a positive number", path.c_str(), key, *v));
  }
  return v;
}

// The sliding-window layers (see hf_config.h).
Status ReadSlidingWindow(const Json& cfg, const HfArch& hf, const std::string& path,
                         LlamaConfig* c) {
  const char* p = path.c_str();
  const ArchSpec& arch = *hf.arch;
  const int L = c->n_layers;
  std::vector<uint8_t> sliding;  // empty: no sliding layer
  if (const Json* types = FindField(cfg, "layer_types")) {
    if (!types->is_array() || types->size() != static_cast<size_t>(L)) {
      return Status::InvalidArgument(
          StrFormat("%s: field 'layer_types' must be a list of num_hidden_layers = %d entries, "
                    "got %s",
                    p, L, JsonPreview(*types, 80).c_str()));
    }
    for (size_t l = 0; l < types->size(); ++l) {
      const Json& t = (*types)[l];
      const bool slide = t.is_string() && t.get<std::string>() == "sliding_attention";
      const bool full = t.is_string() && t.get<std::string>() == "full_attention";
      if (!slide && !full) {
        return Status::Unsupported(
            StrFormat("%s: layer_types[%zu] = %s; weir computes \"full_attention\" and "
                      "\"sliding_attention\" layers",
                      p, l, JsonPreview(t).c_str()));
      }
      sliding.push_back(slide);
    }
    if (std::find(sliding.begin(), sliding.end(), 1) == sliding.end()) sliding.clear();
  } else if (hf.sliding_window == HfSlidingWindow::kRowPattern) {
    WEIR_ASSIGN_OR_RETURN(std::optional<int64_t> pattern,
                          GetOptionalInt(cfg, "sliding_window_pattern", path));
    const int64_t period = pattern.value_or(arch.sliding_window_period);
    if (period < 0 || period > limits::kMaxLayers) {
      return Status::InvalidArgument(
          StrFormat("%s: field 'sliding_window_pattern' = %lld is "
                    "outside 0..%lld",
                    p, static_cast<long long>(period), static_cast<long long>(limits::kMaxLayers)));
    }
    // transformers: layer l slides when (l + 1) % pattern != 0; 1 = no sliding layer.
    for (int l = 0; l < L && period > 1; ++l) sliding.push_back((l + 1) % period != 0);
  } else if (hf.sliding_window == HfSlidingWindow::kEveryLayer) {
    if (FindField(cfg, "sliding_window") != nullptr) sliding.assign(static_cast<size_t>(L), 1);
  } else {
    WEIR_ASSIGN_OR_RETURN(std::optional<bool> use,
                          GetOptionalBool(cfg, "use_sliding_window", path));
    if (use && *use) {
      return Status::Unsupported(
          StrFormat("%s: use_sliding_window = true without layer_types (sliding layers from "
                    "max_window_layers) is not supported",
                    p));
    }
  }
  if (sliding.empty()) return Status::Ok();
  WEIR_ASSIGN_OR_RETURN(std::optional<int64_t> window, GetOptionalInt(cfg, "sliding_window", path));
  // Left out (not null): the config class's default where the row has one (Gemma 2: 4096).
  if (!window && !cfg.contains("sliding_window") && arch.sliding_window_default > 0) {
    window = arch.sliding_window_default;
  }
  if (!window || *window <= 0 || *window > limits::kMaxContext) {
    return Status::InvalidArgument(
        StrFormat("%s: %s has sliding-window layers, but field 'sliding_window' = %s is not a "
                  "window in 1..%lld",
                  p, hf.architecture, window ? std::to_string(*window).c_str() : "null",
                  static_cast<long long>(limits::kMaxContext)));
  }
  c->sliding_window = static_cast<int>(*window);
  c->layer_sliding = std::move(sliding);
  WEIR_ASSIGN_OR_RETURN(std::optional<double> local,
                        GetPositive(cfg, "rope_local_base_freq", path));
  // The row's sliding base (Gemma 3: 10000), else the global one (Mistral, Gemma 2).
  c->rope_theta_sliding = local                         ? static_cast<float>(*local)
                          : arch.rope_theta_sliding > 0 ? arch.rope_theta_sliding
                                                        : c->rope_theta;
  return Status::Ok();
}

// The mixture-of-experts fields of a MoE row.
Status ReadExperts(const Json& cfg, const HfArch& hf, const std::string& path, LlamaConfig* c) {
  const char* p = path.c_str();
  const char* count_key = FindField(cfg, "num_local_experts") ? "num_local_experts" : "num_experts";
  WEIR_ASSIGN_OR_RETURN(auto n_expert, GetDim(cfg, count_key, limits::kMaxExperts, true, path));
  WEIR_ASSIGN_OR_RETURN(auto n_used,
                        GetDim(cfg, "num_experts_per_tok", limits::kMaxExperts, true, path));
  if (*n_used > *n_expert) {
    return Status::InvalidArgument(StrFormat("%s: num_experts_per_tok %lld exceeds %s %lld", p,
                                             static_cast<long long>(*n_used), count_key,
                                             static_cast<long long>(*n_expert)));
  }
  c->n_expert = static_cast<int>(*n_expert);
  c->n_expert_used = static_cast<int>(*n_used);
  WEIR_ASSIGN_OR_RETURN(std::optional<bool> norm, GetOptionalBool(cfg, "norm_topk_prob", path));
  c->expert_weights_norm = norm.value_or(hf.expert_norm_default);
  WEIR_ASSIGN_OR_RETURN(std::optional<int64_t> step,
                        GetOptionalInt(cfg, "decoder_sparse_step", path));
  if (step && *step != 1) {
    return Status::Unsupported(StrFormat(
        "%s: decoder_sparse_step = %lld (dense MLP layers between MoE layers) is not supported", p,
        static_cast<long long>(*step)));
  }
  if (const Json* dense = FindField(cfg, "mlp_only_layers"); dense && !dense->empty()) {
    return Status::Unsupported(
        StrFormat("%s: mlp_only_layers %s (dense MLP layers in a MoE "
                  "model) is not supported",
                  p, JsonPreview(*dense).c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(std::optional<int64_t> shared,
                        GetOptionalInt(cfg, "shared_expert_intermediate_size", path));
  if (shared && *shared > 0) {
    return Status::Unsupported(
        StrFormat("%s: shared_expert_intermediate_size = %lld; weir computes routed experts only",
                  p, static_cast<long long>(*shared)));
  }
  return Status::Ok();
}

// The values of the row's switches that config.json states.
Status ReadArchValues(const Json& cfg, const HfArch& hf, const std::string& path, LlamaConfig* c) {
  const char* p = path.c_str();
  const ArchSpec& arch = *hf.arch;
  if (arch.embed_scale_sqrt_d) c->embed_scale = std::sqrt(static_cast<float>(c->d_model));
  WEIR_ASSIGN_OR_RETURN(std::optional<double> qpas,
                        GetPositive(cfg, "query_pre_attn_scalar", path));
  if (qpas && *qpas != c->head_dim) c->attn_scale = static_cast<float>(1.0 / std::sqrt(*qpas));
  // Soft-caps: a key left out gets the row's default (Gemma 2's config class: 50 and 30), a
  // null one is off (transformers: `if config.attn_logit_softcapping is not None`).
  struct Cap {
    const char* key;
    bool allowed;
    float fallback;
    float* out;
  };
  const Cap caps[] = {
      {"final_logit_softcapping", arch.logit_softcap, arch.final_softcap_default,
       &c->final_logit_softcap},
      {"attn_logit_softcapping", arch.attn_softcap, arch.attn_softcap_default,
       &c->attn_logit_softcap},
  };
  for (const Cap& k : caps) {
    WEIR_ASSIGN_OR_RETURN(std::optional<double> cap, GetOptionalNumber(cfg, k.key, path));
    if (!cap) {
      if (!cfg.contains(k.key)) *k.out = k.fallback;
      continue;
    }
    if (!std::isfinite(*cap) || *cap < 0) {
      return Status::InvalidArgument(StrFormat("%s: %s %g must be >= 0", p, k.key, *cap));
    }
    if (*cap > 0 && !k.allowed) {
      return Status::Unsupported(
          StrFormat("%s: %s %g is not supported for %s (row %s has no such soft-cap)", p, k.key,
                    *cap, hf.architecture, arch.name));
    }
    *k.out = static_cast<float>(*cap);
  }
  WEIR_RETURN_IF_ERROR(ReadSlidingWindow(cfg, hf, path, c));
  if (arch.moe) WEIR_RETURN_IF_ERROR(ReadExperts(cfg, hf, path, c));
  return Status::Ok();
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

  // Architecture: the first `architectures` entry the HF table knows, else model_type.
  const HfArch* hf = nullptr;
  std::string arch_text = "none";
  if (const Json* archs = FindField(cfg, "architectures")) {
    if (!archs->is_array()) {
      return Status::InvalidArgument(StrFormat("%s: field 'architectures' must be a list, got %s",
                                               p, JsonPreview(*archs).c_str()));
    }
    arch_text = JsonPreview(*archs, 120);
    for (const Json& a : *archs) {
      if (hf == nullptr && a.is_string()) hf = FindHfArch(a.get<std::string>());
    }
  }
  WEIR_ASSIGN_OR_RETURN(std::optional<std::string> model_type,
                        GetOptionalString(cfg, "model_type", path));
  if (hf == nullptr && arch_text == "none" && model_type) hf = FindHfModelType(*model_type);
  if (hf == nullptr) {
    return Status::Unsupported(
        StrFormat("%s: architectures %s (model_type '%s') is not one weir reads; weir reads %s", p,
                  arch_text.c_str(), model_type ? Printable(*model_type).c_str() : "none",
                  HfArchNameList().c_str()));
  }
  const ArchSpec& arch = *hf->arch;

  // Features weir does not implement: refuse rather than compute something else.
  if (const Json* params = FindField(cfg, "rope_parameters")) {
    return Status::Unsupported(
        StrFormat("%s: rope_parameters %s (transformers' newer RoPE form) is not supported; weir "
                  "reads rope_theta",
                  p, JsonPreview(*params, 80).c_str()));
  }
  const bool gelu = arch.activation == Activation::kGeluTanh;
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    WEIR_ASSIGN_OR_RETURN(std::optional<std::string> act, GetOptionalString(cfg, key, path));
    if (!act) continue;
    const bool ok = gelu ? (*act == "gelu_pytorch_tanh" || *act == "gelu_new") : *act == "silu";
    if (!ok) {
      return Status::Unsupported(StrFormat("%s: %s '%s' is not supported for %s (only %s)", p, key,
                                           Printable(*act).c_str(), hf->architecture,
                                           gelu ? "gelu_pytorch_tanh" : "silu"));
    }
  }
  for (const char* key : {"attention_bias", "mlp_bias", "use_bidirectional_attention"}) {
    WEIR_ASSIGN_OR_RETURN(std::optional<bool> b, GetOptionalBool(cfg, key, path));
    if (b && *b) {
      return Status::Unsupported(StrFormat("%s: %s = true is not supported", p, key));
    }
  }
  HfLlamaConfig out;
  out.hf = hf;
  LlamaConfig& c = out.config;
  c.arch = &arch;
  WEIR_ASSIGN_OR_RETURN(auto d_model, GetDim(cfg, "hidden_size", limits::kMaxModelDim, true, path));
  // A MoE row's d_ff is its experts' width (moe_intermediate_size where stated: Qwen3-MoE).
  const bool moe_ff = arch.moe && FindField(cfg, "moe_intermediate_size") != nullptr;
  WEIR_ASSIGN_OR_RETURN(auto d_ff,
                        GetDim(cfg, moe_ff ? "moe_intermediate_size" : "intermediate_size",
                               limits::kMaxFfnDim, true, path));
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
  // partial_rotary_factor (Phi-4-mini: 0.75): RoPE turns the first head_dim * factor dims of
  // each head (transformers: int(head_dim * factor)), on halves of those.
  WEIR_ASSIGN_OR_RETURN(std::optional<double> partial,
                        GetOptionalNumber(cfg, "partial_rotary_factor", path));
  if (partial) {
    const double dims = std::floor(c.head_dim * *partial);
    if (!std::isfinite(*partial) || *partial <= 0 || *partial > 1 || dims < 2 ||
        static_cast<int>(dims) % 2 != 0) {
      return Status::InvalidArgument(
          StrFormat("%s: partial_rotary_factor %g gives %g rotated dims of head_dim %d; weir "
                    "needs an even number in 2..head_dim",
                    p, *partial, dims, c.head_dim));
    }
    c.rope_dim = static_cast<int>(dims);
  }

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
  WEIR_RETURN_IF_ERROR(ReadArchValues(cfg, *hf, path, &c));

  WEIR_ASSIGN_OR_RETURN(std::optional<bool> tie, GetOptionalBool(cfg, "tie_word_embeddings", path));
  // Left out: the config class's default (true for Gemma 2, whose row's head is tied).
  out.tie_word_embeddings = tie.value_or(arch.tied_head);
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
