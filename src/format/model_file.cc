// LoadModel (format sniffing) and ValidateLlama (the checks every reader ends with).
//
// Sniffing order, by content first and by name only where content cannot decide:
//   1. a directory                        -> safetensors (model.safetensors or a sharded index,
//                                            config.json beside it)
//   2. the 4 bytes "GGUF" at offset 0      -> GGUF
//   3. a name ending in .safetensors or .index.json, or an 8-byte little-endian length in
//      2..100 MB followed by '{'          -> safetensors
//   4. a plausible llama2.c header         -> llama2.c (its exact size is then checked)
//   otherwise "not a GGUF, safetensors or llama2.c model".
//
// Vocabulary policy (ValidateLlama): a tokenizer may have FEWER tokens than config.vocab_size
// (Hugging Face models often pad the embedding to a multiple of 64 or 128; ids past the
// tokenizer are never produced by it), but never more (its ids would index past the embedding).
#include "format/model_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "base/memory_info.h"
#include "format/gguf_reader.h"
#include "format/llama2c_reader.h"
#include "format/llama_limits.h"
#include "format/mapped_file.h"
#include "format/safetensors_reader.h"
#include "format/tokenizer_files.h"
#include "format/weights_in_memory.h"
#include "kernels/tiled.h"

namespace weir::format {

const char* FileFormatName(FileFormat f) {
  switch (f) {
    case FileFormat::kGguf:
      return "gguf";
    case FileFormat::kSafetensors:
      return "safetensors";
    case FileFormat::kLlama2c:
      return "llama2.c";
  }
  return "?";
}

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool LooksLikeSafetensors(const uint8_t* data, uint64_t size) {
  if (size < 9) return false;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  return n >= 2 && n <= kMaxSafetensorsHeaderBytes && n <= size - 8 && data[8] == '{';
}

// Replaces the reader's tokenizer with the file named in options.tokenizer_path.
Status OverrideTokenizer(const std::string& tok_path, ModelFile* m) {
  Result<TokenizerSpec> tok = EndsWith(tok_path, ".json")
                                  ? LoadHfTokenizerJson(tok_path)
                                  : LoadLlama2cTokenizer(tok_path, m->config.vocab_size);
  if (!tok.ok()) return tok.status().WithContext("tokenizer for " + m->path);
  m->tokenizer = std::move(tok).value();
  m->metadata.emplace_back("tokenizer.path", tok_path);
  return Status::Ok();
}

Result<ModelFile> LoadByContent(const std::string& path, const LoadOptions& options) {
  const char* p = path.c_str();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return Status::NotFound(StrFormat("%s: no such file or directory", p));
    }
    return Status::IoError(StrFormat("%s: cannot stat: %s", p, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    if (Exists(path + "/model.safetensors") || Exists(path + "/model.safetensors.index.json") ||
        Exists(path + "/config.json")) {
      return LoadSafetensorsModel(path, options);
    }
    return Status::NotFound(
        StrFormat("%s: directory holds no model (no model.safetensors, "
                  "model.safetensors.index.json or config.json)",
                  p));
  }
  if (EndsWith(path, ".safetensors") || EndsWith(path, ".safetensors.index.json")) {
    return LoadSafetensorsModel(path, options);
  }
  WEIR_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  const uint8_t* data = file->data();
  const uint64_t size = file->size();
  if (size == 0) {
    return Status::InvalidArgument(
        StrFormat("%s: empty file; not a GGUF, safetensors or "
                  "llama2.c model",
                  p));
  }
  if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) {
    file.reset();
    WEIR_ASSIGN_OR_RETURN(ModelFile m, LoadGgufModel(path));
    if (!options.tokenizer_path.empty()) {
      WEIR_RETURN_IF_ERROR(OverrideTokenizer(options.tokenizer_path, &m));
    }
    return m;
  }
  if (LooksLikeSafetensors(data, size)) return LoadSafetensorsModel(path, options);
  Result<Llama2cHeader> header = ParseLlama2cHeader(data, size, path);
  if (!header.ok()) {
    if (header.status().code() == Status::Code::kUnsupported) return header.status();
    return Status::InvalidArgument(StrFormat(
        "%s: not a GGUF, safetensors or llama2.c model (no GGUF magic, no safetensors header, "
        "and as a llama2.c checkpoint: %s)",
        p, header.status().message().c_str()));
  }
  file.reset();
  return LoadLlama2cModel(path, options);
}

Status CheckRange(const std::string& path, const std::string& field, int64_t v, int64_t lo,
                  int64_t hi) {
  if (v < lo || v > hi) {
    return Status::InvalidArgument(StrFormat(
        "%s: config %s = %lld is outside %lld..%lld", path.c_str(), field.c_str(),
        static_cast<long long>(v), static_cast<long long>(lo), static_cast<long long>(hi)));
  }
  return Status::Ok();
}

Status CheckTensor(const ModelFile& m, const std::string& name, const Shape& expected, bool norm,
                   const char* derivation, const char* vector_kind = "norm") {
  const char* p = m.path.c_str();
  const TensorView* t = m.Find(name);
  if (!t) {
    return Status::Corrupt(StrFormat("%s: required tensor %s is missing (expected shape %s = %s)",
                                     p, name.c_str(), derivation, expected.ToString().c_str()));
  }
  if (!(t->shape == expected)) {
    return Status::Corrupt(StrFormat("%s: tensor %s has shape %s, expected %s = %s", p,
                                     name.c_str(), t->shape.ToString().c_str(), derivation,
                                     expected.ToString().c_str()));
  }
  if (norm && t->dtype != DType::kF32) {
    return Status::Corrupt(StrFormat("%s: %s tensor %s is %s; %ss must be F32", p, vector_kind,
                                     name.c_str(), DTypeName(t->dtype), vector_kind));
  }
  if (t->cols() % BlockSize(t->dtype) != 0) {
    return Status::Corrupt(
        StrFormat("%s: tensor %s: rows of %lld %s values are not whole "
                  "blocks of %d",
                  p, name.c_str(), static_cast<long long>(t->cols()), DTypeName(t->dtype),
                  BlockSize(t->dtype)));
  }
  if (!t->data) {
    return Status::Corrupt(StrFormat("%s: tensor %s has no data", p, name.c_str()));
  }
  return Status::Ok();
}

bool IsBias(TensorRole r) {
  return r == TensorRole::kAttnQBias || r == TensorRole::kAttnKBias || r == TensorRole::kAttnVBias;
}

// One tensor of the architecture's table for layer `layer` (-1 for a global tensor). An
// optional tensor may be absent; when present it must have its shape.
Status CheckSpecTensor(const ModelFile& m, const TensorSpec& t, int layer, bool required) {
  const std::string name = TensorName(t, layer);
  if (!required && m.Find(name) == nullptr) return Status::Ok();
  if (t.fused_in != nullptr && m.Find(name) == nullptr) {
    const std::string fused = t.per_layer ? StrFormat("blk.%d.%s", layer, t.fused_in) : t.fused_in;
    return Status::Corrupt(StrFormat(
        "%s: required tensor %s is missing (expected shape %s = %s), and so is %s, the fused "
        "tensor that holds it",
        m.path.c_str(), name.c_str(), ShapeDerivation(t).c_str(),
        ExpectedShape(t, m.config, layer).ToString().c_str(), fused.c_str()));
  }
  return CheckTensor(m, name, ExpectedShape(t, m.config, layer), t.vector(),
                     ShapeDerivation(t).c_str(),
                     IsBias(t.role) ? "bias" : t.role == TensorRole::kRopeFreqs ? "RoPE factor" : "norm");
}

// The values a file states for its architecture's switches.
Status ValidateArchValues(const ModelFile& m) {
  const char* p = m.path.c_str();
  const LlamaConfig& c = m.config;
  if (c.arch == nullptr) return Status::InvalidArgument(StrFormat("%s: config has no architecture", p));
  auto finite_at_least = [&](const char* field, float v, float lo, bool open) -> Status {
    if (!std::isfinite(v) || v < lo || (open && v == lo)) {
      return Status::InvalidArgument(StrFormat("%s: config %s = %g must be finite and %s %g", p,
                                               field, static_cast<double>(v),
                                               open ? ">" : ">=", static_cast<double>(lo)));
    }
    return Status::Ok();
  };
  WEIR_RETURN_IF_ERROR(finite_at_least("embed_scale", c.embed_scale, 0.0f, true));
  WEIR_RETURN_IF_ERROR(finite_at_least("attn_scale", c.attn_scale, 0.0f, false));
  WEIR_RETURN_IF_ERROR(finite_at_least("final_logit_softcap", c.final_logit_softcap, 0.0f, false));
  WEIR_RETURN_IF_ERROR(finite_at_least("attn_logit_softcap", c.attn_logit_softcap, 0.0f, false));
  WEIR_RETURN_IF_ERROR(CheckRange(m.path, "sliding_window", c.sliding_window, 0, INT32_MAX));
  if (!c.layer_sliding.empty() && static_cast<int64_t>(c.layer_sliding.size()) != c.n_layers) {
    return Status::InvalidArgument(StrFormat("%s: config has %zu sliding-layer flags for n_layers %d",
                                             p, c.layer_sliding.size(), c.n_layers));
  }
  if (c.sliding_window > 0) {
    WEIR_RETURN_IF_ERROR(finite_at_least("rope_theta_sliding", c.rope_theta_sliding, 0.0f, true));
  }
  WEIR_RETURN_IF_ERROR(finite_at_least("rope_scaling_factor", c.rope_scaling_factor, 0.0f, true));
  if (c.arch->moe) {
    WEIR_RETURN_IF_ERROR(CheckRange(m.path, "n_expert", c.n_expert, 1, limits::kMaxExperts));
    WEIR_RETURN_IF_ERROR(CheckRange(m.path, "n_expert_used", c.n_expert_used, 1, c.n_expert));
  } else if (c.n_expert != 0 || c.n_expert_used != 0) {
    return Status::InvalidArgument(StrFormat("%s: config has n_expert %d, n_expert_used %d, but "
                                             "%s is not a mixture-of-experts architecture",
                                             p, c.n_expert, c.n_expert_used, c.arch->name));
  }
  return Status::Ok();
}

// rope_freqs.weight (RoPE frequency factors; its shape and type were checked with the table):
// only where the architecture reads it, every factor finite and > 0 (each divides an angle).
Status CheckRopeFreqs(const ModelFile& m) {
  const char* p = m.path.c_str();
  const TensorSpec* spec = FindTensorSpec(*m.config.arch, TensorRole::kRopeFreqs);
  const std::string name = spec != nullptr ? TensorName(*spec, -1) : "rope_freqs.weight";
  const TensorView* t = m.Find(name);
  if (t == nullptr) return Status::Ok();
  if (spec == nullptr) {
    return Status::Unsupported(
        StrFormat("%s: tensor %s (RoPE frequency factors) is present, but architecture %s does "
                  "not read it (llama.cpp reads it for llama only)",
                  p, name.c_str(), m.config.arch->name));
  }
  const float* f = t->f32();
  for (int64_t i = 0; i < t->shape.cols(); ++i) {
    if (!std::isfinite(f[i]) || f[i] <= 0.0f) {
      return Status::Corrupt(StrFormat("%s: tensor %s[%lld] = %g; RoPE frequency factors must be "
                                       "finite and > 0",
                                       p, name.c_str(), static_cast<long long>(i),
                                       static_cast<double>(f[i])));
    }
  }
  return Status::Ok();
}

Status ValidateTokenizer(const ModelFile& m) {
  const char* p = m.path.c_str();
  const TokenizerSpec& t = m.tokenizer;
  const int64_t vocab = m.config.vocab_size;
  const bool has_tokens = t.kind != TokenizerSpec::Kind::kNone;
  const int64_t n = has_tokens ? static_cast<int64_t>(t.tokens.size()) : vocab;
  if (has_tokens) {
    if (t.tokens.empty()) {
      return Status::Corrupt(StrFormat("%s: the tokenizer has no tokens", p));
    }
    if (n > vocab) {
      return Status::Corrupt(
          StrFormat("%s: the tokenizer has %lld tokens but the model's "
                    "vocab_size is %lld; its ids would index past the "
                    "embedding",
                    p, static_cast<long long>(n), static_cast<long long>(vocab)));
    }
    if (!t.scores.empty() && static_cast<int64_t>(t.scores.size()) != n) {
      return Status::Corrupt(StrFormat("%s: tokenizer has %zu scores for %lld tokens", p,
                                       t.scores.size(), static_cast<long long>(n)));
    }
    if (!t.types.empty() && static_cast<int64_t>(t.types.size()) != n) {
      return Status::Corrupt(StrFormat("%s: tokenizer has %zu token types for %lld tokens", p,
                                       t.types.size(), static_cast<long long>(n)));
    }
  }
  const struct {
    const char* name;
    int32_t id;
  } ids[] = {
      {"bos_id", t.bos_id}, {"eos_id", t.eos_id}, {"unk_id", t.unk_id}, {"pad_id", t.pad_id}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= n) {
      return Status::Corrupt(StrFormat("%s: tokenizer %s %d is outside 0..%lld (-1 = none)", p,
                                       name, id, static_cast<long long>(n - 1)));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ModelFile> LoadModel(const std::string& path, const LoadOptions& options) {
  WEIR_ASSIGN_OR_RETURN(ModelFile m, LoadByContent(path, options));
  WEIR_RETURN_IF_ERROR(ValidateLlama(m));
  bool copy = options.placement == WeightPlacement::kMemory;
  if (options.placement == WeightPlacement::kAuto) {
    copy = AutoPlacementCopies(WeightBytesInMemory(m), AvailableMemoryBytes());
  }
  if (copy) {
    Status st = CopyWeightsToMemory(&m, options.tile_linear && kernels::HasFastTiledProduct(),
                                    options.pool);
    // Auto falls back to the mapping when the memory cannot be had (an address-space limit);
    // asked for explicitly, it is an error.
    const bool fallback = options.placement == WeightPlacement::kAuto &&
                          st.code() == Status::Code::kOutOfMemory;
    if (!st.ok() && !fallback) return st;
  }
  return m;
}

Status SplitFusedTensors(ModelFile* m) {
  const char* p = m->path.c_str();
  const LlamaConfig& c = m->config;
  for (const StoredTensor& s : StoredTensors(*c.arch)) {
    if (!s.fused()) continue;
    for (int l = s.per_layer() ? 0 : -1; l < (s.per_layer() ? c.n_layers : 0); ++l) {
      const std::string name = StoredTensorName(s, l);
      auto it = m->tensors.find(name);
      if (it == m->tensors.end()) continue;  // absent: the parts may be stored on their own
      const TensorView fused = it->second;
      const Shape want = StoredShape(s, c, l);
      if (!(fused.shape == want)) {
        return Status::Corrupt(StrFormat("%s: fused tensor %s has shape %s, expected %s = %s", p,
                                         name.c_str(), fused.shape.ToString().c_str(),
                                         StoredShapeDerivation(s).c_str(),
                                         want.ToString().c_str()));
      }
      if (fused.layout != Layout::kRowMajor || fused.data == nullptr) {
        return Status::Corrupt(
            StrFormat("%s: fused tensor %s has no row-major data to split", p, name.c_str()));
      }
      std::vector<std::pair<std::string, TensorView>> parts;
      int64_t first_row = 0;  // of the part, in the fused tensor (elements of a 1-D tensor)
      for (const TensorSpec& t : s.parts) {
        const std::string part_name = TensorName(t, l);
        if (part_name != name && m->tensors.count(part_name)) {
          return Status::Corrupt(StrFormat("%s: %s is stored both on its own and as rows of %s", p,
                                           part_name.c_str(), name.c_str()));
        }
        TensorView v = fused;
        v.shape = ExpectedShape(t, c, l);
        size_t offset = 0;
        if (fused.shape.ndim == 1) {
          if (first_row % BlockSize(fused.dtype) != 0) {
            return Status::Corrupt(
                StrFormat("%s: %s: part %s starts at element %lld, not on a %s block of %d", p,
                          name.c_str(), part_name.c_str(), static_cast<long long>(first_row),
                          DTypeName(fused.dtype), BlockSize(fused.dtype)));
          }
          offset = RowBytes(fused.dtype, first_row);
          first_row += v.shape[0];
        } else {
          offset = static_cast<size_t>(first_row) * fused.row_bytes();
          first_row += v.shape.rows();
        }
        v.data = static_cast<const uint8_t*>(fused.data) + offset;
        parts.emplace_back(part_name, v);
      }
      m->tensors.erase(it);
      std::vector<std::string> part_names;
      for (auto& [part_name, v] : parts) {
        m->tensors.emplace(part_name, v);
        part_names.push_back(part_name);
      }
      auto pos = std::find(m->tensor_order.begin(), m->tensor_order.end(), name);
      if (pos != m->tensor_order.end()) pos = m->tensor_order.erase(pos);
      m->tensor_order.insert(pos, part_names.begin(), part_names.end());
    }
  }
  return Status::Ok();
}

Status ValidateLlama(const ModelFile& m) {
  namespace lim = limits;
  const std::string& path = m.path;
  const char* p = path.c_str();
  const LlamaConfig& c = m.config;
  WEIR_RETURN_IF_ERROR(CheckRange(path, "d_model", c.d_model, 1, lim::kMaxModelDim));
  WEIR_RETURN_IF_ERROR(CheckRange(path, "n_layers", c.n_layers, 1, lim::kMaxLayers));
  WEIR_RETURN_IF_ERROR(CheckRange(path, "n_head", c.n_head, 1, lim::kMaxHeads));
  WEIR_RETURN_IF_ERROR(CheckRange(path, "n_head_kv", c.n_head_kv, 1, c.n_head));
  WEIR_RETURN_IF_ERROR(CheckRange(path, "head_dim", c.head_dim, 1, lim::kMaxHeadDim));
  WEIR_RETURN_IF_ERROR(CheckRange(path, "d_ff", c.d_ff, 1, lim::kMaxFfnDim));
  WEIR_RETURN_IF_ERROR(CheckRange(path, "vocab_size", c.vocab_size, 1, lim::kMaxVocabSize));
  WEIR_RETURN_IF_ERROR(CheckRange(path, "ctx_len", c.ctx_len, 0, INT32_MAX));
  WEIR_RETURN_IF_ERROR(CheckRange(path, "rope_dim", c.rope_dim, 2, c.head_dim));
  if (c.n_head % c.n_head_kv != 0) {
    return Status::InvalidArgument(
        StrFormat("%s: config n_head %d is not a multiple of "
                  "n_head_kv %d",
                  p, c.n_head, c.n_head_kv));
  }
  if (c.rope_dim % 2 != 0) {
    return Status::InvalidArgument(StrFormat("%s: config rope_dim %d is odd", p, c.rope_dim));
  }
  if (!std::isfinite(c.rms_eps) || c.rms_eps <= 0 || c.rms_eps >= 1) {
    return Status::InvalidArgument(
        StrFormat("%s: config rms_eps %g must be in (0, 1)", p, static_cast<double>(c.rms_eps)));
  }
  if (!std::isfinite(c.rope_theta) || c.rope_theta <= 0) {
    return Status::InvalidArgument(
        StrFormat("%s: config rope_theta %g must be positive and "
                  "finite",
                  p, static_cast<double>(c.rope_theta)));
  }
  if (static_cast<int64_t>(c.layers.size()) != c.n_layers) {
    return Status::InvalidArgument(
        StrFormat("%s: config has %zu per-layer entries for "
                  "n_layers %d",
                  p, c.layers.size(), c.n_layers));
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerDims& d = c.layers[l];
    const std::string at = "layers[" + std::to_string(l) + "].";
    WEIR_RETURN_IF_ERROR(CheckRange(path, at + "n_head", d.n_head, 1, lim::kMaxHeads));
    WEIR_RETURN_IF_ERROR(CheckRange(path, at + "n_head_kv", d.n_head_kv, 1, d.n_head));
    WEIR_RETURN_IF_ERROR(CheckRange(path, at + "d_ff", d.d_ff, 1, lim::kMaxFfnDim));
    WEIR_RETURN_IF_ERROR(CheckRange(path, at + "n_head * head_dim", int64_t{d.n_head} * c.head_dim,
                                    1, lim::kMaxModelDim));
    if (d.n_head % d.n_head_kv != 0) {
      return Status::InvalidArgument(
          StrFormat("%s: config layer %d: n_head %d is not a "
                    "multiple of n_head_kv %d",
                    p, l, d.n_head, d.n_head_kv));
    }
  }
  WEIR_RETURN_IF_ERROR(ValidateTokenizer(m));

  WEIR_RETURN_IF_ERROR(ValidateArchValues(m));

  // Tensors of the architecture's table: presence, exact shape, F32 norms and biases. Global
  // tensors first, then layer by layer.
  const ArchSpec& arch = *c.arch;
  for (const TensorSpec& t : arch.tensors) {
    if (t.per_layer) continue;
    if (t.role == TensorRole::kOutput) {
      if (c.tied_output) {
        if (m.Find(t.name)) {
          return Status::Corrupt(
              StrFormat("%s: config says the output head is tied to "
                        "token_embd.weight, but output.weight is present",
                        p));
        }
        continue;
      }
      WEIR_RETURN_IF_ERROR(CheckSpecTensor(m, t, -1, /*required=*/true));
      continue;
    }
    WEIR_RETURN_IF_ERROR(CheckSpecTensor(m, t, -1, t.required));
  }
  for (int l = 0; l < c.n_layers; ++l) {
    for (const TensorSpec& t : arch.tensors) {
      if (t.per_layer) WEIR_RETURN_IF_ERROR(CheckSpecTensor(m, t, l, t.required));
    }
  }
  return CheckRopeFreqs(m);
}

}  // namespace weir::format
