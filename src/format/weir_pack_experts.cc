// WriteExpertPack: a mixture of experts as a weir pack (the experts layout, weir_pack_format.h):
// the static tensors as the source has them, then each layer's experts as page-aligned records
// of gate, up and down, so that one expert is one read.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "format/gguf_writer.h"
#include "format/llama_gguf_writer.h"
#include "format/weir_pack_writer.h"

namespace weir::format {
namespace {

const char* const kStacks[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

bool IsExpertStack(const std::string& name) {
  for (const char* s : kStacks) {
    if (name.ends_with(std::string(".") + s + ".weight")) return true;
  }
  return false;
}

// One expert's record of the channel layout, made whole (the writer asks for its pages in
// order, a few MiB at a time, so each expert is transposed once).
class ChannelRecords {
 public:
  ChannelRecords(const PackGroup& g, const std::array<TensorView, 3>& stacks)
      : g_(g), stacks_(stacks) {}

  // The bytes [lo, hi) of record x into dst.
  Status Copy(uint64_t x, uint64_t lo, uint64_t hi, uint8_t* dst) {
    if (x != made_) WEIR_RETURN_IF_ERROR(Make(x));
    std::memcpy(dst, record_.data() + lo, static_cast<size_t>(hi - lo));
    return Status::Ok();
  }

 private:
  Status Make(uint64_t x) {
    const int64_t e = g_.ExpertInRecord(static_cast<int64_t>(x));
    record_.assign(static_cast<size_t>(g_.expert_stride), 0);
    const size_t row = static_cast<size_t>(g_.channel_bytes / 2);
    transposed_.resize(static_cast<size_t>(g_.d_model) * row);
    for (int op = 0; op < 2; ++op) {
      const TensorView& s = stacks_[static_cast<size_t>(op)];
      TensorView w{s.dtype, Shape{s.shape[1], s.shape[2]},
                   static_cast<const uint8_t*>(s.data) + static_cast<size_t>(e) * s.nbytes() /
                                                             static_cast<size_t>(g_.n_expert)};
      WEIR_RETURN_IF_ERROR(TransposeWeight(w, g_.expert_type[op], transposed_.data()));
      for (int64_t i = 0; i < g_.d_model; ++i) {
        std::memcpy(record_.data() + static_cast<size_t>(i) * g_.channel_bytes + op * row,
                    transposed_.data() + static_cast<size_t>(i) * row, row);
      }
    }
    const TensorView& d = stacks_[2];
    const size_t down = d.nbytes() / static_cast<size_t>(g_.n_expert);
    std::memcpy(record_.data() + g_.expert_part[2],
                static_cast<const uint8_t*>(d.data) + static_cast<size_t>(e) * down, down);
    made_ = x;
    return Status::Ok();
  }

  const PackGroup g_;
  const std::array<TensorView, 3> stacks_;
  uint64_t made_ = UINT64_MAX;
  std::vector<uint8_t> record_, transposed_;
};

}  // namespace

Status WriteExpertPack(const ModelFile& model, const std::string& path, const PackOptions& options,
                       const std::function<void(double)>& progress) {
  const LlamaConfig& c = model.config;
  if (options.type) {
    return Status::Unsupported(path + ": --type with a mixture of experts: convert the model first "
                                      "(weir convert --type T), then pack it");
  }
  if (options.layout != PackLayout::kBundles && options.layout != PackLayout::kExperts) {
    return Status::InvalidArgument(path + ": a mixture of experts is packed with --layout experts "
                                          "(its default), not " +
                                   PackLayoutName(options.layout));
  }
  if (options.group_size != 1) {
    return Status::InvalidArgument(path + ": --group: a mixture of experts is packed layer by "
                                          "layer (the unit of reading is one expert)");
  }
  if (!options.in_score.empty() || !options.down_score.empty()) {
    return Status::InvalidArgument(path + ": a channel order is for column packs; a mixture of "
                                          "experts is ordered by expert (expert_score)");
  }
  if (!options.expert_score.empty() &&
      static_cast<int>(options.expert_score.size()) != c.n_layers) {
    return Status::InvalidArgument(StrFormat("%s: expert scores for %zu layers, the model has %d",
                                             path.c_str(), options.expert_score.size(),
                                             c.n_layers));
  }
  // Each layer's group: the stacks' types (one set for every layer) and the record geometry.
  std::vector<PackGroup> groups;
  std::vector<std::array<TensorView, 3>> stacks;
  for (int l = 0; l < c.n_layers; ++l) {
    DType types[3];
    std::array<TensorView, 3> v;
    for (int p = 0; p < 3; ++p) {
      const std::string name = StrFormat("blk.%d.%s.weight", l, kStacks[p]);
      const TensorView* t = model.Find(name);
      if (t == nullptr) return Status::Corrupt(path + ": " + name + " is missing");
      if (t->layout != Layout::kRowMajor) {
        return Status::Unsupported(path + ": " + name + " is held tiled; load the model row-major");
      }
      v[static_cast<size_t>(p)] = *t;
      types[p] = t->dtype;
      if (l > 0 && t->dtype != groups[0].expert_type[p]) {
        return Status::Unsupported(StrFormat("%s: %s is %s but layer 0's is %s; weir packs one set "
                                             "of expert types (convert with --type first)",
                                             path.c_str(), name.c_str(), DTypeName(t->dtype),
                                             DTypeName(groups[0].expert_type[p])));
      }
    }
    Result<PackGroup> g = ExpertGroup(c, l, types, options.expert_columns);
    if (!g.ok()) return g.status().WithContext(path);
    if (!options.expert_score.empty()) {
      const std::vector<double>& s = options.expert_score[static_cast<size_t>(l)];
      if (static_cast<int>(s.size()) != c.n_expert) {
        return Status::InvalidArgument(StrFormat("%s: layer %d has %zu expert scores, the model "
                                                 "%d experts",
                                                 path.c_str(), l, s.size(), c.n_expert));
      }
      WEIR_RETURN_IF_ERROR(SetPackOrder(OrderByScore(s), c.n_expert, "expert order",
                                        &g->expert_order, &g->expert_record)
                               .WithContext(path));
    }
    groups.push_back(*g);
    stacks.push_back(v);
  }

  GgufWriter w(kPackAlignment);
  std::string name;
  for (const auto& [k, v] : model.metadata) {
    if (k == "general.name") name = v;
  }
  if (name.empty()) {
    const size_t slash = model.path.find_last_of('/');
    name = slash == std::string::npos ? model.path : model.path.substr(slash + 1);
  }
  WEIR_RETURN_IF_ERROR(
      AddLlamaGgufMetadata(c, model.tokenizer, name, LlamaFileType(groups[0].expert_type[0]), &w)
          .WithContext(path));
  w.AddU32(kPackVersionKey, kPackVersion);
  w.AddString(kPackLayoutKey,
              options.expert_columns ? kPackLayoutExpertColumns : kPackLayoutExperts);
  w.AddU32(kPackGroupSizeKey, 1);
  std::vector<uint32_t> firsts, counts;
  for (int l = 0; l < c.n_layers; ++l) {
    firsts.push_back(static_cast<uint32_t>(l));
    counts.push_back(1);
  }
  w.Add(kPackGroupFirstKey, GgufValue::U32Array(firsts));
  w.Add(kPackGroupCountKey, GgufValue::U32Array(counts));
  std::vector<uint32_t> types;
  for (DType t : groups[0].expert_type) types.push_back(GgmlId(t));
  w.Add(kPackExpertTypesKey, GgufValue::U32Array(types));
  w.AddString(kPackDownTKey, !options.expert_columns         ? "none"
                            : IsQuantized(groups[0].expert_type[0]) ? "requantized"
                                                                    : "exact");
  for (const PackGroup& g : groups) {
    if (!g.expert_order.empty()) {
      w.Add(kPackExpertOrderPrefix + std::to_string(g.first_layer),
            GgufValue::I32Array(g.expert_order));
    }
  }
  {
    const size_t slash = model.path.find_last_of('/');
    w.AddString(kPackSourceKey, slash == std::string::npos ? model.path : model.path.substr(slash + 1));
  }
  // Static tensors: everything but the expert stacks, as stored.
  for (const std::string& n : model.tensor_order) {
    if (IsExpertStack(n)) continue;
    const TensorView* t = model.Find(n);
    if (t == nullptr) continue;
    if (t->layout != Layout::kRowMajor) {
      return Status::Unsupported(path + ": " + n + " is held tiled; load the model row-major");
    }
    w.AddTensor(n, t->dtype, t->shape, t->data);
  }
  // The experts, record by record (record x holds expert g.ExpertInRecord(x)).
  for (size_t l = 0; l < groups.size(); ++l) {
    const PackGroup g = groups[l];
    const std::array<TensorView, 3> v = stacks[l];
    const int64_t pages = static_cast<int64_t>(g.nbytes / kPackAlignment);
    if (g.expert_columns) {
      auto records = std::make_shared<ChannelRecords>(g, v);
      w.AddByteTensor(PackExpertTensorName(static_cast<int>(l)), pages, kPackAlignment,
                      [g, records](int64_t b, int64_t e, uint8_t* dst) -> Status {
                        const uint64_t begin = static_cast<uint64_t>(b) * kPackAlignment;
                        const uint64_t end = static_cast<uint64_t>(e) * kPackAlignment;
                        for (uint64_t at = begin; at < end;) {
                          const uint64_t x = at / g.expert_stride;
                          const uint64_t to = std::min(end, (x + 1) * g.expert_stride);
                          WEIR_RETURN_IF_ERROR(records->Copy(x, at - x * g.expert_stride,
                                                             to - x * g.expert_stride,
                                                             dst + (at - begin)));
                          at = to;
                        }
                        return Status::Ok();
                      });
      continue;
    }
    w.AddByteTensor(PackExpertTensorName(static_cast<int>(l)), pages, kPackAlignment,
                    [g, v](int64_t b, int64_t e, uint8_t* dst) -> Status {
                      const uint64_t begin = static_cast<uint64_t>(b) * kPackAlignment;
                      const uint64_t end = static_cast<uint64_t>(e) * kPackAlignment;
                      std::memset(dst, 0, static_cast<size_t>(end - begin));
                      const uint64_t first = begin / g.expert_stride;
                      const uint64_t last = (end - 1) / g.expert_stride;
                      for (uint64_t x = first; x <= last; ++x) {
                        for (int p = 0; p < 3; ++p) {
                          const TensorView& s = v[static_cast<size_t>(p)];
                          const uint64_t part = s.nbytes() / static_cast<uint64_t>(g.n_expert);
                          const uint64_t at = x * g.expert_stride + g.expert_part[p];
                          const uint64_t lo = std::max(at, begin), hi = std::min(at + part, end);
                          if (lo >= hi) continue;
                          const auto* src = static_cast<const uint8_t*>(
                              static_cast<const void*>(s.data));
                          const uint64_t e = static_cast<uint64_t>(g.ExpertInRecord(
                              static_cast<int64_t>(x)));
                          std::memcpy(dst + (lo - begin), src + e * part + (lo - at),
                                      static_cast<size_t>(hi - lo));
                        }
                      }
                      return Status::Ok();
                    });
  }
  return w.Write(path, progress);
}

}  // namespace weir::format
