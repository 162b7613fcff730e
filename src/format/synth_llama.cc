#include "format/synth_llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "format/gguf_writer.h"
#include "format/llama_gguf_writer.h"
#include "tensor/quantize.h"

namespace weir::format {

namespace {

constexpr float kInitStd = 0.02f;
constexpr int kFirstFiller = 3 + 256;  // after <unk>, <s>, </s> and the byte tokens

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Lowercase strings of length n in lexicographic order, the k-th one.
std::string LowercaseString(int n, uint64_t k) {
  std::string s(static_cast<size_t>(n), 'a');
  for (int i = n - 1; i >= 0; --i) {
    s[i] = static_cast<char>('a' + k % 26);
    k /= 26;
  }
  return s;
}

}  // namespace

Result<SynthSpec> SynthPreset(const std::string& name, const std::string& arch) {
  if (FindArch(arch) == nullptr) {
    return Status::InvalidArgument(StrFormat("unknown architecture '%s' (known: %s)", arch.c_str(),
                                             ArchNameList().c_str()));
  }
  SynthSpec s;
  s.name = name;
  s.arch = arch;
  if (arch == "mixtral" || arch == "qwen3moe") {
    const bool qwen = arch == "qwen3moe";
    if (name == "tiny") {
      s.d_model = 64, s.n_layers = 2, s.n_head = 4, s.n_head_kv = 2, s.vocab_size = 320;
      s.ctx_len = 512, s.rope_theta = 1e6f;
      s.d_ff = qwen ? 32 : 64, s.n_expert = qwen ? 16 : 8, s.n_expert_used = qwen ? 4 : 2;
      if (qwen) s.head_dim = 32, s.rms_eps = 1e-6f;
      return s;
    }
    if (name == "small" && !qwen) {  // Mixtral 8x7B, 4 of its 32 layers
      s.d_model = 4096, s.n_layers = 4, s.n_head = 32, s.n_head_kv = 8, s.d_ff = 14336;
      s.n_expert = 8, s.n_expert_used = 2, s.vocab_size = 32000, s.ctx_len = 32768;
      s.rope_theta = 1e6f;
      return s;
    }
    if (name == "small") {  // Qwen3-30B-A3B, 8 of its 48 layers
      s.d_model = 2048, s.n_layers = 8, s.n_head = 32, s.n_head_kv = 4, s.head_dim = 128;
      s.d_ff = 768, s.n_expert = 128, s.n_expert_used = 8, s.vocab_size = 151936;
      s.ctx_len = 40960, s.rope_theta = 1e6f, s.rms_eps = 1e-6f;
      return s;
    }
    return Status::InvalidArgument(StrFormat("unknown synthetic %s preset '%s' (known: tiny, small)",
                                             arch.c_str(), name.c_str()));
  }
  if (arch != "llama") {
    if (name == "tiny") {
      s.d_model = 64, s.n_layers = 2, s.n_head = 4, s.n_head_kv = 2, s.d_ff = 192, s.vocab_size = 320;
      s.ctx_len = 512;
      if (arch == "qwen3") s.head_dim = 32, s.rms_eps = 1e-6f, s.rope_theta = 1e6f;
      if (arch == "phi3") s.rope_dim = 12;  // partial rotation, as Phi-4-mini's 0.75
      if (arch == "gemma3") {
        s.n_layers = 6, s.n_head_kv = 1, s.head_dim = 32, s.sliding_window = 4;
        s.rope_theta = 1e6f, s.rms_eps = 1e-6f;
      }
      if (arch == "gemma2") {
        s.n_layers = 4, s.head_dim = 32, s.sliding_window = 4, s.rms_eps = 1e-6f;
        s.rope_theta = 1e5f;  // not 10000, so that a sliding layer on gemma3's base shows
        s.attn_softcap = 0.05f, s.final_softcap = 0.5f;
      }
      return s;
    }
    if (arch == "gemma3" && name == "gemma3-270m") {
      s.d_model = 640, s.n_layers = 18, s.n_head = 4, s.n_head_kv = 1, s.head_dim = 256;
      s.d_ff = 2048, s.vocab_size = 262144, s.ctx_len = 32768, s.sliding_window = 512;
      s.rope_theta = 1e6f, s.rms_eps = 1e-6f;
      return s;
    }
    if (arch == "gemma3" && name == "gemma3-1b") {
      s.d_model = 1152, s.n_layers = 26, s.n_head = 4, s.n_head_kv = 1, s.head_dim = 256;
      s.d_ff = 6912, s.vocab_size = 262144, s.ctx_len = 32768, s.sliding_window = 512;
      s.rope_theta = 1e6f, s.rms_eps = 1e-6f;
      return s;
    }
    if (arch == "qwen3" && name == "qwen3-1.7b") {
      s.d_model = 2048, s.n_layers = 28, s.n_head = 16, s.n_head_kv = 8, s.head_dim = 128;
      s.d_ff = 6144, s.vocab_size = 151936, s.ctx_len = 40960;
      s.rope_theta = 1e6f, s.rms_eps = 1e-6f;
      return s;
    }
    std::string known;
    for (const std::string& n : SynthPresetNames(arch)) known += (known.empty() ? "" : ", ") + n;
    return Status::InvalidArgument(StrFormat("unknown synthetic %s preset '%s' (known: %s)",
                                             arch.c_str(), name.c_str(), known.c_str()));
  }
  if (name == "tiny") {
    s.d_model = 64, s.n_layers = 2, s.n_head = 4, s.n_head_kv = 2, s.d_ff = 192, s.vocab_size = 320;
    s.ctx_len = 512;
  } else if (name == "llama-1b") {
    s.d_model = 2048, s.n_layers = 22, s.n_head = 32, s.n_head_kv = 4, s.d_ff = 5632;
    s.vocab_size = 32000, s.ctx_len = 2048;
  } else if (name == "llama-7b") {
    s.d_model = 4096, s.n_layers = 32, s.n_head = 32, s.n_head_kv = 32, s.d_ff = 11008;
    s.vocab_size = 32000, s.ctx_len = 4096;
  } else {
    return Status::InvalidArgument(StrFormat(
        "unknown synthetic model preset '%s' (known: tiny, llama-1b, llama-7b)", name.c_str()));
  }
  return s;
}

std::vector<std::string> SynthPresetNames(const std::string& arch) {
  if (arch == "gemma3") return {"tiny", "gemma3-270m", "gemma3-1b"};
  if (arch == "qwen3") return {"tiny", "qwen3-1.7b"};
  if (arch == "mixtral" || arch == "qwen3moe") return {"tiny", "small"};
  if (arch != "llama") return {"tiny"};
  return {"tiny", "llama-1b", "llama-7b"};
}

Status ValidateSynthSpec(const SynthSpec& s, DType type) {
  auto bad = [&](const char* what) {
    return Status::InvalidArgument(StrFormat(
        "synthetic model '%s': %s (d_model %d, n_layers %d, n_head %d, n_head_kv %d, d_ff %d, "
        "vocab %d)",
        s.name.c_str(), what, s.d_model, s.n_layers, s.n_head, s.n_head_kv, s.d_ff, s.vocab_size));
  };
  if (s.d_model <= 0 || s.n_layers <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.d_ff <= 0 ||
      s.ctx_len <= 0) {
    return bad("every dimension must be positive");
  }
  if (s.d_model > (1 << 20) || s.d_ff > (1 << 22) || s.n_layers > 4096 ||
      s.vocab_size > (1 << 22)) {
    return bad("dimensions are implausibly large");
  }
  if (FindArch(s.arch) == nullptr) {
    return Status::InvalidArgument(StrFormat("synthetic model '%s': unknown architecture '%s' "
                                             "(known: %s)",
                                             s.name.c_str(), s.arch.c_str(), ArchNameList().c_str()));
  }
  const bool moe = FindArch(s.arch)->moe;
  if (moe && (s.n_expert < 1 || s.n_expert > 1024 || s.n_expert_used < 1 ||
              s.n_expert_used > s.n_expert)) {
    return bad("a mixture-of-experts model needs 1 <= n_expert_used <= n_expert <= 1024");
  }
  if (!moe && (s.n_expert != 0 || s.n_expert_used != 0)) {
    return bad("only mixture-of-experts architectures have experts");
  }
  if (s.head_dim < 0 || s.head_dim > 4096 || s.sliding_window < 0) {
    return bad("head_dim and sliding_window must be >= 0 and plausible");
  }
  if (s.head_dim == 0 && s.d_model % s.n_head != 0) return bad("n_head must divide d_model");
  if (s.n_head % s.n_head_kv != 0) return bad("n_head_kv must divide n_head");
  const int head_dim = s.head_dim > 0 ? s.head_dim : s.d_model / s.n_head;
  if (head_dim % 2 != 0) return bad("head_dim must be even for RoPE");
  if (s.rope_dim < 0 || s.rope_dim > head_dim || s.rope_dim % 2 != 0) {
    return bad("rope_dim must be even and at most head_dim (0: head_dim)");
  }
  if (s.vocab_size < kFirstFiller)
    return bad("vocab_size must be at least 259 (3 specials + 256 byte tokens)");
  if (s.d_model % BlockSize(type) != 0 || s.d_ff % BlockSize(type) != 0) {
    return Status::InvalidArgument(StrFormat(
        "synthetic model '%s': d_model %d and d_ff %d must be multiples of the %s block size %d",
        s.name.c_str(), s.d_model, s.d_ff, DTypeName(type), BlockSize(type)));
  }
  if ((int64_t{s.n_head} * head_dim) % BlockSize(type) != 0) {
    return Status::InvalidArgument(StrFormat(
        "synthetic model '%s': n_head * head_dim %lld must be a multiple of the %s block size %d",
        s.name.c_str(), static_cast<long long>(int64_t{s.n_head} * head_dim), DTypeName(type),
        BlockSize(type)));
  }
  if (!(s.rope_theta > 0) || !(s.rms_eps > 0))
    return bad("rope_theta and rms_eps must be positive");
  if (!(s.attn_softcap >= 0) || !(s.final_softcap >= 0) || !std::isfinite(s.attn_softcap) ||
      !std::isfinite(s.final_softcap)) {
    return bad("soft-caps must be finite and >= 0 (0 = none)");
  }
  if (!std::isfinite(s.qk_gain) || !(s.qk_gain > 0)) return bad("qk_gain must be finite and > 0");
  if (!std::isfinite(s.rope_scaling_factor) || !(s.rope_scaling_factor > 0)) {
    return bad("the linear RoPE scaling factor must be finite and > 0");
  }
  if (!s.rope_freqs.empty()) {
    if (FindTensorSpec(*FindArch(s.arch), TensorRole::kRopeFreqs) == nullptr) {
      return bad("this architecture has no rope_freqs (llama and mixtral have)");
    }
    if (static_cast<int>(s.rope_freqs.size()) != head_dim / 2) {
      return bad("rope_freqs must have head_dim / 2 values");
    }
    for (float f : s.rope_freqs) {
      if (!std::isfinite(f) || !(f > 0)) return bad("rope_freqs must be finite and > 0");
    }
  }
  return Status::Ok();
}

LlamaConfig SynthConfig(const SynthSpec& s) {
  LlamaConfig c;
  const ArchSpec* arch = FindArch(s.arch);
  c.arch = arch != nullptr ? arch : &LlamaArch();
  c.d_model = s.d_model;
  c.n_layers = s.n_layers;
  c.n_head = s.n_head;
  c.n_head_kv = s.n_head_kv;
  c.head_dim = s.head_dim > 0 ? s.head_dim : (s.n_head > 0 ? s.d_model / s.n_head : 0);
  c.d_ff = s.d_ff;
  c.vocab_size = s.vocab_size;
  c.ctx_len = s.ctx_len;
  c.rms_eps = s.rms_eps;
  c.rope_theta = s.rope_theta;
  c.rope_dim = s.rope_dim > 0 ? s.rope_dim : c.head_dim;
  c.rope_style = c.arch->rope_style;
  c.tied_output = c.arch->tied_head;
  c.n_expert = s.n_expert;
  c.n_expert_used = s.n_expert_used;
  c.rope_scaling_factor = s.rope_scaling_factor;
  c.layers.assign(static_cast<size_t>(s.n_layers > 0 ? s.n_layers : 0),
                  LayerDims{s.n_head, s.n_head_kv, s.d_ff});
  if (c.arch->embed_scale_sqrt_d) c.embed_scale = std::sqrt(static_cast<float>(s.d_model));
  const int period = c.arch->sliding_window_period;
  if (s.sliding_window > 0 && period > 0) {
    c.sliding_window = s.sliding_window;
    // A row without a base of its own (gemma2) slides on the global one.
    c.rope_theta_sliding =
        c.arch->rope_theta_sliding > 0 ? c.arch->rope_theta_sliding : s.rope_theta;
    for (int l = 0; l < s.n_layers; ++l) c.layer_sliding.push_back(l % period < period - 1);
  }
  if (c.arch->attn_softcap) c.attn_logit_softcap = s.attn_softcap;
  if (c.arch->logit_softcap) c.final_logit_softcap = s.final_softcap;
  return c;
}

TokenizerSpec SynthVocabulary(int vocab_size) {
  TokenizerSpec t;
  t.kind = TokenizerSpec::Kind::kSentencePiece;
  t.bos_id = 1, t.eos_id = 2, t.unk_id = 0;
  t.add_bos = true, t.add_space_prefix = true, t.byte_fallback = true;
  auto add = [&](std::string piece, TokenType type, float score) {
    if (static_cast<int>(t.tokens.size()) >= vocab_size) return;
    t.tokens.push_back(std::move(piece));
    t.types.push_back(type);
    t.scores.push_back(score);
  };
  add("<unk>", TokenType::kUnknown, 0.0f);
  add("<s>", TokenType::kControl, 0.0f);
  add("</s>", TokenType::kControl, 0.0f);
  for (int b = 0; b < 256; ++b) add(StrFormat("<0x%02X>", b), TokenType::kByte, 0.0f);
  const std::string kSpace = "\xe2\x96\x81";  // "▁"
  int k = 0;
  auto filler = [&](std::string piece) {
    add(std::move(piece), TokenType::kNormal, -static_cast<float>(k++));
  };
  filler(kSpace);
  for (char c = 0x21; c < 0x7f; ++c) filler(std::string(1, c));
  for (char c = 'a'; c <= 'z'; ++c) filler(kSpace + c);
  for (char c = 'A'; c <= 'Z'; ++c) filler(kSpace + c);
  // Length n >= 2: "▁" + each lowercase string of length n-1 (n >= 3), then each of length n.
  for (int n = 2; static_cast<int>(t.tokens.size()) < vocab_size; ++n) {
    uint64_t count = 1;
    for (int i = 0; i < n; ++i) count *= 26;
    if (n >= 3) {
      for (uint64_t i = 0; i < count / 26 && static_cast<int>(t.tokens.size()) < vocab_size; ++i) {
        filler(kSpace + LowercaseString(n - 1, i));
      }
    }
    for (uint64_t i = 0; i < count && static_cast<int>(t.tokens.size()) < vocab_size; ++i) {
      filler(LowercaseString(n, i));
    }
  }
  return t;
}

namespace {

// The uniform bits of row `row`: pair p uses the p-th SplitMix64 output of a stream seeded from
// (seed, tensor, row); its top 24 bits give u1 in (0, 1], its low 24 bits u2 in [0, 1).
struct RowStream {
  uint64_t state;
  RowStream(uint64_t seed, uint64_t tensor_index, uint64_t row)
      : state(Mix64(seed ^ Mix64(tensor_index * 0x9e3779b97f4a7c15ull + 1) ^
                    Mix64(row * 0xd1b54a32d192ed03ull + 2))) {}
  uint64_t Next() {
    state += 0x9e3779b97f4a7c15ull;
    return Mix64(state);
  }
};

constexpr float kInv24 = 1.0f / 16777216.0f;
constexpr float kTwoPi = 6.2831853071795864769f;
constexpr float kHalfPi = 1.5707963267948966192f;

// ln(u) for u in (0, 1]: u = m * 2^e with m in [sqrt(1/2), sqrt(2)), ln m by the odd series
// of atanh in s = (m - 1) / (m + 1), |s| <= 0.172 (error < 1e-7 relative).
inline float FastLog(float u) {
  uint32_t bits;
  std::memcpy(&bits, &u, 4);
  int32_t e = static_cast<int32_t>(bits >> 23) - 127;
  uint32_t mbits = (bits & 0x007fffffu) | 0x3f800000u;
  const uint32_t big = mbits > 0x3fb504f3u;  // m > sqrt(2): halve m (arithmetic, no branch)
  mbits -= big << 23;
  e += static_cast<int32_t>(big);
  float m;
  std::memcpy(&m, &mbits, 4);
  float s = (m - 1.0f) / (m + 1.0f);
  float s2 = s * s;
  float series = s * (2.0f + s2 * (2.0f / 3 + s2 * (2.0f / 5 + s2 * (2.0f / 7 + s2 * (2.0f / 9)))));
  return static_cast<float>(e) * 0.69314718056f + series;
}

// sqrt(x) for x >= 0 without a libm call (std::sqrt's errno path keeps loops scalar): an
// initial 1/sqrt estimate from the exponent bits, three Newton steps, times x.
inline float FastSqrt(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = 0x5f375a86u - (bits >> 1);
  float y;
  std::memcpy(&y, &bits, 4);
  for (int i = 0; i < 3; ++i) y = y * (1.5f - 0.5f * x * y * y);
  return x * y;  // 0 for x == 0 (y stays finite)
}

// cos and sin of 2*pi*u for u in [0, 1): quadrant from 4u, then Taylor series on [0, pi/2).
inline void FastSinCos2Pi(float u, float* c_out, float* s_out) {
  float t = u * 4.0f;
  int q = static_cast<int>(t);
  float x = (t - static_cast<float>(q)) * kHalfPi;
  float x2 = x * x;
  float s =
      x * (1.0f + x2 * (-1.0f / 6 +
                        x2 * (1.0f / 120 + x2 * (-1.0f / 5040 +
                                                 x2 * (1.0f / 362880 + x2 * (-1.0f / 39916800))))));
  float c =
      1.0f +
      x2 * (-0.5f + x2 * (1.0f / 24 + x2 * (-1.0f / 720 +
                                            x2 * (1.0f / 40320 + x2 * (-1.0f / 3628800 +
                                                                       x2 * (1.0f / 479001600))))));
  // Rotate by q quarter turns: (c, s) -> (-s, c) -> (-c, -s) -> (s, -c), as exact arithmetic
  // blends with 0/1 weights so that the loop has no branch.
  const float odd = static_cast<float>(q & 1);
  const float flip = 1.0f - static_cast<float>(q & 2);  // +1 or -1
  const float cc = c * (1.0f - odd) - s * odd;
  const float ss = s * (1.0f - odd) + c * odd;
  *c_out = cc * flip;
  *s_out = ss * flip;
}

// Pair p's two normals go to dst[p] and dst[n_pairs + p] (when < n).
template <typename Transform>
void FillRow(uint64_t seed, uint64_t tensor_index, uint64_t row, float* dst, int64_t n,
             const Transform& transform) {
  RowStream rng(seed, tensor_index, row);
  const int64_t n_pairs = (n + 1) / 2;
  constexpr int64_t kBatch = 256;
  uint32_t a[kBatch], b[kBatch];
  float z0[kBatch], z1[kBatch];
  for (int64_t p0 = 0; p0 < n_pairs; p0 += kBatch) {
    const int64_t k_end = std::min(kBatch, n_pairs - p0);
    for (int64_t k = 0; k < k_end; ++k) {
      uint64_t x = rng.Next();
      a[k] = static_cast<uint32_t>(x >> 40);
      b[k] = static_cast<uint32_t>(x & 0xffffffu);
    }
    for (int64_t k = 0; k < k_end; ++k) {  // branch-free: the compiler vectorizes it
      float u1 = static_cast<float>(a[k] + 1) * kInv24;
      float u2 = static_cast<float>(b[k]) * kInv24;
      transform(u1, u2, &z0[k], &z1[k]);
    }
    for (int64_t k = 0; k < k_end; ++k) dst[p0 + k] = z0[k];
    const int64_t second = std::min(k_end, n - n_pairs - p0);
    for (int64_t k = 0; k < second; ++k) dst[n_pairs + p0 + k] = z1[k];
  }
}

}  // namespace

void SynthRandomRow(uint64_t seed, uint64_t tensor_index, uint64_t row, float* dst, int64_t n) {
  FillRow(seed, tensor_index, row, dst, n, [](float u1, float u2, float* z0, float* z1) {
    float r = kInitStd * FastSqrt(-2.0f * FastLog(u1));
    float c, s;
    FastSinCos2Pi(u2, &c, &s);
    *z0 = r * c;
    *z1 = r * s;
  });
}

void SynthRandomRowReference(uint64_t seed, uint64_t tensor_index, uint64_t row, float* dst,
                             int64_t n) {
  FillRow(seed, tensor_index, row, dst, n, [](float u1, float u2, float* z0, float* z1) {
    double r = kInitStd * std::sqrt(-2.0 * std::log(static_cast<double>(u1)));
    double a = 2.0 * 3.14159265358979323846 * static_cast<double>(u2);
    *z0 = static_cast<float>(r * std::cos(a));
    *z1 = static_cast<float>(r * std::sin(a));
  });
}

Status WriteRandomLlamaGguf(const SynthSpec& spec, DType type, uint64_t seed,
                            const std::string& path, std::function<void(double)> progress,
                            ThreadPool* pool) {
  WEIR_RETURN_IF_ERROR(ValidateSynthSpec(spec, type));
  const LlamaConfig c = SynthConfig(spec);
  GgufWriter w;
  WEIR_RETURN_IF_ERROR(AddLlamaGgufMetadata(c, SynthVocabulary(spec.vocab_size),
                                            "weir-synth-" + spec.name, LlamaFileType(type), &w));
  w.AddU64("weir.synth.seed", seed);
  w.AddString("weir.synth.init", "normal(0, 0.02)");

  // Every tensor of the architecture's table as files store it (a fused tensor is written as
  // one tensor of random rows), by name; shapes from the table.
  std::map<std::string, std::pair<StoredTensor, int>> spec_of;
  for (const StoredTensor& t : StoredTensors(*c.arch)) {
    if (!t.per_layer()) spec_of.insert({StoredTensorName(t, -1), {t, -1}});
    for (int l = 0; t.per_layer() && l < c.n_layers; ++l) {
      spec_of.insert({StoredTensorName(t, l), {t, l}});
    }
  }
  const bool llama = c.IsLlama();
  const float router_skew = spec.router_skew;  // (`spec` names the tensor's row below)
  const std::vector<float>& rope_freqs = spec.rope_freqs;
  const float qk_gain = spec.qk_gain;
  // The default optional tensors (qkv biases where the row's converter writes them), plus
  // rope_freqs when the spec has factors; it is listed last, so the other tensors keep their
  // index (and so their random values) with or without it.
  const std::vector<std::string> names = LlamaTensorNames(c, [&](const std::string& n) {
    if (n == "rope_freqs.weight") return !spec.rope_freqs.empty();
    return c.arch->qkv_bias && (n.ends_with(".attn_q.bias") || n.ends_with(".attn_k.bias") ||
                                n.ends_with(".attn_v.bias"));
  });
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    const auto& [stored, layer] = spec_of.at(n);
    const TensorSpec* spec = &stored.parts.front();
    const Shape shape = StoredShape(stored, c, layer);
    if (spec->role == TensorRole::kRopeFreqs) {
      const std::vector<float>* f = &rope_freqs;
      w.AddTensor(n, DType::kF32, shape, [f](int64_t, int64_t, uint8_t* dst) -> Status {
        std::memcpy(dst, f->data(), f->size() * sizeof(float));
        return Status::Ok();
      });
      continue;
    }
    if (shape.ndim == 1) {
      // Norms: 1 (llama) or 1 + 5 * (0.02 z); biases: 0.02 z.
      const bool is_norm = n.ends_with("norm.weight");
      const int64_t cols = shape.cols();
      const uint64_t index = i;
      w.AddTensor(n, DType::kF32, shape,
                  [cols, is_norm, llama, seed, index](int64_t, int64_t, uint8_t* dst) -> Status {
                    std::vector<float> v(static_cast<size_t>(cols), 1.0f);  // the only row
                    if (!(is_norm && llama)) {
                      SynthRandomRow(seed, index, 0, v.data(), cols);
                      if (is_norm) {
                        for (float& x : v) x = 1.0f + 5.0f * x;
                      }
                    }
                    std::memcpy(dst, v.data(), v.size() * sizeof(float));
                    return Status::Ok();
                  });
      continue;
    }
    const uint64_t index = i;
    const DType t = spec->role == TensorRole::kFfnGateInp ? DType::kF32 : type;  // routers F32
    const int64_t cols = shape.cols();
    const float skew = spec->role == TensorRole::kFfnGateInp ? router_skew : 0.0f;
    const float gain =
        spec->role == TensorRole::kAttnQ || spec->role == TensorRole::kAttnK ? qk_gain : 1.0f;
    w.AddTensor(n, t, shape,
                [seed, index, t, cols, pool, skew, gain](int64_t begin, int64_t end,
                                                         uint8_t* dst) -> Status {
                  const size_t row_bytes = RowBytes(t, cols);
                  ParallelFor(
                      pool, static_cast<size_t>(end - begin),
                      [&](size_t b, size_t e, int) {
                        std::vector<float> tmp(static_cast<size_t>(cols));
                        for (size_t r = b; r < e; ++r) {
                          uint64_t row = static_cast<uint64_t>(begin) + r;
                          uint8_t* d = dst + r * row_bytes;
                          if (t == DType::kF32) {
                            float* f = reinterpret_cast<float*>(d);
                            SynthRandomRow(seed, index, row, f, cols);
                            if (skew != 0.0f) {  // router row `row` = expert `row`
                              const float scale =
                                  std::pow(static_cast<float>(row + 1), -skew);
                              for (int64_t k = 0; k < cols; ++k) f[k] *= scale;
                            }
                            if (gain != 1.0f) {
                              for (int64_t k = 0; k < cols; ++k) f[k] *= gain;
                            }
                          } else {
                            SynthRandomRow(seed, index, row, tmp.data(), cols);
                            if (gain != 1.0f) {
                              for (int64_t k = 0; k < cols; ++k) tmp[k] *= gain;
                            }
                            QuantizeRow(t, tmp.data(), d, cols);
                          }
                        }
                      },
                      16);
                  return Status::Ok();
                });
  }
  return w.Write(path, progress);
}

}  // namespace weir::format
