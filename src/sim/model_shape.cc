#include "sim/model_shape.h"

#include <cstdlib>
#include <sstream>

namespace weir::sim {
namespace {

constexpr const char* kKindNames[kNumTensorKinds] = {
    "token_embd",  "output",   "norm",   "attn_q",   "attn_k",      "attn_v",
    "attn_output", "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_inp"};

ModelShape MoE(ModelShape s, int n_experts, int n_active) {
  s.n_experts = n_experts;
  s.n_experts_active = n_active;
  return s;
}

}  // namespace

const char* TensorKindName(TensorKind kind) {
  int i = static_cast<int>(kind);
  return i >= 0 && i < kNumTensorKinds ? kKindNames[i] : "?";
}

std::optional<TensorKind> TensorKindFromName(const std::string& name) {
  for (int i = 0; i < kNumTensorKinds; ++i) {
    if (name == kKindNames[i]) return static_cast<TensorKind>(i);
  }
  return std::nullopt;
}

bool IsLayerTensor(TensorKind kind) {
  return kind != TensorKind::kTokenEmbd && kind != TensorKind::kOutput;
}

uint64_t ModelShape::TensorParams(TensorKind kind, int layer) const {
  const uint64_t d = static_cast<uint64_t>(d_model);
  if (kind == TensorKind::kTokenEmbd) return static_cast<uint64_t>(vocab_size) * d;
  if (kind == TensorKind::kOutput) return tied_output ? 0 : static_cast<uint64_t>(vocab_size) * d;
  if (layer < 0 || layer >= static_cast<int>(layers.size())) return 0;
  const LayerShape& L = layers[static_cast<size_t>(layer)];
  const uint64_t q_dim = static_cast<uint64_t>(L.n_head) * head_dim;
  const uint64_t kv_dim = static_cast<uint64_t>(L.n_head_kv) * head_dim;
  const uint64_t ff = static_cast<uint64_t>(L.d_ff) * static_cast<uint64_t>(n_experts);
  switch (kind) {
    case TensorKind::kNorm:
      return 2 * d;
    case TensorKind::kAttnQ:
      return q_dim * d;
    case TensorKind::kAttnK:
    case TensorKind::kAttnV:
      return kv_dim * d;
    case TensorKind::kAttnOutput:
      return q_dim * d;
    case TensorKind::kFfnGate:
    case TensorKind::kFfnUp:
    case TensorKind::kFfnDown:
      return ff * d;
    case TensorKind::kFfnRouter:
      return n_experts > 1 ? static_cast<uint64_t>(n_experts) * d : 0;
    default:
      return 0;
  }
}

uint64_t ModelShape::KindParams(TensorKind kind) const {
  if (!IsLayerTensor(kind)) return TensorParams(kind, 0);
  uint64_t sum = 0;
  for (int l = 0; l < n_layers; ++l) sum += TensorParams(kind, l);
  if (kind == TensorKind::kNorm) sum += static_cast<uint64_t>(d_model);  // output_norm
  return sum;
}

uint64_t ModelShape::TotalParams() const {
  uint64_t sum = 0;
  for (int k = 0; k < kNumTensorKinds; ++k) sum += KindParams(static_cast<TensorKind>(k));
  return sum;
}

uint64_t ModelShape::KvElementsPerToken() const {
  uint64_t sum = 0;
  for (const LayerShape& L : layers) sum += 2ull * L.n_head_kv * static_cast<uint64_t>(head_dim);
  return sum;
}

ModelShape UniformShape(std::string name, int d_model, int n_layers, int n_head, int n_head_kv,
                        int head_dim, int d_ff, int vocab_size, bool tied_output) {
  ModelShape s;
  s.name = std::move(name);
  s.d_model = d_model;
  s.n_layers = n_layers;
  s.head_dim = head_dim;
  s.vocab_size = vocab_size;
  s.tied_output = tied_output;
  s.layers.assign(static_cast<size_t>(n_layers > 0 ? n_layers : 0),
                  LayerShape{n_head, n_head_kv, d_ff});
  return s;
}

Status ValidateShape(const ModelShape& s) {
  auto bad = [&](const char* field, long long v) {
    return Status::InvalidArgument(
        StrFormat("model shape '%s': %s = %lld is invalid", s.name.c_str(), field, v));
  };
  if (s.d_model <= 0) return bad("d_model", s.d_model);
  if (s.n_layers <= 0 || s.n_layers > 65536) return bad("n_layers", s.n_layers);
  if (s.head_dim <= 0) return bad("head_dim", s.head_dim);
  if (s.vocab_size <= 0) return bad("vocab_size", s.vocab_size);
  if (s.n_experts < 1) return bad("n_experts", s.n_experts);
  if (s.n_experts_active < 1 || s.n_experts_active > s.n_experts) {
    return bad("n_experts_active", s.n_experts_active);
  }
  if (static_cast<int>(s.layers.size()) != s.n_layers) {
    return Status::InvalidArgument(StrFormat("model shape '%s': %zu layer entries for n_layers %d",
                                             s.name.c_str(), s.layers.size(), s.n_layers));
  }
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerShape& L = s.layers[l];
    if (L.n_head <= 0 || L.n_head_kv <= 0 || L.n_head % L.n_head_kv != 0 || L.d_ff <= 0) {
      return Status::InvalidArgument(StrFormat(
          "model shape '%s': layer %zu has n_head %d, n_head_kv %d, d_ff %d (need positive, "
          "n_head a multiple of n_head_kv)",
          s.name.c_str(), l, L.n_head, L.n_head_kv, L.d_ff));
    }
    // Unit counts of the streamed tensors must fit the trace and mask limits.
    if (static_cast<uint64_t>(L.d_ff) * static_cast<uint64_t>(s.n_experts) > (1ull << 26)) {
      return Status::InvalidArgument(
          StrFormat("model shape '%s': layer %zu has %lld MLP units, "
                    "over the limit of 2^26",
                    s.name.c_str(), l, static_cast<long long>(L.d_ff) * s.n_experts));
    }
  }
  return Status::Ok();
}

// Published dimensions (config.json of each model's Hugging Face release):
//   Phi-3-mini-4k:  d 3072, 32 layers, 32/32 heads of 96, d_ff 8192, vocab 32064
//   Phi-3-medium-4k: d 5120, 40 layers, 40/10 heads of 128, d_ff 17920, vocab 32064
//   Llama-2-7B:     d 4096, 32 layers, 32/32 heads, d_ff 11008, vocab 32000
//   Llama-2-13B:    d 5120, 40 layers, 40/40 heads, d_ff 13824, vocab 32000
//   Llama-2-70B:    d 8192, 80 layers, 64/8 heads, d_ff 28672, vocab 32000
//   Llama-3-8B:     d 4096, 32 layers, 32/8 heads, d_ff 14336, vocab 128256
//   Mistral-7B:     d 4096, 32 layers, 32/8 heads, d_ff 14336, vocab 32000
//   Mixtral-8x7B:   Mistral-7B's attention, 8 experts of d_ff 14336, top-2 routing
//   Qwen3-30B-A3B:  d 2048, 48 layers, 32/4 heads of 128, 128 experts of d_ff 768, top-8,
//                   vocab 151936 (QK-norm weights, 2 x 128 per layer, are not counted)
//   TinyLlama-1.1B: d 2048, 22 layers, 32/4 heads of 64, d_ff 5632, vocab 32000
// No model above ties its output head to the embedding.
Result<ModelShape> ModelPreset(const std::string& name) {
  if (name == "phi-3-mini") return UniformShape(name, 3072, 32, 32, 32, 96, 8192, 32064);
  if (name == "phi-3-medium") return UniformShape(name, 5120, 40, 40, 10, 128, 17920, 32064);
  if (name == "llama-2-7b") return UniformShape(name, 4096, 32, 32, 32, 128, 11008, 32000);
  if (name == "llama-2-13b") return UniformShape(name, 5120, 40, 40, 40, 128, 13824, 32000);
  if (name == "llama-2-70b") return UniformShape(name, 8192, 80, 64, 8, 128, 28672, 32000);
  if (name == "llama-3-8b") return UniformShape(name, 4096, 32, 32, 8, 128, 14336, 128256);
  if (name == "mistral-7b") return UniformShape(name, 4096, 32, 32, 8, 128, 14336, 32000);
  if (name == "mixtral-8x7b") {
    return MoE(UniformShape(name, 4096, 32, 32, 8, 128, 14336, 32000), 8, 2);
  }
  if (name == "llama-1b") return UniformShape(name, 2048, 22, 32, 4, 64, 5632, 32000);
  if (name == "qwen3-30b-a3b") {
    return MoE(UniformShape(name, 2048, 48, 32, 4, 128, 768, 151936), 128, 8);
  }
  std::string list;
  for (const std::string& n : ModelPresetNames()) list += (list.empty() ? "" : ", ") + n;
  return Status::NotFound(
      StrFormat("no model preset '%s' (presets: %s)", name.c_str(), list.c_str()));
}

std::vector<std::string> ModelPresetNames() {
  return {"phi-3-mini", "phi-3-medium", "llama-2-7b",   "llama-2-13b", "llama-2-70b",
          "llama-3-8b", "mistral-7b",   "mixtral-8x7b", "llama-1b",   "qwen3-30b-a3b"};
}

WeightBits WeightBits::Uniform(double b) {
  WeightBits w;
  for (int i = 0; i < kNumTensorKinds; ++i) w.bits[i] = b;
  w.Set(TensorKind::kNorm, 32);
  return w;
}

Result<WeightBits> ParseWeightBits(const std::string& spec) {
  auto parse_num = [&](const std::string& text) -> Result<double> {
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(v > 0) || v > 64) {
      return Status::InvalidArgument(
          StrFormat("--bits '%s': '%s' is not a bit width in (0, 64]", spec.c_str(), text.c_str()));
    }
    return v;
  };
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ',');) parts.push_back(p);
  if (parts.empty()) return Status::InvalidArgument("--bits: empty");
  size_t first = 0;
  WeightBits w = WeightBits::Uniform(4);
  if (parts[0].find('=') == std::string::npos) {
    WEIR_ASSIGN_OR_RETURN(double b, parse_num(parts[0]));
    w = WeightBits::Uniform(b);
    first = 1;
  }
  for (size_t i = first; i < parts.size(); ++i) {
    size_t eq = parts[i].find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(
          StrFormat("--bits '%s': '%s' should be kind=bits", spec.c_str(), parts[i].c_str()));
    }
    std::string key = parts[i].substr(0, eq);
    WEIR_ASSIGN_OR_RETURN(double b, parse_num(parts[i].substr(eq + 1)));
    if (key == "attn") {
      for (TensorKind k :
           {TensorKind::kAttnQ, TensorKind::kAttnK, TensorKind::kAttnV, TensorKind::kAttnOutput}) {
        w.Set(k, b);
      }
    } else if (key == "ffn") {
      for (TensorKind k : {TensorKind::kFfnGate, TensorKind::kFfnUp, TensorKind::kFfnDown}) {
        w.Set(k, b);
      }
    } else if (key == "embd") {
      w.Set(TensorKind::kTokenEmbd, b);
    } else if (auto k = TensorKindFromName(key)) {
      w.Set(*k, b);
    } else {
      return Status::InvalidArgument(StrFormat(
          "--bits '%s': unknown tensor kind '%s' (attn, ffn, embd, or a kind name such as "
          "ffn_down, output, norm)",
          spec.c_str(), key.c_str()));
    }
  }
  return w;
}

std::string FormatWeightBits(const WeightBits& w) {
  std::string out;
  for (int i = 0; i < kNumTensorKinds; ++i) {
    out += StrFormat("%s%s=%g", out.empty() ? "" : ",", kKindNames[i], w.bits[i]);
  }
  return out;
}

}  // namespace weir::sim
