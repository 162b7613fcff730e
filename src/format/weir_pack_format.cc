#include "format/weir_pack_format.h"

#include "base/check.h"
#include "base/checked_math.h"

namespace weir::format {

std::string PackBundleTensorName(int group) { return StrFormat("weir.ffn_bundles.%d", group); }

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
  uint64_t bundle = 0, total = 0;
  if (!CheckedMul(g->row_bytes, static_cast<uint64_t>(g->n_layers) * kBundleOps, &bundle) ||
      !CheckedMul(bundle, static_cast<uint64_t>(g->d_ff), &total)) {
    return Status::InvalidArgument(StrFormat("pack group %d: bundle sizes overflow", g->index));
  }
  g->bundle_bytes = static_cast<size_t>(bundle);
  g->nbytes = total;
  return Status::Ok();
}

std::vector<std::string> PackStaticTensorNames(const LlamaConfig& c) {
  std::vector<std::string> names = {"token_embd.weight", "output_norm.weight"};
  if (!c.tied_output) names.push_back("output.weight");
  static const char* kPerLayer[] = {"attn_norm", "attn_q",      "attn_k",
                                    "attn_v",    "attn_output", "ffn_norm"};
  for (int l = 0; l < c.n_layers; ++l) {
    for (const char* t : kPerLayer) names.push_back(StrFormat("blk.%d.%s.weight", l, t));
  }
  return names;
}

}  // namespace weir::format
