#include "format/safetensors_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string_view>

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

// Where a checkpoint tensor goes: the row's spec, its layer (-1: global) and expert (-1: not
// one slice of a stacked expert tensor).
struct Binding {
  const TensorSpec* spec = nullptr;
  int layer = -1;
  int expert = -1;
  // A fused tensor (Phi-3's qkv_proj): its parts, the first of which is `spec`; empty otherwise.
  std::span<const TensorSpec> fused_parts;
};

// The stored tensor whose first part is `t`, when `t` is a part of a fused tensor; its parts are
// empty when `t` is a later part (named by the first part's entry) or not fused at all.
StoredTensor FusedTensorOf(const ArchSpec& arch, const TensorSpec& t) {
  if (t.fused_in != nullptr) {
    for (const StoredTensor& s : StoredTensors(arch)) {
      if (s.fused() && &s.parts.front() == &t) return s;
    }
  }
  return StoredTensor{t.name, {}};
}

// The checkpoint's name of every tensor the row reads, for config `c`, except the expert
// slices (n_layers * n_expert names per projection, matched by MatchExpert instead).
std::map<std::string, Binding> ExpectedHfNames(const HfArch& hf, const LlamaConfig& c) {
  std::map<std::string, Binding> names;
  for (const TensorSpec& t : hf.arch->tensors) {
    const HfTensorName* n = FindHfTensorName(hf, t.role);
    if (n == nullptr || t.stack == Dim::kExperts) continue;  // never stored / matched apart
    const StoredTensor fused = FusedTensorOf(*hf.arch, t);
    for (int l = 0; l < (t.per_layer ? c.n_layers : 1); ++l) {
      const int layer = t.per_layer ? l : -1;
      names[HfName(*n, t.per_layer, layer, -1)] = Binding{&t, layer, -1, fused.parts};
    }
  }
  return names;
}

// The layer number of "model.layers.N.<rest>" (canonical decimal), or -1.
int64_t LayerOf(const std::string& hf) {
  static const char kLayerPrefix[] = "model.layers.";
  const size_t prefix_len = sizeof(kLayerPrefix) - 1;
  if (hf.compare(0, prefix_len, kLayerPrefix) != 0) return -1;
  size_t i = prefix_len;
  int64_t layer = 0;
  size_t digits = 0;
  while (i < hf.size() && hf[i] >= '0' && hf[i] <= '9' && digits < 9) {
    layer = layer * 10 + (hf[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0 || i >= hf.size() || hf[i] != '.' || (digits > 1 && hf[prefix_len] == '0')) {
    return -1;
  }
  return layer;
}

// `hf` as one expert slice of a stacked tensor of the row ("model.layers.3.mlp.experts.7.
// up_proj.weight"), if it is one: layer < n_layers, expert < n_expert, both canonical decimals.
std::optional<Binding> MatchExpert(const std::string& hf, const HfArch& arch,
                                   const LlamaConfig& c) {
  const int64_t layer = LayerOf(hf);
  if (layer < 0 || layer >= c.n_layers) return std::nullopt;
  const std::string_view rest =
      std::string_view(hf).substr(hf.find('.', sizeof("model.layers.") - 1) + 1);
  for (const TensorSpec& t : arch.arch->tensors) {
    const HfTensorName* n = FindHfTensorName(arch, t.role);
    if (n == nullptr || t.stack != Dim::kExperts) continue;
    const std::string_view name = n->name;
    const size_t at = name.find("{E}");
    const std::string_view pre = name.substr(0, at), post = name.substr(at + 3);
    if (rest.size() <= pre.size() + post.size() || rest.substr(0, pre.size()) != pre ||
        rest.substr(rest.size() - post.size()) != post) {
      continue;
    }
    const std::string_view digits = rest.substr(pre.size(), rest.size() - pre.size() - post.size());
    if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) continue;
    int64_t e = 0;
    bool ok = true;
    for (char ch : digits) {
      ok = ok && ch >= '0' && ch <= '9';
      e = e * 10 + (ch - '0');
    }
    if (ok && e < c.n_expert) return Binding{&t, static_cast<int>(layer), static_cast<int>(e)};
  }
  return std::nullopt;
}

// Tensors that carry nothing weir needs (RoPE's inverse frequencies, recomputed from rope_theta).
bool IsIgnored(const std::string& hf, int n_layers) {
  const int64_t layer = LayerOf(hf);
  return layer >= 0 && layer < n_layers &&
         hf == StrFormat("model.layers.%lld.self_attn.rotary_emb.inv_freq",
                         static_cast<long long>(layer));
}

// The error for a tensor the checkpoint kind does not have.
Status UnknownTensor(const std::string& hf, const HfArch& arch, int n_layers,
                     const std::string& path) {
  const int64_t layer = LayerOf(hf);
  if (layer >= n_layers) {
    return Status::InvalidArgument(
        StrFormat("%s: tensor '%s' is for layer %lld but config.json has num_hidden_layers=%d",
                  path.c_str(), Printable(hf).c_str(), static_cast<long long>(layer), n_layers));
  }
  return Status::Unsupported(StrFormat(
      "%s: tensor '%s' is not part of a %s checkpoint weir can run (biases it does not have, "
      "adapters and quantization scales are not supported)",
      path.c_str(), Printable(hf).c_str(), arch.architecture));
}

// A view of `e` in `shard`, copied into an owned buffer when it must be converted to F32 or is
// not aligned to its element size.
// `add` (Gemma's 1 + w) is added to every element of a tensor converted to F32.
Result<TensorView> MakeView(const Shard& shard, const SafetensorsEntry& e, bool want_f32, float add,
                            ModelFile* m) {
  const uint8_t* src = shard.file->data() + shard.header.data_offset + e.begin;
  const size_t nbytes = e.end - e.begin;
  const size_t elem = ElementBytes(e.dtype);
  TensorView v;
  v.shape = e.shape;
  v.dtype = e.dtype;
  const bool convert = want_f32 && (e.dtype != DType::kF32 || add != 0.0f);
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
      if (e.dtype == DType::kF32) {
        std::memcpy(&out[i], src + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = e.dtype == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
      }
      out[i] += add;
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
  const HfArch& hf_arch = *hf.hf;
  const std::map<std::string, Binding> expected = ExpectedHfNames(hf_arch, hf.config);
  std::map<std::string, std::string> alias_of;  // dropped name -> stored name
  for (const Shard& s : shards) {
    for (const auto& [key, value] : s.header.metadata) {
      if (stored.count(key) || !stored.count(value) || !expected.count(key)) continue;
      alias_of[key] = value;
    }
  }

  ModelFile m;
  m.path = path;
  m.format = FileFormat::kSafetensors;
  m.config = hf.config;
  for (const Shard& s : shards) m.backing.push_back(s.file);
  const LlamaConfig& c = m.config;

  // Tied embeddings: decide which stored tensor is token_embd and whether output exists.
  const HfTensorName* embed_name = FindHfTensorName(hf_arch, TensorRole::kTokenEmbd);
  const HfTensorName* head_name = FindHfTensorName(hf_arch, TensorRole::kOutput);
  WEIR_CHECK(embed_name != nullptr && head_name != nullptr);
  const std::string kEmbedName = embed_name->name, kHeadName = head_name->name;
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
  const Binding embed_binding = expected.at(kEmbedName), head_binding = expected.at(kHeadName);

  // Every checkpoint tensor, bound to its spec, in file order. Expert slices are collected per
  // stacked tensor and stacked below.
  struct Slices {
    const TensorSpec* spec = nullptr;
    int layer = -1;
    std::vector<std::pair<const Shard*, const SafetensorsEntry*>> experts;  // n_expert slots
  };
  std::map<std::string, Slices> stacks;  // canonical name -> its experts
  std::set<std::string> found;           // checkpoint names bound
  const float norm_add = hf_arch.norm_plus_one ? 1.0f : 0.0f;
  for (size_t si = 0; si < shards.size(); ++si) {
    for (const SafetensorsEntry& e : shards[si].header.tensors) {
      Binding b;
      std::string hf_name = e.name;
      if (!token_embd_src.empty() && e.name == token_embd_src) {
        b = embed_binding;
        hf_name = kEmbedName;
      } else if (!output_src.empty() && e.name == output_src) {
        b = head_binding;
      } else if (e.name == kEmbedName || e.name == kHeadName) {
        continue;  // the tied twin of token_embd
      } else if (auto it = expected.find(e.name); it != expected.end()) {
        b = it->second;
      } else if (std::optional<Binding> x = MatchExpert(e.name, hf_arch, c)) {
        b = *x;
      } else if (IsIgnored(e.name, c.n_layers)) {
        continue;
      } else {
        return UnknownTensor(e.name, hf_arch, c.n_layers, shards[si].path);
      }
      found.insert(hf_name);
      const TensorSpec& t = *b.spec;
      std::string canonical = TensorName(t, b.layer);
      Shape want = ExpectedShape(t, c, b.layer);
      std::string derivation = ShapeDerivation(t);
      if (!b.fused_parts.empty()) {  // stored as the GGUF fused tensor, split below
        const StoredTensor s{t.fused_in, b.fused_parts};
        canonical = StoredTensorName(s, b.layer);
        want = StoredShape(s, c, b.layer);
        derivation = StoredShapeDerivation(s);
      }
      std::string what = canonical;
      if (b.expert >= 0) {  // one [outer, inner] slice of [n_expert, outer, inner]
        want = Shape{want[1], want[2]};
        derivation = StrFormat("[%s, %s]", DimName(t.outer), DimName(t.inner));
        what = StrFormat("expert %d of %s", b.expert, canonical.c_str());
      }
      if (!(e.shape == want)) {
        return Status::Corrupt(StrFormat("%s: tensor '%s' = %s has shape %s, expected %s = %s",
                                         shards[si].path.c_str(), Printable(e.name).c_str(),
                                         what.c_str(), e.shape.ToString().c_str(),
                                         derivation.c_str(), want.ToString().c_str()));
      }
      if (b.expert >= 0) {
        Slices& sl = stacks[canonical];
        if (sl.spec == nullptr) {  // the first expert seen: the stack's place in file order
          sl.spec = &t;
          sl.layer = b.layer;
          sl.experts.resize(static_cast<size_t>(c.n_expert));
          m.tensor_order.push_back(canonical);
        }
        sl.experts[static_cast<size_t>(b.expert)] = {&shards[si], &e};
        continue;
      }
      const float add = IsNormRole(t.role) ? norm_add : 0.0f;
      WEIR_ASSIGN_OR_RETURN(TensorView v, MakeView(shards[si], e, t.vector(), add, &m));
      m.tensors[canonical] = v;
      m.tensor_order.push_back(canonical);
    }
  }

  // Every tensor of the checkpoint kind must be there (lm_head may be tied away).
  for (const auto& [name, b] : expected) {
    if (found.count(name) || b.spec->role == TensorRole::kOutput) continue;
    const StoredTensor s{b.spec->fused_in, b.fused_parts};
    const bool fused = !b.fused_parts.empty();
    const Shape want = fused ? StoredShape(s, c, b.layer) : ExpectedShape(*b.spec, c, b.layer);
    return Status::Corrupt(StrFormat(
        "%s: tensor '%s' = %s is missing (a %s checkpoint has it; expected shape %s = %s)", p,
        Printable(name).c_str(),
        fused ? StoredTensorName(s, b.layer).c_str() : TensorName(*b.spec, b.layer).c_str(),
        hf_arch.architecture,
        fused ? StoredShapeDerivation(s).c_str() : ShapeDerivation(*b.spec).c_str(),
        want.ToString().c_str()));
  }

  for (const TensorSpec& t : hf_arch.arch->tensors) {
    const HfTensorName* n = FindHfTensorName(hf_arch, t.role);
    if (n == nullptr || t.stack != Dim::kExperts) continue;
    for (int l = 0; l < c.n_layers; ++l) {
      auto it = stacks.find(TensorName(t, l));
      for (int x = 0; x < c.n_expert; ++x) {
        if (it != stacks.end() && it->second.experts[static_cast<size_t>(x)].second != nullptr) {
          continue;
        }
        const Shape want = ExpectedShape(t, c, l);
        return Status::Corrupt(StrFormat(
            "%s: tensor '%s' = %s (expert %d) is missing (a %s checkpoint has it; expected shape "
            "[%s, %s] = %s)",
            p, HfName(*n, true, l, x).c_str(), TensorName(t, l).c_str(), x, hf_arch.architecture,
            DimName(t.outer), DimName(t.inner), Shape{want[1], want[2]}.ToString().c_str()));
      }
    }
  }

  // Stack each layer's experts into the row's [n_expert, outer, inner] tensor (an owned copy:
  // weir's expert kernels index one 3-D tensor).
  for (const auto& [canonical, sl] : stacks) {
    const SafetensorsEntry& first = *sl.experts[0].second;
    const size_t slice_bytes = first.end - first.begin;
    for (size_t x = 1; x < sl.experts.size(); ++x) {
      const SafetensorsEntry& e = *sl.experts[x].second;
      if (e.dtype != first.dtype) {
        return Status::Unsupported(StrFormat(
            "%s: experts of %s differ in type: '%s' is %s, '%s' is %s; weir stacks experts of "
            "one type",
            sl.experts[x].first->path.c_str(), canonical.c_str(), Printable(first.name).c_str(),
            DTypeName(first.dtype), Printable(e.name).c_str(), DTypeName(e.dtype)));
      }
    }
    uint64_t total = 0;
    if (!CheckedMul(static_cast<uint64_t>(slice_bytes), static_cast<uint64_t>(sl.experts.size()),
                    &total)) {
      return Status::InvalidArgument(StrFormat("%s: %s is too large", p, canonical.c_str()));
    }
    auto owned = std::make_shared<OwnedBuffer>();
    if (!owned->bytes.Reset(std::max<size_t>(total, 1), 64)) {
      return Status::OutOfMemory(
          StrFormat("%s: cannot allocate %llu bytes to stack the experts "
                    "of %s",
                    p, static_cast<unsigned long long>(total), canonical.c_str()));
    }
    for (size_t x = 0; x < sl.experts.size(); ++x) {
      const auto& [shard, e] = sl.experts[x];
      std::memcpy(owned->bytes.data() + x * slice_bytes,
                  shard->file->data() + shard->header.data_offset + e->begin, slice_bytes);
    }
    TensorView v;
    v.dtype = first.dtype;
    v.shape = ExpectedShape(*sl.spec, c, sl.layer);
    v.data = owned->bytes.data();
    m.backing.push_back(std::move(owned));
    m.tensors[canonical] = v;
  }
  m.metadata.emplace_back("hf.arch_row", hf_arch.arch->name);
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
  // Fused tensors (Phi-3's qkv_proj, gate_up_proj) into their parts, as the GGUF loader does.
  WEIR_RETURN_IF_ERROR(SplitFusedTensors(&m));
  WEIR_RETURN_IF_ERROR(ValidateLlama(m));
  return m;
}

}  // namespace weir::format
