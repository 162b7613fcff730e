#include "format/weir_pack_format.h"

#include <algorithm>

#include "format/weights_in_memory.h"

#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/checked_math.h"
#include "kernels/sparse_column.h"
#include "tensor/quantize.h"

namespace weir::format {

bool TiledStatic(const std::string& name, DType dtype, const Shape& shape) {
  return IsLinearWeight(name) && (dtype == DType::kQ8_0 || dtype == DType::kQ4_0) &&
         shape.ndim == 2 && shape[0] > 0 && shape[0] % 16 == 0;
}

std::string PackBundleTensorName(int group) { return StrFormat("weir.ffn_bundles.%d", group); }
std::string PackInputTensorName(int group) { return StrFormat("weir.ffn_in.%d", group); }
std::string PackDownTensorName(int group) { return StrFormat("weir.ffn_down.%d", group); }

const char* PackLayoutName(PackLayout layout) {
  switch (layout) {
    case PackLayout::kColumns:
      return "columns";
    case PackLayout::kSparseColumns:
      return "sparse-columns";
    case PackLayout::kExperts:
      return "experts";
    case PackLayout::kBundles:
      break;
  }
  return "bundles";
}

Status ReadSparseOffsets(const uint8_t* table, int64_t rows, int64_t len, uint64_t nbytes,
                         const std::string& what, std::vector<uint64_t>* out) {
  const uint64_t table_bytes = 8 * (static_cast<uint64_t>(rows) + 1);
  out->resize(static_cast<size_t>(rows) + 1);
  std::memcpy(out->data(), table, table_bytes);
  for (size_t r = 0; r < out->size(); ++r) {
    const uint64_t o = (*out)[r];
    const bool ok = r == 0 ? o == table_bytes
                           : o >= (*out)[r - 1] + kernels::SparseBitmapBytes(len) && o <= nbytes;
    if (!ok) {
      return Status::Corrupt(StrFormat("%s: record offset %zu = %llu is out of order or outside "
                                       "the tensor", what.c_str(), r,
                                       static_cast<unsigned long long>(o)));
    }
  }
  return Status::Ok();
}

void EncodeSparseRecord(DType t, const float* row, int64_t len, uint8_t* out) {
  const uint64_t bitmap_bytes = kernels::SparseBitmapBytes(len);
  std::memset(out, 0, bitmap_bytes);
  std::vector<float> values;
  for (int64_t k = 0; k < len; ++k) {
    if (row[k] == 0.0f) continue;
    uint64_t word;
    std::memcpy(&word, out + 8 * (k / 64), 8);
    word |= uint64_t{1} << (k % 64);
    std::memcpy(out + 8 * (k / 64), &word, 8);
    values.push_back(row[k]);
  }
  const int64_t bs = BlockSize(t);
  values.resize((values.size() + bs - 1) / bs * bs, 0.0f);
  if (!values.empty())
    QuantizeRow(t, values.data(), out + bitmap_bytes, static_cast<int64_t>(values.size()));
}

std::vector<std::pair<int, int>> PlanPackGroups(const LlamaConfig& config, int group_size) {
  WEIR_CHECK(group_size >= 1 && group_size <= kMaxPackGroupSize);
  std::vector<std::pair<int, int>> groups;
  auto d_ff_of = [&](int l) {
    return static_cast<int>(config.layers.size()) == config.n_layers
               ? config.layers[static_cast<size_t>(l)].d_ff
               : config.d_ff;
  };
  int l = 0;
  while (l < config.n_layers) {
    int n = 1;
    while (n < group_size && l + n < config.n_layers && d_ff_of(l + n) == d_ff_of(l)) ++n;
    groups.emplace_back(l, n);
    l += n;
  }
  return groups;
}

std::string PackExpertTensorName(int layer) { return "weir.ffn_experts." + std::to_string(layer); }

namespace {

Status FinishExpertColumns(PackGroup* g) {
  const DType t = g->expert_type[0], down = g->expert_type[2];
  const bool gatherable = t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 ||
                          t == DType::kQ8_0 || t == DType::kQ4_0;
  if (g->expert_type[1] != t || !gatherable) {
    return Status::InvalidArgument(StrFormat(
        "expert layer %d: channel records need gate and up of one type among f32, f16, bf16, "
        "q8_0, q4_0 (gate %s, up %s); convert the model first (weir convert --type q4_0)",
        g->first_layer, DTypeName(t), DTypeName(g->expert_type[1])));
  }
  if (g->d_ff % BlockSize(t) != 0 || g->d_ff % BlockSize(down) != 0) {
    return Status::InvalidArgument(StrFormat(
        "expert layer %d: channel records of d_ff %d values are not whole %s blocks of %d",
        g->first_layer, g->d_ff, DTypeName(g->d_ff % BlockSize(t) != 0 ? t : down),
        BlockSize(g->d_ff % BlockSize(t) != 0 ? t : down)));
  }
  g->channel_bytes = 2 * RowBytes(t, g->d_ff);
  uint64_t channels = 0, down_bytes = 0;
  if (!CheckedMul(g->channel_bytes, static_cast<uint64_t>(g->d_model), &channels) ||
      !CheckedMul(RowBytes(down, g->d_ff), static_cast<uint64_t>(g->d_model), &down_bytes) ||
      channels > (uint64_t{1} << 40) || down_bytes > (uint64_t{1} << 40)) {
    return Status::InvalidArgument(StrFormat("expert layer %d: sizes overflow", g->first_layer));
  }
  g->down_records = static_cast<int64_t>((down_bytes + g->channel_bytes - 1) / g->channel_bytes);
  g->expert_part[0] = 0;
  g->expert_part[1] = RowBytes(t, g->d_ff);
  g->expert_part[2] = channels;
  const uint64_t used = channels + static_cast<uint64_t>(g->down_records) * g->channel_bytes;
  g->expert_stride = (used + kPackAlignment - 1) / kPackAlignment * kPackAlignment;
  if (!CheckedMul(g->expert_stride, static_cast<uint64_t>(g->n_expert), &g->nbytes)) {
    return Status::InvalidArgument(StrFormat("expert layer %d: sizes overflow", g->first_layer));
  }
  g->dtype = t;
  g->row_bytes = RowBytes(t, g->d_ff);
  return Status::Ok();
}

}  // namespace

Status FinishExpertGroup(PackGroup* g) {
  if (g->d_model <= 0 || g->d_ff <= 0 || g->n_expert <= 0) {
    return Status::InvalidArgument(StrFormat("expert layer %d: d_model %d, d_ff %d, %d experts",
                                             g->first_layer, g->d_model, g->d_ff, g->n_expert));
  }
  if (g->expert_columns) return FinishExpertColumns(g);
  const int64_t rows[3] = {g->d_ff, g->d_ff, g->d_model};
  const int64_t cols[3] = {g->d_model, g->d_model, g->d_ff};
  uint64_t at = 0;
  for (int p = 0; p < 3; ++p) {
    const DType t = g->expert_type[p];
    if (cols[p] % BlockSize(t) != 0) {
      return Status::InvalidArgument(StrFormat("expert layer %d: rows of %lld values are not whole "
                                               "%s blocks of %d",
                                               g->first_layer, static_cast<long long>(cols[p]),
                                               DTypeName(t), BlockSize(t)));
    }
    uint64_t part = 0;
    if (!CheckedMul(RowBytes(t, cols[p]), static_cast<uint64_t>(rows[p]), &part) ||
        part > (uint64_t{1} << 40)) {
      return Status::InvalidArgument(StrFormat("expert layer %d: sizes overflow", g->first_layer));
    }
    g->expert_part[p] = at;
    at += (part + kPackAlignment - 1) / kPackAlignment * kPackAlignment;
  }
  g->expert_stride = at;
  if (!CheckedMul(at, static_cast<uint64_t>(g->n_expert), &g->nbytes)) {
    return Status::InvalidArgument(StrFormat("expert layer %d: sizes overflow", g->first_layer));
  }
  g->dtype = g->expert_type[0];
  g->row_bytes = RowBytes(g->dtype, g->d_model);
  return Status::Ok();
}

Result<PackGroup> ExpertGroup(const LlamaConfig& c, int layer, const DType types[3],
                              bool columns) {
  PackGroup g;
  g.expert_columns = columns;
  g.index = layer;
  g.first_layer = layer;
  g.n_layers = 1;
  g.layout = PackLayout::kExperts;
  g.d_model = c.d_model;
  g.d_ff = c.layers[static_cast<size_t>(layer)].d_ff;
  g.n_expert = c.n_expert;
  for (int k = 0; k < 3; ++k) g.expert_type[k] = types[k];
  WEIR_RETURN_IF_ERROR(FinishExpertGroup(&g));
  return g;
}

Status FinishPackGroup(PackGroup* g) {
  if (g->d_model <= 0 || g->d_ff <= 0 || g->n_layers <= 0) {
    return Status::InvalidArgument(StrFormat("pack group %d: d_model %d, d_ff %d, %d layers",
                                             g->index, g->d_model, g->d_ff, g->n_layers));
  }
  if (g->d_model % BlockSize(g->dtype) != 0) {
    return Status::InvalidArgument(
        StrFormat("pack group %d: d_model %d is not whole %s blocks of %d", g->index, g->d_model,
                  DTypeName(g->dtype), BlockSize(g->dtype)));
  }
  g->row_bytes = RowBytes(g->dtype, g->d_model);
  const bool columns = IsColumnLayout(g->layout);
  if (columns && g->d_ff % BlockSize(g->dtype) != 0) {
    return Status::InvalidArgument(
        StrFormat("pack group %d: d_ff %d is not whole %s blocks of %d", g->index, g->d_ff,
                  DTypeName(g->dtype), BlockSize(g->dtype)));
  }
  const uint64_t ops = columns ? 1 : kBundleOps;
  uint64_t bundle = 0, total = 0;
  if (!CheckedMul(g->row_bytes, static_cast<uint64_t>(g->n_layers) * ops, &bundle) ||
      !CheckedMul(bundle, static_cast<uint64_t>(g->d_ff), &total)) {
    return Status::InvalidArgument(StrFormat("pack group %d: bundle sizes overflow", g->index));
  }
  g->bundle_bytes = static_cast<size_t>(bundle);
  g->nbytes = total;
  g->in_row_bytes = 0;
  g->in_nbytes = 0;
  if (columns) {
    g->in_row_bytes = RowBytes(g->dtype, g->d_ff);
    uint64_t in = 0;
    if (!CheckedMul(static_cast<uint64_t>(g->in_row_bytes), static_cast<uint64_t>(g->in_rows()),
                    &in)) {
      return Status::InvalidArgument(StrFormat("pack group %d: input sizes overflow", g->index));
    }
    g->in_nbytes = in;
  }
  return Status::Ok();
}

DType PackMlpType(const std::vector<DType>& sources, std::optional<DType> forced) {
  if (forced) return *forced;
  if (sources.empty()) return DType::kQ8_0;
  const DType t = sources.front();
  const bool same = std::all_of(sources.begin(), sources.end(), [&](DType s) { return s == t; });
  if (same && kBundleChunk % BlockSize(t) == 0) return t;
  auto is_float = [](DType s) { return s == DType::kF32 || s == DType::kF16 || s == DType::kBF16; };
  if (std::all_of(sources.begin(), sources.end(), is_float)) return DType::kF32;
  return DType::kQ8_0;
}

bool IsPackedMlpRole(TensorRole role) {
  return role == TensorRole::kFfnGate || role == TensorRole::kFfnUp ||
         role == TensorRole::kFfnDown;
}

std::vector<std::string> PackStaticTensorNames(
    const LlamaConfig& c, const std::function<bool(const std::string&)>& present) {
  const ArchSpec& arch = *c.arch;
  auto wanted = [&](const TensorSpec& t, const std::string& name) {
    if (IsPackedMlpRole(t.role)) return false;
    if (t.role == TensorRole::kOutput && c.tied_output) return false;
    return t.required || present(name);
  };
  auto attention = [](TensorRole r) {
    return r == TensorRole::kAttnQ || r == TensorRole::kAttnK || r == TensorRole::kAttnV ||
           r == TensorRole::kAttnOutput;
  };
  std::vector<std::string> names;
  // Global tensors but the RoPE factors, in table order with the embedding first.
  for (const TensorSpec& t : arch.tensors) {
    if (t.per_layer || t.role == TensorRole::kRopeFreqs) continue;
    if (t.role == TensorRole::kTokenEmbd) {
      names.insert(names.begin(), t.name);
    } else if (wanted(t, t.name)) {
      names.push_back(t.name);
    }
  }
  for (int l = 0; l < c.n_layers; ++l) {
    // The attention matrices back to back where q is (streamed attention reads them as one
    // extent), the layer's small tensors around them in table order.
    for (const TensorSpec& t : arch.tensors) {
      if (!t.per_layer) continue;
      const std::string name = TensorName(t, l);
      if (t.role == TensorRole::kAttnQ) {
        for (const TensorSpec& a : arch.tensors) {
          if (a.per_layer && attention(a.role)) names.push_back(TensorName(a, l));
        }
        continue;
      }
      if (attention(t.role) || !wanted(t, name)) continue;
      names.push_back(name);
    }
  }
  for (const TensorSpec& t : arch.tensors) {
    if (t.role == TensorRole::kRopeFreqs && present(t.name)) names.push_back(t.name);
  }
  return names;
}

Status SetPackOrder(const std::vector<int32_t>& order, int64_t n, const char* what,
                    std::vector<int32_t>* order_out, std::vector<int32_t>* slot_out) {
  order_out->clear();
  slot_out->clear();
  if (order.empty()) return Status::Ok();
  if (static_cast<int64_t>(order.size()) != n) {
    return Status::InvalidArgument(StrFormat("%s has %zu entries, expected %lld", what,
                                             order.size(), static_cast<long long>(n)));
  }
  std::vector<int32_t> slot(order.size(), -1);
  for (size_t s = 0; s < order.size(); ++s) {
    const int32_t v = order[s];
    if (v < 0 || v >= n || slot[static_cast<size_t>(v)] >= 0) {
      return Status::InvalidArgument(
          StrFormat("%s is not a permutation of 0..%lld (entry %zu = %d)", what,
                    static_cast<long long>(n - 1), s, v));
    }
    slot[static_cast<size_t>(v)] = static_cast<int32_t>(s);
  }
  *order_out = order;
  *slot_out = std::move(slot);
  return Status::Ok();
}

std::vector<int32_t> OrderByScore(const std::vector<double>& score) {
  std::vector<int32_t> order(score.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)];
  });
  return order;
}

}  // namespace weir::format
