#include "format/safetensors_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "base/aligned_buffer.h"
#include "base/checked_math.h"
#include "base/printable.h"
#include "format/hf_config.h"
#include "format/json_util.h"
#include "format/mapped_file.h"
#include "format/tokenizer_files.h"

namespace weir::format {

namespace {

constexpr char kMetadataKey[] = "__metadata__";
constexpr char kEmbedName[] = "model.embed_tokens.weight";
constexpr char kHeadName[] = "lm_head.weight";

uint64_t ReadU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

size_t ElementBytes(DType t) { return BlockBytes(t); }  // F32/F16/BF16 only here

std::optional<DType> SafetensorsDType(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  return std::nullopt;
}

// Owned bytes a ModelFile keeps alive (converted norms, realigned tensors).
struct OwnedBuffer : Backing {
  AlignedBuffer bytes;
};

Result<SafetensorsEntry> ParseEntry(const std::string& name, const Json& v, uint64_t data_bytes,
                                    const std::string& path) {
  const char* p = path.c_str();
  const std::string pname = Printable(name);
  const char* n = pname.c_str();
  if (!v.is_object()) {
    return Status::Corrupt(StrFormat("%s: tensor '%s': entry must be an object, got %s", p, n,
                                     JsonPreview(v).c_str()));
  }
  const std::string where = path + ": tensor '" + pname + "'";
  WEIR_ASSIGN_OR_RETURN(std::optional<std::string> dtype, GetOptionalString(v, "dtype", where));
  if (!dtype) return Status::Corrupt(StrFormat("%s: missing 'dtype'", where.c_str()));
  SafetensorsEntry e;
  e.name = name;
  std::optional<DType> t = SafetensorsDType(*dtype);
  if (!t) {
    return Status::Unsupported(
        StrFormat("%s: tensor '%s' has dtype '%s'; weir reads F32, F16 "
                  "and BF16 safetensors",
                  p, n, Printable(*dtype, 32).c_str()));
  }
  e.dtype = *t;

  const Json* shape = FindField(v, "shape");
  if (!shape || !shape->is_array()) {
    return Status::Corrupt(StrFormat("%s: 'shape' must be a list of integers", where.c_str()));
  }
  if (shape->size() > e.shape.dims.size()) {
    return Status::Unsupported(StrFormat("%s: %zu dimensions; at most %zu are supported",
                                         where.c_str(), shape->size(), e.shape.dims.size()));
  }
  uint64_t numel = 1;
  e.shape.ndim = static_cast<int>(shape->size());
  for (size_t i = 0; i < shape->size(); ++i) {
    int64_t d;
    if (!JsonToInt64((*shape)[i], &d) || d < 0) {
      return Status::Corrupt(
          StrFormat("%s: shape %s has an entry that is not a non-negative "
                    "integer",
                    where.c_str(), JsonPreview(*shape).c_str()));
    }
    e.shape.dims[i] = d;
    if (!CheckedMul(numel, static_cast<uint64_t>(d), &numel)) {
      return Status::Corrupt(
          StrFormat("%s: shape %s overflows 64 bits", where.c_str(), JsonPreview(*shape).c_str()));
    }
  }

  const Json* offsets = FindField(v, "data_offsets");
  int64_t begin = -1, end = -1;
  if (!offsets || !offsets->is_array() || offsets->size() != 2 ||
      !JsonToInt64((*offsets)[0], &begin) || !JsonToInt64((*offsets)[1], &end) || begin < 0 ||
      end < 0) {
    return Status::Corrupt(
        StrFormat("%s: 'data_offsets' must be [begin, end] with non-negative "
                  "integers, got %s",
                  where.c_str(), offsets ? JsonPreview(*offsets).c_str() : "nothing"));
  }
  e.begin = static_cast<uint64_t>(begin);
  e.end = static_cast<uint64_t>(end);
  if (e.begin > e.end || e.end > data_bytes) {
    return Status::Corrupt(StrFormat(
        "%s: data_offsets [%llu, %llu] do not lie inside the data section of %llu bytes",
        where.c_str(), static_cast<unsigned long long>(e.begin),
        static_cast<unsigned long long>(e.end), static_cast<unsigned long long>(data_bytes)));
  }
  uint64_t nbytes;
  if (!CheckedMul(numel, ElementBytes(e.dtype), &nbytes) || nbytes != e.end - e.begin) {
    return Status::Corrupt(StrFormat(
        "%s: shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] hold %llu",
        where.c_str(), e.shape.ToString().c_str(), dtype->c_str(),
        static_cast<unsigned long long>(nbytes), static_cast<unsigned long long>(e.begin),
        static_cast<unsigned long long>(e.end), static_cast<unsigned long long>(e.end - e.begin)));
  }
  return e;
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* data, uint64_t size,
                                                 const std::string& path) {
  const char* p = path.c_str();
  if (size < 8) {
    return Status::Corrupt(
        StrFormat("%s: %llu bytes is too short for a safetensors file "
                  "(8-byte header length)",
                  p, static_cast<unsigned long long>(size)));
  }
  SafetensorsHeader h;
  h.json_bytes = ReadU64(data);
  if (h.json_bytes < 2 || h.json_bytes > kMaxSafetensorsHeaderBytes) {
    return Status::Corrupt(StrFormat("%s: safetensors header length %llu is outside 2..%llu", p,
                                     static_cast<unsigned long long>(h.json_bytes),
                                     static_cast<unsigned long long>(kMaxSafetensorsHeaderBytes)));
  }
  if (h.json_bytes > size - 8) {
    return Status::Corrupt(
        StrFormat("%s: safetensors header length %llu exceeds the %llu bytes "
                  "after the length field",
                  p, static_cast<unsigned long long>(h.json_bytes),
                  static_cast<unsigned long long>(size - 8)));
  }
  h.data_offset = 8 + h.json_bytes;
  const uint64_t data_bytes = size - h.data_offset;
  std::string_view text(reinterpret_cast<const char*>(data + 8), h.json_bytes);
  WEIR_ASSIGN_OR_RETURN(Json j, ParseJsonText(text, path + " (safetensors header)"));
  if (!j.is_object()) {
    return Status::Corrupt(
        StrFormat("%s: safetensors header must be a JSON object, got %s", p, JsonTypeName(j)));
  }
  h.tensors.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (!it.value().is_object()) {
        return Status::Corrupt(StrFormat("%s: __metadata__ must be an object of strings", p));
      }
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) {
          return Status::Corrupt(StrFormat("%s: __metadata__['%s'] must be a string, got %s", p,
                                           Printable(m.key()).c_str(),
                                           JsonPreview(m.value()).c_str()));
        }
        h.metadata.emplace_back(m.key(), m.value().get<std::string>());
      }
      continue;
    }
    WEIR_ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(it.key(), it.value(), data_bytes, path));
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  // The extents must tile the data section exactly: no overlap, no hole, nothing after.
  uint64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : h.tensors) {
    if (e.begin < covered) {
      return Status::Corrupt(StrFormat(
          "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap", p,
          Printable(prev->name).c_str(), static_cast<unsigned long long>(prev->begin),
          static_cast<unsigned long long>(prev->end), Printable(e.name).c_str(),
          static_cast<unsigned long long>(e.begin), static_cast<unsigned long long>(e.end)));
    }
    if (e.begin > covered) {
      return Status::Corrupt(
          StrFormat("%s: data bytes [%llu, %llu) before tensor '%s' belong "
                    "to no tensor",
                    p, static_cast<unsigned long long>(covered),
                    static_cast<unsigned long long>(e.begin), Printable(e.name).c_str()));
    }
    covered = e.end;
    prev = &e;
  }
  if (covered != data_bytes) {
    return Status::Corrupt(StrFormat(
        "%s: the tensors cover %llu of the %llu data bytes; the "
        "file is truncated or has trailing bytes",
        p, static_cast<unsigned long long>(covered), static_cast<unsigned long long>(data_bytes)));
  }
  return h;
}

namespace {

struct Shard {
  std::string path;
  std::shared_ptr<MappedFile> file;
  SafetensorsHeader header;
};

// Where an HF tensor lives.
struct Located {
  size_t shard = 0;
  size_t entry = 0;
};

// HF name -> canonical name. Sets *ignored for tensors that carry nothing weir needs.
Result<std::string> CanonicalName(const std::string& hf, int n_layers, const std::string& path,
                                  bool* ignored) {
  *ignored = false;
  if (hf == kEmbedName) return std::string("token_embd.weight");
  if (hf == kHeadName) return std::string("output.weight");
  if (hf == "model.norm.weight") return std::string("output_norm.weight");
  static const char kLayerPrefix[] = "model.layers.";
  const size_t prefix_len = sizeof(kLayerPrefix) - 1;
  if (hf.compare(0, prefix_len, kLayerPrefix) == 0) {
    size_t i = prefix_len;
    int64_t layer = 0;
    size_t digits = 0;
    while (i < hf.size() && hf[i] >= '0' && hf[i] <= '9' && digits < 9) {
      layer = layer * 10 + (hf[i] - '0');
      ++i;
      ++digits;
    }
    if (digits > 0 && i < hf.size() && hf[i] == '.' && !(digits > 1 && hf[prefix_len] == '0')) {
      const std::string suffix = hf.substr(i + 1);
      static const std::pair<const char*, const char*> kMap[] = {
          {"input_layernorm.weight", "attn_norm.weight"},
          {"self_attn.q_proj.weight", "attn_q.weight"},
          {"self_attn.k_proj.weight", "attn_k.weight"},
          {"self_attn.v_proj.weight", "attn_v.weight"},
          {"self_attn.o_proj.weight", "attn_output.weight"},
          {"post_attention_layernorm.weight", "ffn_norm.weight"},
          {"mlp.gate_proj.weight", "ffn_gate.weight"},
          {"mlp.up_proj.weight", "ffn_up.weight"},
          {"mlp.down_proj.weight", "ffn_down.weight"},
      };
      const char* mapped = nullptr;
      for (const auto& [from, to] : kMap) {
        if (suffix == from) mapped = to;
      }
      if (mapped || suffix == "self_attn.rotary_emb.inv_freq") {
        if (layer >= n_layers) {
          return Status::InvalidArgument(StrFormat(
              "%s: tensor '%s' is for layer %lld but config.json has num_hidden_layers=%d",
              path.c_str(), Printable(hf).c_str(), static_cast<long long>(layer), n_layers));
        }
        if (!mapped) {
          *ignored = true;
          return std::string();
        }
        return "blk." + std::to_string(layer) + "." + mapped;
      }
    }
  }
  return Status::Unsupported(StrFormat(
      "%s: tensor '%s' is not part of a LlamaForCausalLM checkpoint weir can run (biases, "
      "adapters and quantization scales are not supported)",
      path.c_str(), Printable(hf).c_str()));
}

bool IsNormName(const std::string& canonical) {
  return EndsWith(canonical, "attn_norm.weight") || EndsWith(canonical, "ffn_norm.weight") ||
         canonical == "output_norm.weight";
}

// A view of `e` in `shard`, copied into an owned buffer when it must be converted to F32 or is
// not aligned to its element size.
Result<TensorView> MakeView(const Shard& shard, const SafetensorsEntry& e, bool want_f32,
                            ModelFile* m) {
  const uint8_t* src = shard.file->data() + shard.header.data_offset + e.begin;
  const size_t nbytes = e.end - e.begin;
  const size_t elem = ElementBytes(e.dtype);
  TensorView v;
  v.shape = e.shape;
  v.dtype = e.dtype;
  const bool convert = want_f32 && e.dtype != DType::kF32;
  const bool misaligned = reinterpret_cast<uintptr_t>(src) % elem != 0;
  if (!convert && !misaligned) {
    v.data = src;
    return v;
  }
  auto owned = std::make_shared<OwnedBuffer>();
  const size_t numel = nbytes / elem;
  const size_t out_bytes = convert ? numel * sizeof(float) : nbytes;
  if (!owned->bytes.Reset(std::max<size_t>(out_bytes, 1), 64)) {
    return Status::OutOfMemory(StrFormat("%s: cannot allocate %zu bytes for tensor '%s'",
                                         shard.path.c_str(), out_bytes, Printable(e.name).c_str()));
  }
  if (convert) {
    float* out = owned->bytes.data<float>();
    for (size_t i = 0; i < numel; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = e.dtype == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
    }
    v.dtype = DType::kF32;
  } else {
    std::memcpy(owned->bytes.data(), src, nbytes);
  }
  v.data = owned->bytes.data();
  m->backing.push_back(std::move(owned));
  return v;
}

// Reads model.safetensors.index.json: shard file -> tensor names.
Result<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path) {
  WEIR_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path, 64ull << 20));
  WEIR_ASSIGN_OR_RETURN(Json j, ParseJsonText(text, index_path));
  const Json* wm = FindField(j, "weight_map");
  if (!wm || !wm->is_object() || wm->empty()) {
    return Status::Corrupt(
        StrFormat("%s: missing a non-empty 'weight_map' object", index_path.c_str()));
  }
  std::map<std::string, std::string> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    const Json& f = it.value();
    if (!f.is_string()) {
      return Status::Corrupt(StrFormat("%s: weight_map['%s'] must be a file name, got %s",
                                       index_path.c_str(), Printable(it.key()).c_str(),
                                       JsonPreview(f).c_str()));
    }
    const std::string name = f.get<std::string>();
    // Shards must sit beside the index: no directories, so a file cannot point elsewhere.
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return Status::InvalidArgument(
          StrFormat("%s: weight_map['%s'] = '%s' is not a plain file "
                    "name beside the index",
                    index_path.c_str(), Printable(it.key()).c_str(), Printable(name).c_str()));
    }
    out[it.key()] = name;
  }
  return out;
}

}  // namespace

Result<ModelFile> LoadSafetensorsModel(const std::string& path, const LoadOptions& options) {
  const char* p = path.c_str();
  if (!Exists(path)) return Status::NotFound(StrFormat("%s: no such file or directory", p));

  // Which files hold the weights.
  std::string dir, index_path;
  std::vector<std::string> shard_paths;
  if (IsDir(path)) {
    dir = path;
    if (Exists(dir + "/model.safetensors")) {
      shard_paths.push_back(dir + "/model.safetensors");
    } else if (Exists(dir + "/model.safetensors.index.json")) {
      index_path = dir + "/model.safetensors.index.json";
    } else {
      return Status::NotFound(StrFormat(
          "%s: directory has neither model.safetensors nor model.safetensors.index.json", p));
    }
  } else {
    dir = DirName(path);
    if (EndsWith(path, ".index.json")) {
      index_path = path;
    } else {
      shard_paths.push_back(path);
    }
  }
  std::map<std::string, std::string> weight_map;
  if (!index_path.empty()) {
    WEIR_ASSIGN_OR_RETURN(weight_map, ReadWeightMap(index_path));
    std::set<std::string> files;
    for (const auto& [tensor, file] : weight_map) files.insert(file);
    for (const std::string& f : files) shard_paths.push_back(dir + "/" + f);
  }

  // config.json.
  const std::string config_path = dir + "/config.json";
  if (!Exists(config_path)) {
    return Status::NotFound(
        StrFormat("%s: safetensors weights need a config.json beside them "
                  "(%s not found)",
                  p, config_path.c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(std::string config_text, ReadSmallFile(config_path, 16ull << 20));
  WEIR_ASSIGN_OR_RETURN(HfLlamaConfig hf, ParseHfLlamaConfig(config_text, config_path));

  // Map and parse every shard.
  std::vector<Shard> shards;
  for (const std::string& sp : shard_paths) {
    Shard s;
    s.path = sp;
    WEIR_ASSIGN_OR_RETURN(s.file, MappedFile::Open(sp));
    WEIR_ASSIGN_OR_RETURN(s.header, ParseSafetensorsHeader(s.file->data(), s.file->size(), sp));
    shards.push_back(std::move(s));
  }

  // HF name -> location, across shards, then aliases from __metadata__.
  std::map<std::string, Located> stored;
  for (size_t si = 0; si < shards.size(); ++si) {
    const std::string shard_file = shards[si].path.substr(shards[si].path.find_last_of('/') + 1);
    for (size_t ei = 0; ei < shards[si].header.tensors.size(); ++ei) {
      const std::string& name = shards[si].header.tensors[ei].name;
      auto [it, inserted] = stored.emplace(name, Located{si, ei});
      if (!inserted) {
        return Status::Corrupt(
            StrFormat("%s: tensor '%s' is stored in both %s and %s", p, Printable(name).c_str(),
                      shards[it->second.shard].path.c_str(), shards[si].path.c_str()));
      }
      if (!index_path.empty()) {
        auto w = weight_map.find(name);
        if (w == weight_map.end() || w->second != shard_file) {
          return Status::Corrupt(
              StrFormat("%s: tensor '%s' is in %s but the weight_map says %s", index_path.c_str(),
                        Printable(name).c_str(), shard_file.c_str(),
                        w == weight_map.end() ? "nothing" : Printable(w->second).c_str()));
        }
      }
    }
  }
  for (const auto& [tensor, file] : weight_map) {
    if (!stored.count(tensor)) {
      return Status::Corrupt(
          StrFormat("%s: weight_map lists '%s' in %s but that shard does not "
                    "hold it",
                    index_path.c_str(), Printable(tensor).c_str(), Printable(file).c_str()));
    }
  }
  std::map<std::string, std::string> alias_of;  // dropped name -> stored name
  for (const Shard& s : shards) {
    for (const auto& [key, value] : s.header.metadata) {
      if (stored.count(key) || !stored.count(value)) continue;
      bool ignored;
      if (!CanonicalName(key, hf.config.n_layers, s.path, &ignored).ok() || ignored) continue;
      alias_of[key] = value;
    }
  }

  ModelFile m;
  m.path = path;
  m.format = FileFormat::kSafetensors;
  m.config = hf.config;
  for (const Shard& s : shards) m.backing.push_back(s.file);

  // Tied embeddings: decide which stored tensor is token_embd and whether output exists.
  auto source_of = [&](const std::string& name) -> std::string {
    if (stored.count(name)) return name;
    auto a = alias_of.find(name);
    return a == alias_of.end() ? std::string() : a->second;
  };
  const std::string embed_src = source_of(kEmbedName), head_src = source_of(kHeadName);
  std::string token_embd_src = embed_src, output_src = head_src;
  if (embed_src.empty() || head_src.empty() || embed_src == head_src || hf.tie_word_embeddings) {
    m.config.tied_output = true;
    token_embd_src = embed_src.empty() ? head_src : embed_src;
    output_src.clear();
  }

  // Canonical tensors in file order.
  for (size_t si = 0; si < shards.size(); ++si) {
    for (const SafetensorsEntry& e : shards[si].header.tensors) {
      std::string canonical;
      if (!token_embd_src.empty() && e.name == token_embd_src) {
        canonical = "token_embd.weight";
      } else if (!output_src.empty() && e.name == output_src) {
        canonical = "output.weight";
      } else if (e.name == kEmbedName || e.name == kHeadName) {
        continue;  // the tied twin of token_embd
      } else {
        bool ignored;
        WEIR_ASSIGN_OR_RETURN(canonical,
                              CanonicalName(e.name, m.config.n_layers, shards[si].path, &ignored));
        if (ignored) continue;
      }
      WEIR_ASSIGN_OR_RETURN(TensorView v, MakeView(shards[si], e, IsNormName(canonical), &m));
      m.tensors[canonical] = v;
      m.tensor_order.push_back(canonical);
    }
  }

  // rope_scaling "llama3": its factors, computed from config.json, as the tensor GGUF files
  // carry them in (bound and validated with the architecture's table like any other).
  if (!hf.rope_freqs.empty()) {
    auto owned = std::make_shared<OwnedBuffer>();
    const size_t n = hf.rope_freqs.size();
    if (!owned->bytes.Reset(n * sizeof(float), 64)) {
      return Status::OutOfMemory(StrFormat("%s: cannot allocate the RoPE factors", p));
    }
    std::memcpy(owned->bytes.data(), hf.rope_freqs.data(), n * sizeof(float));
    m.tensors["rope_freqs.weight"] =
        TensorView{DType::kF32, Shape{static_cast<int64_t>(n)}, owned->bytes.data()};
    m.tensor_order.push_back("rope_freqs.weight");
    m.backing.push_back(std::move(owned));
  }

  // Tokenizer.
  std::string tok_path = options.tokenizer_path;
  if (tok_path.empty() && Exists(dir + "/tokenizer.json")) tok_path = dir + "/tokenizer.json";
  if (!tok_path.empty()) {
    Result<TokenizerSpec> tok = EndsWith(tok_path, ".json")
                                    ? LoadHfTokenizerJson(tok_path)
                                    : LoadLlama2cTokenizer(tok_path, m.config.vocab_size);
    if (!tok.ok()) return tok.status().WithContext(StrFormat("tokenizer for %s", p));
    m.tokenizer = std::move(tok).value();
    m.metadata.emplace_back("tokenizer.path", tok_path);
  }
  if (m.tokenizer.bos_id < 0) m.tokenizer.bos_id = hf.bos_token_id;
  if (m.tokenizer.eos_id < 0) m.tokenizer.eos_id = hf.eos_token_id;

  uint64_t header_bytes = 0;
  for (const Shard& s : shards) header_bytes += s.header.json_bytes;
  m.metadata.emplace_back("safetensors.files", std::to_string(shards.size()));
  m.metadata.emplace_back("safetensors.tensors", std::to_string(stored.size()));
  m.metadata.emplace_back("safetensors.header_bytes", std::to_string(header_bytes));
  for (const Shard& s : shards) {
    for (const auto& [k, v] : s.header.metadata) m.metadata.emplace_back("safetensors." + k, v);
  }
  m.metadata.insert(m.metadata.end(), hf.metadata.begin(), hf.metadata.end());
  WEIR_RETURN_IF_ERROR(ValidateLlama(m));
  return m;
}

}  // namespace weir::format
