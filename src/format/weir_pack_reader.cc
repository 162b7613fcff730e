#include "format/weir_pack_reader.h"

#include <tuple>

#include <cmath>
#include <cstring>
#include <optional>

#include "base/checked_math.h"
#include "format/llama_limits.h"
#include "kernels/sparse_column.h"

namespace weir::format {

Result<PackFile> PackFile::Open(const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Open(path));
  return FromGguf(std::move(f));
}

bool PackFile::IsPack(const GgufFile& file) { return file.Has(kPackVersionKey); }

Result<PackFile> PackFile::FromGguf(GgufFile file) {
  PackFile p(std::move(file));
  WEIR_RETURN_IF_ERROR(p.Parse());
  return p;
}

const PackTensor* PackFile::FindStatic(const std::string& name) const {
  for (const PackTensor& t : statics_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void PackFile::AddMlpStandIns(ModelFile* file) const {
  for (const PackGroup& g : groups_) {
    if (g.layout == PackLayout::kExperts) {
      const std::string b = StrFormat("blk.%d.", g.first_layer);
      file->tensors.emplace(b + "ffn_gate_exps.weight",
                            TensorView{g.expert_type[0], Shape{g.n_expert, g.d_ff, g.d_model}, nullptr});
      file->tensors.emplace(b + "ffn_up_exps.weight",
                            TensorView{g.expert_type[1], Shape{g.n_expert, g.d_ff, g.d_model}, nullptr});
      file->tensors.emplace(b + "ffn_down_exps.weight",
                            TensorView{g.expert_type[2], Shape{g.n_expert, g.d_model, g.d_ff}, nullptr});
      continue;
    }
    for (int j = 0; j < g.n_layers; ++j) {
      const std::string b = StrFormat("blk.%d.", g.first_layer + j);
      file->tensors.emplace(b + "ffn_gate.weight", TensorView{g.dtype, Shape{g.d_ff, g.d_model}, nullptr});
      file->tensors.emplace(b + "ffn_up.weight", TensorView{g.dtype, Shape{g.d_ff, g.d_model}, nullptr});
      file->tensors.emplace(b + "ffn_down.weight", TensorView{g.dtype, Shape{g.d_model, g.d_ff}, nullptr});
    }
  }
}

uint64_t PackFile::static_bytes() const {
  uint64_t n = 0;
  for (const PackTensor& t : statics_) n += t.nbytes;
  return n;
}

uint64_t PackFile::bundle_bytes() const {
  uint64_t n = 0;
  for (const PackGroup& g : groups_) n += g.mlp_bytes();
  return n;
}

namespace {

// The pack's own sliding-window keys (kPackSlidingWindowKey, weir_pack_format.h), for a row whose
// GGUF keys have no sliding layers.
Status ReadPackSlidingWindow(const GgufFile& f, LlamaConfig* c) {
  const char* p = f.path().c_str();
  if (!f.Has(kPackSlidingWindowKey)) return Status::Ok();
  if (c->arch->sliding_window_period > 0) {
    return Status::Corrupt(StrFormat("%s: %s is set on %s, whose GGUF keys state its sliding "
                                     "layers",
                                     p, kPackSlidingWindowKey, c->arch->name));
  }
  WEIR_ASSIGN_OR_RETURN(uint32_t window, f.GetU32(kPackSlidingWindowKey));
  WEIR_ASSIGN_OR_RETURN(std::vector<int64_t> flags, f.GetI64Array(kPackSlidingLayersKey));
  WEIR_ASSIGN_OR_RETURN(float theta, f.GetF32(kPackRopeThetaSlidingKey));
  if (window < 1 || window > static_cast<uint32_t>(limits::kMaxContext)) {
    return Status::Corrupt(StrFormat("%s: %s = %u is outside 1..%lld", p, kPackSlidingWindowKey,
                                     window, static_cast<long long>(limits::kMaxContext)));
  }
  if (static_cast<int64_t>(flags.size()) != c->n_layers) {
    return Status::Corrupt(StrFormat("%s: %s has %zu entries for %d layers", p,
                                     kPackSlidingLayersKey, flags.size(), c->n_layers));
  }
  if (!std::isfinite(theta) || theta <= 0) {
    return Status::Corrupt(StrFormat("%s: %s = %g must be positive and finite", p,
                                     kPackRopeThetaSlidingKey, static_cast<double>(theta)));
  }
  c->sliding_window = static_cast<int>(window);
  c->layer_sliding.clear();
  for (int64_t v : flags) {
    if (v != 0 && v != 1) {
      return Status::Corrupt(StrFormat("%s: %s holds %lld, not 0 or 1", p, kPackSlidingLayersKey,
                                       static_cast<long long>(v)));
    }
    c->layer_sliding.push_back(static_cast<uint8_t>(v));
  }
  c->rope_theta_sliding = theta;
  return Status::Ok();
}

}  // namespace

Status PackFile::ParseExperts(const std::vector<int64_t>& firsts,
                              const std::vector<int64_t>& counts) {
  const GgufFile& f = gguf_;
  const char* p = f.path().c_str();
  const int n_layers = config_.n_layers;
  if (!config_.IsMoe()) {
    return Status::Corrupt(StrFormat("%s: an experts pack of a model without experts (%s)", p,
                                     config_.arch->name));
  }
  if (static_cast<int>(firsts.size()) != n_layers) {
    return Status::Corrupt(StrFormat("%s: an experts pack has one group per layer; %zu groups for "
                                     "%d layers",
                                     p, firsts.size(), n_layers));
  }
  WEIR_ASSIGN_OR_RETURN(std::vector<int64_t> ids, f.GetI64Array(kPackExpertTypesKey));
  if (ids.size() != 3) {
    return Status::Corrupt(StrFormat("%s: %s has %zu entries, expected 3 (gate, up, down)", p,
                                     kPackExpertTypesKey, ids.size()));
  }
  DType types[3];
  for (int k = 0; k < 3; ++k) {
    const std::optional<DType> t =
        ids[k] < 0 || ids[k] > UINT32_MAX ? std::nullopt
                                          : DTypeFromGgmlId(static_cast<uint32_t>(ids[k]));
    if (!t) {
      return Status::Unsupported(StrFormat("%s: %s[%d] = %lld is not a type weir computes with",
                                           p, kPackExpertTypesKey, k,
                                           static_cast<long long>(ids[k])));
    }
    types[k] = *t;
  }
  for (int l = 0; l < n_layers; ++l) {
    if (firsts[static_cast<size_t>(l)] != l || counts[static_cast<size_t>(l)] != 1) {
      return Status::Corrupt(StrFormat("%s: group %d starts at layer %lld with %lld layers; an "
                                       "experts pack has layer %d alone",
                                       p, l, static_cast<long long>(firsts[static_cast<size_t>(l)]),
                                       static_cast<long long>(counts[static_cast<size_t>(l)]), l));
    }
    Result<PackGroup> made = ExpertGroup(config_, l, types, expert_columns_);
    if (!made.ok()) return Status::Corrupt(StrFormat("%s: %s", p, made.status().message().c_str()));
    PackGroup g = std::move(made).value();
    const std::string name = PackExpertTensorName(l);
    const GgufTensorInfo* info = f.FindTensor(name);
    if (info == nullptr) return Status::Corrupt(StrFormat("%s: %s is missing", p, name.c_str()));
    if (info->ggml_type != kGgmlTypeI8 || info->shape.ndim != 2 ||
        info->shape.dims[1] != kPackAlignment || info->nbytes != g.nbytes ||
        info->offset % kPackAlignment != 0) {
      return Status::Corrupt(StrFormat(
          "%s: %s is %s %s (%llu bytes at %llu); expected I8 [%llu, %u] at a multiple of %u", p,
          name.c_str(), GgmlTypeName(info->ggml_type).c_str(), info->shape.ToString().c_str(),
          static_cast<unsigned long long>(info->nbytes),
          static_cast<unsigned long long>(info->offset),
          static_cast<unsigned long long>(g.nbytes / kPackAlignment), kPackAlignment,
          kPackAlignment));
    }
    g.offset = info->offset;
    const std::string order_key = kPackExpertOrderPrefix + std::to_string(l);
    if (f.Has(order_key)) {
      WEIR_ASSIGN_OR_RETURN(std::vector<int32_t> v, f.GetI32Array(order_key));
      if (Status st = SetPackOrder(v, g.n_expert, order_key.c_str(), &g.expert_order,
                                   &g.expert_record);
          !st.ok()) {
        return Status::Corrupt(StrFormat("%s: %s", p, st.message().c_str()));
      }
    }
    group_of_[static_cast<size_t>(l)] = l;
    groups_.push_back(g);
  }
  // Static tensors: every other tensor, as the source had it; validated as a model file with the
  // expert stacks standing in as views of the records' first bytes.
  ModelFile m;
  m.path = f.path();
  m.config = config_;
  m.tokenizer = tokenizer_;
  for (const GgufTensorInfo& info : f.tensors()) {
    if (info.name.rfind("weir.", 0) == 0) continue;
    if (!info.dtype) {
      return Status::Unsupported(StrFormat("%s: tensor %s has type %s, which weir does not compute",
                                           p, info.name.c_str(),
                                           GgmlTypeName(info.ggml_type).c_str()));
    }
    if (info.offset % kPackAlignment != 0) {
      return Status::Corrupt(StrFormat("%s: tensor %s at offset %llu is not %u-aligned", p,
                                       info.name.c_str(),
                                       static_cast<unsigned long long>(info.offset), kPackAlignment));
    }
    statics_.push_back(
        PackTensor{info.name, *info.dtype, info.shape, info.offset, info.nbytes, Layout::kRowMajor});
    m.tensors.emplace(info.name, TensorView{*info.dtype, info.shape, f.TensorData(info)});
  }
  static const char* kStacks[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  for (const PackGroup& g : groups_) {
    const void* data = f.data() + g.offset;
    const Shape shapes[3] = {Shape{g.n_expert, g.d_ff, g.d_model}, Shape{g.n_expert, g.d_ff, g.d_model},
                             Shape{g.n_expert, g.d_model, g.d_ff}};
    for (int k = 0; k < 3; ++k) {
      m.tensors.emplace(StrFormat("blk.%d.%s.weight", g.first_layer, kStacks[k]),
                        TensorView{g.expert_type[k], shapes[k], data});
    }
  }
  return ValidateLlama(m);
}

Status PackFile::Parse() {
  const GgufFile& f = gguf_;
  const char* p = f.path().c_str();
  if (!IsPack(f)) {
    return Status::InvalidArgument(
        StrFormat("%s: not a weir pack (no %s key); make one with `weir pack -m MODEL -o OUT.weir`",
                  p, kPackVersionKey));
  }
  WEIR_ASSIGN_OR_RETURN(uint32_t version, f.GetU32(kPackVersionKey));
  if (version != kPackVersion) {
    return Status::Unsupported(StrFormat(
        "%s: %s is %u; this weir reads version %u (make the pack again with `weir pack`)", p,
        kPackVersionKey, version, kPackVersion));
  }
  WEIR_ASSIGN_OR_RETURN(std::string layout, f.GetString(kPackLayoutKey));
  std::optional<DType> sparse_type;
  if (layout == kPackLayoutColumns) {
    layout_ = PackLayout::kColumns;
  } else if (layout == kPackLayoutSparseColumns) {
    layout_ = PackLayout::kSparseColumns;
    WEIR_ASSIGN_OR_RETURN(std::string t, f.GetString(kPackSparseTypeKey));
    sparse_type = DTypeFromName(t);
    if (!sparse_type) {
      return Status::Corrupt(StrFormat("%s: %s is '%s', not a type weir computes with", p,
                                       kPackSparseTypeKey, t.substr(0, 32).c_str()));
    }
  } else if (layout == kPackLayoutExperts || layout == kPackLayoutExpertColumns) {
    layout_ = PackLayout::kExperts;
    expert_columns_ = layout == kPackLayoutExpertColumns;
  } else if (layout != kPackLayout) {
    return Status::Unsupported(StrFormat(
        "%s: %s is '%s'; this weir reads '%s', '%s', '%s', '%s' and '%s'", p, kPackLayoutKey,
        layout.substr(0, 64).c_str(), kPackLayout, kPackLayoutColumns, kPackLayoutSparseColumns,
        kPackLayoutExperts, kPackLayoutExpertColumns));
  }
  if (f.alignment() != kPackAlignment) {
    return Status::Corrupt(StrFormat("%s: general.alignment is %u; a weir pack needs %u", p,
                                     f.alignment(), kPackAlignment));
  }
  WEIR_ASSIGN_OR_RETURN(config_, ReadGgufLlamaConfig(f));
  WEIR_RETURN_IF_ERROR(ReadPackSlidingWindow(f, &config_));
  WEIR_ASSIGN_OR_RETURN(tokenizer_, ReadGgufTokenizer(f));
  if (f.Has(kPackDownTKey)) {
    WEIR_ASSIGN_OR_RETURN(down_t_, f.GetString(kPackDownTKey));
  }
  if (f.Has(kPackSourceKey)) {
    WEIR_ASSIGN_OR_RETURN(source_, f.GetString(kPackSourceKey));
  }
  bool tiled_bundles = false, tiled_static = false;
  if (f.Has(kPackTiledStaticKey)) {
    WEIR_ASSIGN_OR_RETURN(uint32_t t, f.GetU32(kPackTiledStaticKey));
    if (t > 1) return Status::Corrupt(StrFormat("%s: %s is %u, not 0 or 1", p, kPackTiledStaticKey, t));
    tiled_static = t == 1;
  }
  if (f.Has(kPackTiledKey)) {
    WEIR_ASSIGN_OR_RETURN(uint32_t t, f.GetU32(kPackTiledKey));
    if (t > 1) return Status::Corrupt(StrFormat("%s: %s is %u, not 0 or 1", p, kPackTiledKey, t));
    tiled_bundles = t == 1;
  }

  // Groups: arrays of equal length that tile the layers in order.
  WEIR_ASSIGN_OR_RETURN(uint32_t gsize, f.GetU32(kPackGroupSizeKey));
  if (gsize < 1 || gsize > static_cast<uint32_t>(kMaxPackGroupSize)) {
    return Status::Corrupt(
        StrFormat("%s: %s = %u is outside 1..%d", p, kPackGroupSizeKey, gsize, kMaxPackGroupSize));
  }
  group_size_ = static_cast<int>(gsize);
  WEIR_ASSIGN_OR_RETURN(std::vector<int64_t> firsts, f.GetI64Array(kPackGroupFirstKey));
  WEIR_ASSIGN_OR_RETURN(std::vector<int64_t> counts, f.GetI64Array(kPackGroupCountKey));
  if (firsts.empty() || firsts.size() != counts.size()) {
    return Status::Corrupt(StrFormat("%s: %s has %zu entries and %s %zu; expected equal, >= 1", p,
                                     kPackGroupFirstKey, firsts.size(), kPackGroupCountKey,
                                     counts.size()));
  }
  const int n_layers = config_.n_layers;
  if (n_layers <= 0 || static_cast<int>(config_.layers.size()) != n_layers) {
    return Status::Corrupt(StrFormat("%s: config has %d layers", p, n_layers));
  }
  group_of_.assign(static_cast<size_t>(n_layers), -1);
  if (layout_ == PackLayout::kExperts) return ParseExperts(firsts, counts);
  if (config_.IsMoe()) {
    return Status::Corrupt(StrFormat("%s: a mixture of experts in a %s pack", p,
                                     PackLayoutName(layout_)));
  }
  int64_t next = 0;
  for (size_t g = 0; g < firsts.size(); ++g) {
    if (firsts[g] != next || counts[g] < 1 || counts[g] > gsize ||
        firsts[g] + counts[g] > n_layers) {
      return Status::Corrupt(StrFormat(
          "%s: layer group %zu starts at layer %lld with %lld layers; expected to start at %lld "
          "with 1..%u layers inside the %d layers",
          p, g, static_cast<long long>(firsts[g]), static_cast<long long>(counts[g]),
          static_cast<long long>(next), gsize, n_layers));
    }
    PackGroup grp;
    grp.index = static_cast<int>(g);
    grp.first_layer = static_cast<int>(firsts[g]);
    grp.n_layers = static_cast<int>(counts[g]);
    grp.d_ff = config_.layers[static_cast<size_t>(grp.first_layer)].d_ff;
    grp.d_model = config_.d_model;
    for (int j = 0; j < grp.n_layers; ++j) {
      const int l = grp.first_layer + j;
      if (config_.layers[static_cast<size_t>(l)].d_ff != grp.d_ff) {
        return Status::Corrupt(
            StrFormat("%s: layer group %zu mixes d_ff %d (layer %d) and %d (layer %d)", p, g,
                      grp.d_ff, grp.first_layer, config_.layers[static_cast<size_t>(l)].d_ff, l));
      }
      group_of_[static_cast<size_t>(l)] = grp.index;
    }
    grp.layout = layout_;
    // The group's tensors: (name, expected rows, expected columns, where its offset goes).
    struct Part {
      std::string name;
      int64_t rows, cols;
      uint64_t* offset;
    };
    std::vector<Part> parts;
    if (layout_ == PackLayout::kBundles) {
      parts.push_back({PackBundleTensorName(grp.index),
                       int64_t{grp.d_ff} * grp.n_layers * kBundleOps, config_.d_model, &grp.offset});
    } else {
      parts.push_back({PackDownTensorName(grp.index), int64_t{grp.d_ff} * grp.n_layers,
                       config_.d_model, &grp.offset});
      parts.push_back({PackInputTensorName(grp.index), int64_t{config_.d_model} * grp.n_layers * 2,
                       grp.d_ff, &grp.in_offset});
    }
    std::vector<const GgufTensorInfo*> infos;
    for (const Part& part : parts) {
      const GgufTensorInfo* info = f.FindTensor(part.name);
      if (info == nullptr) {
        return Status::Corrupt(StrFormat("%s: MLP tensor %s of layers %d..%d is missing", p,
                                         part.name.c_str(), grp.first_layer,
                                         grp.first_layer + grp.n_layers - 1));
      }
      if (sparse_type) {
        // A byte tensor of sparse column records: [pages, 4096] of ggml I8.
        if (info->ggml_type != kGgmlTypeI8 || info->shape.ndim != 2 ||
            info->shape.dims[1] != kSparseTensorRowBytes || grp.n_layers > INT32_MAX / 4) {
          return Status::Corrupt(StrFormat(
              "%s: MLP tensor %s is %s %s; a sparse column pack has I8 [pages, %lld] tensors", p,
              part.name.c_str(), GgmlTypeName(info->ggml_type).c_str(),
              info->shape.ToString().c_str(), static_cast<long long>(kSparseTensorRowBytes)));
        }
        grp.dtype = *sparse_type;
        infos.push_back(info);
        continue;
      }
      if (!info->dtype) {
        return Status::Unsupported(StrFormat(
            "%s: MLP tensor %s has type %s (weir computes with F32, F16, BF16, Q8_0 and Q4_0)", p,
            part.name.c_str(), GgmlTypeName(info->ggml_type).c_str()));
      }
      if (!infos.empty() && *info->dtype != grp.dtype) {
        return Status::Corrupt(StrFormat("%s: MLP tensors of layer group %zu differ in type", p, g));
      }
      grp.dtype = *info->dtype;
      if (grp.n_layers > INT32_MAX / 4 || !(info->shape == Shape{part.rows, part.cols})) {
        return Status::Corrupt(StrFormat(
            "%s: MLP tensor %s has shape %s, expected [%lld, %lld] (layout %s, %d layers, d_ff %d, "
            "d_model %d)",
            p, part.name.c_str(), info->shape.ToString().c_str(),
            static_cast<long long>(part.rows), static_cast<long long>(part.cols),
            PackLayoutName(layout_), grp.n_layers, grp.d_ff, config_.d_model));
      }
      infos.push_back(info);
    }
    grp.tiled = tiled_bundles && TiledBundles(grp);
    WEIR_RETURN_IF_ERROR(FinishPackGroup(&grp).WithContext(f.path()));
    // An activation order (column layouts): each must be a permutation.
    for (const auto& [prefix, width, order, slot] :
         {std::tuple{kPackInOrderPrefix, int64_t{grp.d_model}, &grp.in_order, &grp.in_slot},
          std::tuple{kPackDownOrderPrefix, int64_t{grp.d_ff}, &grp.down_order, &grp.down_slot}}) {
      const std::string key = prefix + std::to_string(grp.index);
      if (!f.Has(key)) continue;
      if (!IsColumnLayout(layout_)) {
        return Status::Corrupt(StrFormat("%s: %s is set in a %s pack", p, key.c_str(),
                                         PackLayoutName(layout_)));
      }
      WEIR_ASSIGN_OR_RETURN(std::vector<int32_t> v, f.GetI32Array(key));
      if (Status st = SetPackOrder(v, width, key.c_str(), order, slot); !st.ok()) {
        return Status::Corrupt(StrFormat("%s: %s", p, st.message().c_str()));
      }
    }
    if (sparse_type) {
      // Sizes are the byte tensors'; their offset tables must be well formed (records are
      // checked against their bitmaps when they are used).
      grp.nbytes = infos[0]->nbytes;
      grp.in_nbytes = infos[1]->nbytes;
      for (size_t k = 0; k < 2; ++k) {
        const uint64_t rows = static_cast<uint64_t>(parts[k].rows);
        const int64_t len = parts[k].cols;
        const uint64_t table = 8 * (rows + 1);
        if (table > infos[k]->nbytes) {
          return Status::Corrupt(StrFormat("%s: MLP tensor %s is too small for its %llu offsets", p,
                                           parts[k].name.c_str(),
                                           static_cast<unsigned long long>(rows + 1)));
        }
        std::vector<uint64_t> offsets;
        WEIR_RETURN_IF_ERROR(ReadSparseOffsets(f.TensorData(*infos[k]), parts[k].rows, len,
                                               infos[k]->nbytes,
                                               StrFormat("%s: MLP tensor %s", p, parts[k].name.c_str()),
                                               &offsets));
      }
    }
    for (size_t k = 0; k < parts.size(); ++k) {
      const GgufTensorInfo* info = infos[k];
      const uint64_t want = k == 0 ? grp.nbytes : grp.in_nbytes;
      if (want != info->nbytes || info->offset % kPackAlignment != 0) {
        return Status::Corrupt(
            StrFormat("%s: MLP tensor %s: %llu bytes at offset %llu; expected %llu bytes at a "
                      "multiple of %u",
                      p, parts[k].name.c_str(), static_cast<unsigned long long>(info->nbytes),
                      static_cast<unsigned long long>(info->offset),
                      static_cast<unsigned long long>(want), kPackAlignment));
      }
      *parts[k].offset = info->offset;
    }
    groups_.push_back(grp);
    next = firsts[g] + counts[g];
  }
  if (next != n_layers) {
    return Status::Corrupt(StrFormat("%s: layer groups cover layers 0..%lld of %d", p,
                                     static_cast<long long>(next) - 1, n_layers));
  }

  // Static tensors: checked with the rules of every model file, the MLP tensors standing in as
  // views of the bundle tensors with the shapes they replace.
  ModelFile m;
  m.path = f.path();
  m.config = config_;
  m.tokenizer = tokenizer_;
  const auto present = [&](const std::string& n) { return f.FindTensor(n) != nullptr; };
  for (const std::string& name : PackStaticTensorNames(config_, present)) {
    const GgufTensorInfo* info = f.FindTensor(name);
    if (info == nullptr) {
      return Status::Corrupt(StrFormat("%s: static tensor %s is missing", p, name.c_str()));
    }
    if (!info->dtype) {
      return Status::Unsupported(
          StrFormat("%s: tensor %s has type %s (weir computes with F32, F16, BF16, Q8_0 and Q4_0)",
                    p, name.c_str(), GgmlTypeName(info->ggml_type).c_str()));
    }
    if (info->offset % kPackAlignment != 0) {
      return Status::Corrupt(StrFormat("%s: tensor %s at offset %llu is not %u-aligned", p,
                                       name.c_str(), static_cast<unsigned long long>(info->offset),
                                       kPackAlignment));
    }
    const Layout layout = tiled_static && TiledStatic(name, *info->dtype, info->shape)
                              ? Layout::kTiled16
                              : Layout::kRowMajor;
    statics_.push_back(PackTensor{name, *info->dtype, info->shape, info->offset, info->nbytes, layout});
    TensorView view{*info->dtype, info->shape, f.TensorData(*info)};
    view.layout = layout;
    m.tensors.emplace(name, view);
  }
  for (const PackGroup& g : groups_) {
    const void* data = f.data() + g.offset;
    for (int j = 0; j < g.n_layers; ++j) {
      const std::string b = StrFormat("blk.%d.", g.first_layer + j);
      m.tensors.emplace(b + "ffn_gate.weight", TensorView{g.dtype, Shape{g.d_ff, g.d_model}, data});
      m.tensors.emplace(b + "ffn_up.weight", TensorView{g.dtype, Shape{g.d_ff, g.d_model}, data});
      m.tensors.emplace(b + "ffn_down.weight", TensorView{g.dtype, Shape{g.d_model, g.d_ff}, data});
    }
  }
  return ValidateLlama(m);
}

}  // namespace weir::format
