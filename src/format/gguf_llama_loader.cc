// Loading a model from a parsed GGUF file: general.architecture picks the ArchSpec row
// (format/arch_spec.h), whose name prefixes every hyperparameter key (llama.*, gemma3.*, ...;
// uniform or per-layer), then the tokenizer.ggml.* vocabulary and views of the tensors in the
// mapping. Which tensors are read, and their shapes, is the row's tensor table.
#include <cmath>
#include <limits>
#include <set>

#include "base/printable.h"
#include "format/gguf_reader.h"
#include "format/llama_limits.h"

namespace weir::format {

namespace {

namespace lim = limits;
constexpr uint32_t kNoToken = std::numeric_limits<uint32_t>::max();

// An integer key in [lo, hi]; `def` when absent (or NotFound when there is no default).
Result<int> GetInt(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi,
                   std::optional<int> def = std::nullopt) {
  if (!f.Has(key)) {
    if (def) return *def;
    return Status::NotFound(
        StrFormat("%s: metadata key '%s' is missing", f.path().c_str(), key.c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(int64_t v, f.GetI64(key));
  if (v < lo || v > hi) {
    return Status::InvalidArgument(StrFormat(
        "%s: metadata '%s' = %lld is out of range [%lld, %lld]", f.path().c_str(), key.c_str(),
        static_cast<long long>(v), static_cast<long long>(lo), static_cast<long long>(hi)));
  }
  return static_cast<int>(v);
}

// A key that is either one integer for every layer or an array of n_layers integers.
// Returns nullopt when absent.
Result<std::optional<std::vector<int>>> GetPerLayer(const GgufFile& f, const std::string& key,
                                                    int n_layers, int64_t lo, int64_t hi,
                                                    const std::string& count_key) {
  const GgufKv* kv = f.FindKv(key);
  if (!kv) return std::optional<std::vector<int>>();
  if (kv->type != GgufType::kArray) {
    WEIR_ASSIGN_OR_RETURN(int v, GetInt(f, key, lo, hi));
    return std::optional<std::vector<int>>(std::vector<int>(static_cast<size_t>(n_layers), v));
  }
  if (kv->count != static_cast<uint64_t>(n_layers)) {
    return Status::InvalidArgument(StrFormat(
        "%s: metadata '%s' has %llu per-layer values, expected %s = %d", f.path().c_str(),
        key.c_str(), static_cast<unsigned long long>(kv->count), count_key.c_str(), n_layers));
  }
  WEIR_ASSIGN_OR_RETURN(std::vector<int64_t> vals, f.GetI64Array(key));
  std::vector<int> out(vals.size());
  for (size_t i = 0; i < vals.size(); ++i) {
    if (vals[i] < lo || vals[i] > hi) {
      return Status::InvalidArgument(
          StrFormat("%s: metadata '%s'[%zu] = %lld is out of range [%lld, %lld]", f.path().c_str(),
                    key.c_str(), i, static_cast<long long>(vals[i]), static_cast<long long>(lo),
                    static_cast<long long>(hi)));
    }
    out[i] = static_cast<int>(vals[i]);
  }
  return std::optional<std::vector<int>>(std::move(out));
}

Result<float> GetPositiveFloat(const GgufFile& f, const std::string& key,
                               std::optional<float> def) {
  if (!f.Has(key)) {
    if (def) return *def;
    return Status::NotFound(
        StrFormat("%s: metadata key '%s' is missing", f.path().c_str(), key.c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(float v, f.GetF32(key));
  if (!std::isfinite(v) || v <= 0.0f) {
    return Status::InvalidArgument(
        StrFormat("%s: metadata '%s' = %g, expected a positive finite number", f.path().c_str(),
                  key.c_str(), static_cast<double>(v)));
  }
  return v;
}

// An optional float key >= 0; `def` when absent.
Result<float> GetNonNegativeFloat(const GgufFile& f, const std::string& key, float def) {
  if (!f.Has(key)) return def;
  WEIR_ASSIGN_OR_RETURN(float v, f.GetF32(key));
  if (!std::isfinite(v) || v < 0.0f) {
    return Status::InvalidArgument(
        StrFormat("%s: metadata '%s' = %g, expected a finite number >= 0", f.path().c_str(),
                  key.c_str(), static_cast<double>(v)));
  }
  return v;
}

// Optional token id: absent, u32 max or negative mean "none" (-1).
Result<int32_t> GetTokenId(const GgufFile& f, const std::string& key, size_t n_tokens) {
  if (!f.Has(key)) return -1;
  WEIR_ASSIGN_OR_RETURN(int64_t v, f.GetI64(key));
  if (v < 0 || v == kNoToken) return -1;
  if (static_cast<uint64_t>(v) >= n_tokens) {
    return Status::InvalidArgument(
        StrFormat("%s: metadata '%s' = %lld is not a token id (the vocabulary has %zu tokens)",
                  f.path().c_str(), key.c_str(), static_cast<long long>(v), n_tokens));
  }
  return static_cast<int32_t>(v);
}

Result<bool> GetBoolOr(const GgufFile& f, const std::string& key, bool def) {
  if (!f.Has(key)) return def;
  return f.GetBool(key);
}

// Names of the tensors the architecture's forward pass reads (its tensor table), fused tensors
// and their parts alike.
std::set<std::string> NeededTensors(const ArchSpec& arch, int n_layers) {
  std::set<std::string> names;
  for (const TensorSpec& t : arch.tensors) {
    if (!t.per_layer) names.insert(TensorName(t, -1));
    for (int l = 0; t.per_layer && l < n_layers; ++l) names.insert(TensorName(t, l));
  }
  for (const StoredTensor& s : StoredTensors(arch)) {
    if (!s.per_layer()) names.insert(StoredTensorName(s, -1));
    for (int l = 0; s.per_layer() && l < n_layers; ++l) names.insert(StoredTensorName(s, l));
  }
  return names;
}

// The sliding-window layers of a file whose architecture has them: `<arch>.attention.
// sliding_window` (> 0; when absent, the row's default, 4096 for gemma2 as in llama.cpp) turns
// them on; `<arch>.attention.sliding_window_pattern` is either one bool per layer (true =
// sliding) or a period n (layer l slides when l % n < n - 1; 0 = every layer), else the row's
// period. Sliding layers rotate with `<arch>.rope.freq_base_swa`, else the row's base (gemma3's
// 10000), else the global one (gemma2).
Status ReadSlidingWindow(const GgufFile& f, const ArchSpec& arch, const std::string& prefix,
                         LlamaConfig* c) {
  const std::string window_key = prefix + ".attention.sliding_window";
  if (arch.sliding_window_period == 0) return Status::Ok();
  if (!f.Has(window_key) && arch.sliding_window_default == 0) return Status::Ok();
  WEIR_ASSIGN_OR_RETURN(c->sliding_window, GetInt(f, window_key, 0, lim::kMaxContext,
                                                  arch.sliding_window_default));
  if (c->sliding_window == 0) return Status::Ok();
  const int L = c->n_layers;
  c->layer_sliding.assign(static_cast<size_t>(L), 0);
  const std::string pattern_key = prefix + ".attention.sliding_window_pattern";
  const GgufKv* kv = f.FindKv(pattern_key);
  if (kv != nullptr && kv->type == GgufType::kArray) {
    if (kv->count != static_cast<uint64_t>(L)) {
      return Status::InvalidArgument(StrFormat(
          "%s: metadata '%s' has %llu per-layer values, expected %s.block_count = %d",
          f.path().c_str(), pattern_key.c_str(), static_cast<unsigned long long>(kv->count),
          prefix.c_str(), L));
    }
    if (kv->elem_type == GgufType::kBool) {  // one validated byte (0 or 1) per layer
      for (int l = 0; l < L; ++l) c->layer_sliding[static_cast<size_t>(l)] = f.data()[kv->value_offset + l];
    } else {
      WEIR_ASSIGN_OR_RETURN(std::vector<int64_t> flags, f.GetI64Array(pattern_key));
      for (int l = 0; l < L; ++l) c->layer_sliding[static_cast<size_t>(l)] = flags[l] != 0;
    }
  } else {
    WEIR_ASSIGN_OR_RETURN(int period, GetInt(f, pattern_key, 0, lim::kMaxLayers,
                                             arch.sliding_window_period));
    for (int l = 0; l < L; ++l) {
      c->layer_sliding[static_cast<size_t>(l)] = period == 0 || l % period < period - 1;
    }
  }
  const float theta_swa = arch.rope_theta_sliding > 0 ? arch.rope_theta_sliding : c->rope_theta;
  WEIR_ASSIGN_OR_RETURN(c->rope_theta_sliding,
                        GetPositiveFloat(f, prefix + ".rope.freq_base_swa", theta_swa));
  return Status::Ok();
}

// The router's hyperparameters of a mixture-of-experts row: how many experts, how many each
// token uses, and how their weights are normalised. What weir does not compute (shared experts,
// a gating function other than softmax) is refused by name.
Status ReadExperts(const GgufFile& f, const std::string& prefix, LlamaConfig* c) {
  const char* path = f.path().c_str();
  const std::string count_key = prefix + ".expert_count", used_key = prefix + ".expert_used_count";
  WEIR_ASSIGN_OR_RETURN(c->n_expert, GetInt(f, count_key, 0, lim::kMaxExperts));
  if (c->n_expert == 0) {
    return Status::InvalidArgument(
        StrFormat("%s: metadata '%s' = 0, but %s is a mixture-of-experts architecture (its MLP "
                  "needs at least one expert)",
                  path, count_key.c_str(), prefix.c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(c->n_expert_used, GetInt(f, used_key, 1, lim::kMaxExperts));
  if (c->n_expert_used > c->n_expert) {
    return Status::InvalidArgument(StrFormat("%s: metadata '%s' = %d exceeds '%s' = %d", path,
                                             used_key.c_str(), c->n_expert_used,
                                             count_key.c_str(), c->n_expert));
  }
  WEIR_ASSIGN_OR_RETURN(c->expert_weights_norm,
                        GetBoolOr(f, prefix + ".expert_weights_norm", true));
  WEIR_ASSIGN_OR_RETURN(int shared,
                        GetInt(f, prefix + ".expert_shared_count", 0, lim::kMaxExperts, 0));
  if (shared != 0) {
    return Status::Unsupported(StrFormat("%s: metadata '%s.expert_shared_count' = %d; weir "
                                         "computes routed experts only (no shared experts)",
                                         path, prefix.c_str(), shared));
  }
  // llama.cpp's gating functions: 1 = softmax, 2 = sigmoid.
  WEIR_ASSIGN_OR_RETURN(int gating, GetInt(f, prefix + ".expert_gating_func", 0, 1 << 20, 1));
  if (gating != 1) {
    return Status::Unsupported(StrFormat("%s: metadata '%s.expert_gating_func' = %d; weir "
                                         "routes with softmax (1) only",
                                         path, prefix.c_str(), gating));
  }
  return Status::Ok();
}

// RoPE scaling as llama.cpp reads it: <prefix>.rope.scaling.type defaults to "linear", whose
// factor is <prefix>.rope.scaling.factor (or the older rope.scale_linear; absent or 0 = none);
// "none" ignores any factor. Other types (yarn, longrope) and a yarn-style attention factor are
// refused by name rather than computed as plain RoPE.
Status ReadRopeScaling(const GgufFile& f, const std::string& prefix, LlamaConfig* c) {
  const char* path = f.path().c_str();
  const std::string type_key = prefix + ".rope.scaling.type";
  std::string type = "linear";
  if (f.Has(type_key)) {
    WEIR_ASSIGN_OR_RETURN(type, f.GetString(type_key));
  }
  if (type != "none" && type != "linear") {
    return Status::Unsupported(
        StrFormat("%s: %s is '%s'; weir implements 'none' and 'linear' RoPE scaling (and Llama "
                  "3.1's rope_freqs.weight), not YaRN, LongRoPE or others",
                  path, type_key.c_str(), Printable(type, 32).c_str()));
  }
  std::string factor_key = prefix + ".rope.scaling.factor";
  if (!f.Has(factor_key)) factor_key = prefix + ".rope.scale_linear";
  float factor = 0.0f;
  if (f.Has(factor_key)) {
    WEIR_ASSIGN_OR_RETURN(factor, f.GetF32(factor_key));
    if (!std::isfinite(factor) || factor < 0.0f) {
      return Status::InvalidArgument(
          StrFormat("%s: metadata '%s' = %g, expected a finite number >= 0 (0 = no scaling)", path,
                    factor_key.c_str(), static_cast<double>(factor)));
    }
  }
  c->rope_scaling_factor = type == "linear" && factor > 0.0f ? factor : 1.0f;
  const std::string attn_key = prefix + ".rope.scaling.attn_factor";
  if (f.Has(attn_key)) {
    WEIR_ASSIGN_OR_RETURN(float attn_factor, f.GetF32(attn_key));
    if (attn_factor != 1.0f) {
      return Status::Unsupported(
          StrFormat("%s: metadata '%s' = %g; weir implements RoPE without a magnitude factor (1)",
                    path, attn_key.c_str(), static_cast<double>(attn_factor)));
    }
  }
  return Status::Ok();
}

size_t NaturalAlignment(DType t) { return t == DType::kF32 ? 4 : 2; }

}  // namespace

Result<LlamaConfig> ReadGgufLlamaConfig(const GgufFile& f) {
  const char* path = f.path().c_str();
  WEIR_ASSIGN_OR_RETURN(std::string arch_name, f.GetString("general.architecture"));
  // A stated expert count > 0 picks the mixture-of-experts row of a GGUF name that has one
  // (llama -> mixtral).
  WEIR_ASSIGN_OR_RETURN(int stated_experts,
                        GetInt(f, arch_name + ".expert_count", 0, lim::kMaxExperts, 0));
  const ArchSpec* arch = FindGgufArch(arch_name, stated_experts > 0);
  if (arch == nullptr) {
    return Status::Unsupported(StrFormat("%s: general.architecture is '%s'; weir loads %s", path,
                                         Printable(arch_name, 64).c_str(),
                                         GgufArchNameList().c_str()));
  }
  // Every hyperparameter key is prefixed with the architecture's GGUF name.
  const std::string prefix = arch->gguf_name;
  auto K = [&](const char* key) { return prefix + "." + key; };
  LlamaConfig c;
  c.arch = arch;
  WEIR_ASSIGN_OR_RETURN(c.d_model, GetInt(f, K("embedding_length"), 1, lim::kMaxModelDim));
  WEIR_ASSIGN_OR_RETURN(c.n_layers, GetInt(f, K("block_count"), 1, lim::kMaxLayers));
  const int L = c.n_layers;
  const std::string count_key = K("block_count");

  WEIR_ASSIGN_OR_RETURN(
      auto heads, GetPerLayer(f, K("attention.head_count"), L, 0, lim::kMaxHeads, count_key));
  if (!heads) {
    return Status::NotFound(StrFormat("%s: metadata key '%s' is missing", path,
                                      K("attention.head_count").c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(auto kv_heads, GetPerLayer(f, K("attention.head_count_kv"), L, 0,
                                                   lim::kMaxHeads, count_key));
  if (!kv_heads) kv_heads = heads;
  // An MoE layer's d_ff is its experts' width: <prefix>.expert_feed_forward_length where stated
  // (qwen3moe, whose feed_forward_length is a dense width no layer uses), else
  // feed_forward_length (Mixtral).
  const std::string ff_key = arch->moe && f.Has(K("expert_feed_forward_length"))
                                 ? K("expert_feed_forward_length")
                                 : K("feed_forward_length");
  WEIR_ASSIGN_OR_RETURN(auto ffs, GetPerLayer(f, ff_key, L, 0, lim::kMaxFfnDim, count_key));
  if (!ffs) {
    return Status::NotFound(
        StrFormat("%s: metadata key '%s' is missing", path, K("feed_forward_length").c_str()));
  }
  c.layers.resize(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    c.layers[l] = LayerDims{(*heads)[l], (*kv_heads)[l], (*ffs)[l]};
  }
  c.n_head = c.layers[0].n_head;
  c.n_head_kv = c.layers[0].n_head_kv;
  c.d_ff = c.layers[0].d_ff;

  if (arch->moe) WEIR_RETURN_IF_ERROR(ReadExperts(f, prefix, &c));

  // head_dim: stated (Gemma, Qwen3; weir writes it for pruned models whose layer 0 lost heads),
  // else derived.
  if (f.Has(K("attention.key_length"))) {
    WEIR_ASSIGN_OR_RETURN(c.head_dim, GetInt(f, K("attention.key_length"), 1, lim::kMaxHeadDim));
  } else {
    if (c.n_head <= 0 || c.d_model % c.n_head != 0) {
      return Status::InvalidArgument(
          StrFormat("%s: %s %d is not a multiple of %s %d (and %s is absent)", path,
                    K("embedding_length").c_str(), c.d_model, K("attention.head_count").c_str(),
                    c.n_head, K("attention.key_length").c_str()));
    }
    c.head_dim = c.d_model / c.n_head;
  }
  if (f.Has(K("attention.value_length"))) {
    WEIR_ASSIGN_OR_RETURN(int v_len, GetInt(f, K("attention.value_length"), 1, lim::kMaxHeadDim));
    if (v_len != c.head_dim) {
      return Status::Unsupported(StrFormat("%s: %s %d differs from the key length %d", path,
                                           K("attention.value_length").c_str(), v_len,
                                           c.head_dim));
    }
  }
  WEIR_ASSIGN_OR_RETURN(c.rope_dim,
                        GetInt(f, K("rope.dimension_count"), 1, c.head_dim, c.head_dim));
  if (c.rope_dim % 2 != 0) {
    return Status::InvalidArgument(
        StrFormat("%s: %s %d is odd", path, K("rope.dimension_count").c_str(), c.rope_dim));
  }
  WEIR_ASSIGN_OR_RETURN(c.rms_eps,
                        GetPositiveFloat(f, K("attention.layer_norm_rms_epsilon"), std::nullopt));
  WEIR_ASSIGN_OR_RETURN(c.rope_theta, GetPositiveFloat(f, K("rope.freq_base"), 10000.0f));
  WEIR_ASSIGN_OR_RETURN(c.ctx_len, GetInt(f, K("context_length"), 0, lim::kMaxContext, 0));
  // The pairing is the architecture's (llama.cpp: "llama" pairs adjacent dims, the others
  // rotate halves), a property of how the converter laid out q and k.
  c.rope_style = arch->rope_style;

  WEIR_RETURN_IF_ERROR(ReadRopeScaling(f, prefix, &c));
  // rope_freqs.weight (Llama 3.1's per-pair factors) is a tensor of the row's table, bound and
  // checked (shape, F32, finite and > 0) with the others; a row without it refuses it.
  // LongRoPE (Phi-3-128k, Phi-3.5, Phi-4-mini): per-dimension frequency factors for short and
  // long contexts, which weir does not apply.
  for (const char* factors : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (f.FindTensor(factors)) {
      return Status::Unsupported(StrFormat(
          "%s: tensor %s (LongRoPE frequency factors, Phi-3-128k / Phi-3.5 / Phi-4-mini style) "
          "is not supported; weir implements linear scaling and Llama 3.1's rope_freqs",
          path, factors));
    }
  }

  // The architecture's switches with values in the file.
  if (arch->embed_scale_sqrt_d) c.embed_scale = std::sqrt(static_cast<float>(c.d_model));
  WEIR_RETURN_IF_ERROR(ReadSlidingWindow(f, *arch, prefix, &c));
  // Soft-caps: a stated 0 turns one off (llama.cpp would divide by it); absent, the row's default.
  if (arch->logit_softcap) {
    WEIR_ASSIGN_OR_RETURN(c.final_logit_softcap,
                          GetNonNegativeFloat(f, K("final_logit_softcapping"),
                                              arch->final_softcap_default));
  }
  if (arch->attn_softcap) {
    WEIR_ASSIGN_OR_RETURN(c.attn_logit_softcap,
                          GetNonNegativeFloat(f, K("attn_logit_softcapping"),
                                              arch->attn_softcap_default));
  }
  // Gemma 2 27B and Gemma 3 27B scale queries by 1/sqrt(d_model / n_head) instead of
  // 1/sqrt(head_dim) (their query_pre_attn_scalar: 4608 / 32 = 144 and 5376 / 32 = 168, where
  // head_dim is 128); GGUF does not state it, so llama.cpp recognises the models by their layer
  // counts (46 and 62), and so does weir. Gemma 2 2B and 9B (26 and 42 layers) scale by
  // 1/sqrt(head_dim) = 1/sqrt(256), which is their query_pre_attn_scalar.
  if (const float s = InferredAttnScale(prefix, c); s > 0) c.attn_scale = s;

  if (const GgufTensorInfo* emb = f.FindTensor("token_embd.weight")) {
    if (emb->shape.ndim != 2 || emb->shape[0] > std::numeric_limits<int32_t>::max()) {
      return Status::InvalidArgument(
          StrFormat("%s: tensor token_embd.weight has shape %s, expected [vocab, %d]", path,
                    emb->shape.ToString().c_str(), c.d_model));
    }
    c.vocab_size = static_cast<int>(emb->shape[0]);
  } else if (const GgufKv* tok = f.FindKv("tokenizer.ggml.tokens");
             tok && tok->type == GgufType::kArray) {
    if (tok->count > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return Status::InvalidArgument(StrFormat("%s: tokenizer.ggml.tokens has %llu entries", path,
                                               static_cast<unsigned long long>(tok->count)));
    }
    c.vocab_size = static_cast<int>(tok->count);
  } else {
    WEIR_ASSIGN_OR_RETURN(c.vocab_size, GetInt(f, K("vocab_size"), 1, lim::kMaxVocabSize));
  }
  c.tied_output = f.FindTensor("output.weight") == nullptr;
  return c;
}

Result<TokenizerSpec> ReadGgufTokenizer(const GgufFile& f) {
  const char* path = f.path().c_str();
  TokenizerSpec t;
  if (!f.Has("tokenizer.ggml.model")) return t;  // Kind::kNone
  WEIR_ASSIGN_OR_RETURN(std::string model, f.GetString("tokenizer.ggml.model"));
  if (model == "no_vocab" || model == "none") return t;
  bool spm = model == "llama";
  if (!spm && model != "gpt2") {
    return Status::Unsupported(
        StrFormat("%s: tokenizer.ggml.model is '%s'; weir reads 'llama' (SentencePiece) and 'gpt2' "
                  "(byte-level BPE)",
                  path, Printable(model, 32).c_str()));
  }
  t.kind = spm ? TokenizerSpec::Kind::kSentencePiece : TokenizerSpec::Kind::kBpeMerges;
  t.byte_level = !spm;
  t.byte_fallback = spm;
  WEIR_ASSIGN_OR_RETURN(t.tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  const size_t n = t.tokens.size();
  if (n == 0 || n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::InvalidArgument(StrFormat("%s: tokenizer.ggml.tokens has %zu entries", path, n));
  }
  if (f.Has("tokenizer.ggml.scores")) {
    WEIR_ASSIGN_OR_RETURN(t.scores, f.GetF32Array("tokenizer.ggml.scores"));
    if (t.scores.size() != n) {
      return Status::InvalidArgument(
          StrFormat("%s: tokenizer.ggml.scores has %zu entries but tokenizer.ggml.tokens has %zu",
                    path, t.scores.size(), n));
    }
  }
  if (f.Has("tokenizer.ggml.token_type")) {
    WEIR_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.GetI64Array("tokenizer.ggml.token_type"));
    if (types.size() != n) {
      return Status::InvalidArgument(StrFormat(
          "%s: tokenizer.ggml.token_type has %zu entries but tokenizer.ggml.tokens has %zu", path,
          types.size(), n));
    }
    t.types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte)) {
        return Status::InvalidArgument(
            StrFormat("%s: tokenizer.ggml.token_type[%zu] = %lld, expected 0..6", path, i,
                      static_cast<long long>(types[i])));
      }
      // 0 is llama.cpp's "undefined", which it treats as normal.
      t.types[i] = types[i] == 0 ? TokenType::kNormal : static_cast<TokenType>(types[i]);
    }
  }
  if (!spm) {
    WEIR_ASSIGN_OR_RETURN(t.merges, f.GetStringArray("tokenizer.ggml.merges"));
    if (f.Has("tokenizer.ggml.pre")) {
      WEIR_ASSIGN_OR_RETURN(t.pre, f.GetString("tokenizer.ggml.pre"));
    }
  }
  if (f.Has("tokenizer.chat_template")) {
    WEIR_ASSIGN_OR_RETURN(t.chat_template, f.GetString("tokenizer.chat_template"));
  }
  WEIR_ASSIGN_OR_RETURN(t.bos_id, GetTokenId(f, "tokenizer.ggml.bos_token_id", n));
  WEIR_ASSIGN_OR_RETURN(t.eos_id, GetTokenId(f, "tokenizer.ggml.eos_token_id", n));
  WEIR_ASSIGN_OR_RETURN(t.unk_id, GetTokenId(f, "tokenizer.ggml.unknown_token_id", n));
  WEIR_ASSIGN_OR_RETURN(t.pad_id, GetTokenId(f, "tokenizer.ggml.padding_token_id", n));
  WEIR_ASSIGN_OR_RETURN(t.add_bos, GetBoolOr(f, "tokenizer.ggml.add_bos_token", spm));
  WEIR_ASSIGN_OR_RETURN(t.add_space_prefix, GetBoolOr(f, "tokenizer.ggml.add_space_prefix", spm));
  return t;
}

Result<ModelFile> LoadGgufModel(const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  return LoadGgufModel(file);
}

Result<ModelFile> LoadGgufModel(const GgufFile& f) {
  const char* path = f.path().c_str();
  ModelFile m;
  m.path = f.path();
  m.format = FileFormat::kGguf;
  WEIR_ASSIGN_OR_RETURN(m.config, ReadGgufLlamaConfig(f));
  WEIR_ASSIGN_OR_RETURN(m.tokenizer, ReadGgufTokenizer(f));

  const std::set<std::string> needed = NeededTensors(*m.config.arch, m.config.n_layers);
  for (const GgufTensorInfo& info : f.tensors()) {
    if (!info.dtype) {
      if (needed.count(info.name)) {
        return Status::Unsupported(
            StrFormat("%s: unsupported type %s in tensor %s (weir computes with %s)", path,
                      GgmlTypeName(info.ggml_type).c_str(), Printable(info.name).c_str(),
                      DTypeNameList().c_str()));
      }
      continue;  // not read by the model: leave it out
    }
    if (info.offset % NaturalAlignment(*info.dtype) != 0 ||
        reinterpret_cast<uintptr_t>(f.TensorData(info)) % NaturalAlignment(*info.dtype) != 0) {
      return Status::Unsupported(
          StrFormat("%s: tensor %s: %s data at file offset %llu is not %zu-byte aligned "
                    "(general.alignment %u)",
                    path, Printable(info.name).c_str(), DTypeName(*info.dtype),
                    static_cast<unsigned long long>(info.offset), NaturalAlignment(*info.dtype),
                    f.alignment()));
    }
    TensorView v;
    v.dtype = *info.dtype;
    v.shape = info.shape;
    v.data = f.TensorData(info);
    m.tensors.emplace(info.name, v);
    m.tensor_order.push_back(info.name);
  }

  m.metadata = f.RenderMetadata();
  if (f.backing()) m.backing.push_back(f.backing());
  WEIR_RETURN_IF_ERROR(SplitFusedTensors(&m));
  WEIR_RETURN_IF_ERROR(ValidateLlama(m));
  return m;
}

}  // namespace weir::format
