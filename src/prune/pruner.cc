#include "prune/pruner.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "format/llama_gguf_writer.h"
#include "prune/structured.h"
#include "prune/tensor_edit.h"
#include "prune/unstructured.h"

namespace weir::prune {

std::string_view PruneModeName(PruneMode m) {
  switch (m) {
    case PruneMode::kUnstructured:
      return "unstructured";
    case PruneMode::kStructured:
      return "structured";
    case PruneMode::kComposite:
      return "composite";
  }
  return "?";
}

Result<PruneMode> ParsePruneMode(std::string_view name) {
  for (PruneMode m : {PruneMode::kUnstructured, PruneMode::kStructured, PruneMode::kComposite}) {
    if (name == PruneModeName(m)) return m;
  }
  return Status::InvalidArgument(
      StrFormat("unknown pruning mode '%.*s' (unstructured, structured or composite)",
                static_cast<int>(name.size()), name.data()));
}

namespace {

// llama.cpp infers the query scale of Gemma 2 27B and Gemma 3 27B from layer 0's head count
// (format::InferredAttnScale): a file with fewer heads would be read with another scale.
Status CheckHeadCountFixed(const format::ModelFile& model, const PruneOptions& options,
                           bool any_target) {
  const format::ArchSpec& arch = ArchOf(model.config);
  if (options.mode == PruneMode::kUnstructured || !any_target ||
      (options.mode == PruneMode::kComposite && options.structured_share <= 0) ||
      format::InferredAttnScale(arch.gguf_name, model.config) == 0) {
    return Status::Ok();
  }
  return Status::Unsupported(StrFormat(
      "%s: %s pruning would remove attention heads, but llama.cpp infers this %s model's query "
      "scale 1/sqrt(d_model / n_head) from its head count (%d layers); prune it unstructured",
      model.path.c_str(), std::string(PruneModeName(options.mode)).c_str(), arch.name,
      model.config.n_layers));
}

Status CheckShare(const PruneOptions& options) {
  if (!(options.structured_share >= 0 && options.structured_share <= 1)) {
    return Status::InvalidArgument(
        StrFormat("composite structured share %g is outside [0, 1]", options.structured_share));
  }
  return Status::Ok();
}

Status CheckInputs(const format::ModelFile& model, const std::vector<LayerProjections>& layers,
                   const ActivationNorms& norms, const PruneTargets& targets,
                   const PruneOptions& options) {
  const char* path = model.path.c_str();
  if (targets.n_layers() != static_cast<int>(layers.size()) ||
      targets.params.size() != targets.sparsity.size()) {
    return Status::InvalidArgument(
        StrFormat("%s: pruning targets cover %d layers, the model has %zu", path,
                  targets.n_layers(), layers.size()));
  }
  if (norms.n_layers() != static_cast<int>(layers.size())) {
    return Status::InvalidArgument(
        StrFormat("%s: activation norms cover %d layers, the model has %zu", path, norms.n_layers(),
                  layers.size()));
  }
  WEIR_RETURN_IF_ERROR(CheckShare(options));
  bool any_target = false;
  for (size_t l = 0; l < layers.size(); ++l) {
    for (Projection p : kAllProjections) {
      const double s = targets.at(static_cast<int>(l), p);
      if (!std::isfinite(s) || s < 0 || s >= 1) {
        return Status::InvalidArgument(
            StrFormat("%s: target of layer %zu projection %s is %g, outside [0, 1)", path, l,
                      std::string(ProjectionName(p)).c_str(), s));
      }
      any_target = any_target || s > 0;
      if (targets.params[l][static_cast<size_t>(p)] != layers[l].params(p)) {
        return Status::InvalidArgument(
            StrFormat("%s: targets were computed for %lld parameters in %s, it has %lld", path,
                      static_cast<long long>(targets.params[l][static_cast<size_t>(p)]),
                      layers[l].name(p).c_str(), static_cast<long long>(layers[l].params(p))));
      }
      const sparsity::Site site = ProjectionSite(p);
      if (norms.width(static_cast<int>(l), site) != layers[l][p].cols()) {
        return Status::InvalidArgument(StrFormat(
            "%s: activation norms of layer %zu site %s have %lld channels, %s has %lld columns",
            path, l, std::string(sparsity::SiteName(site)).c_str(),
            static_cast<long long>(norms.width(static_cast<int>(l), site)),
            layers[l].name(p).c_str(), static_cast<long long>(layers[l][p].cols())));
      }
    }
  }
  return CheckHeadCountFixed(model, options, any_target);
}

}  // namespace

Status CheckPrunable(const format::ModelFile& model, const PruneOptions& options, double target) {
  WEIR_RETURN_IF_ERROR(CheckTargetFraction(target));
  WEIR_RETURN_IF_ERROR(CheckShare(options));
  WEIR_RETURN_IF_ERROR(BindProjections(model).status());
  WEIR_RETURN_IF_ERROR(CheckHeadCountFixed(model, options, target > 0));
  // What the GGUF writer refuses of this model (a sliding window GGUF cannot state for the row,
  // a query scale without a key, ...) it refuses of the pruned one too: ask it now. Pruning
  // changes only per-layer dims, which the writer always states.
  WEIR_RETURN_IF_ERROR(format::ValidateLlama(model));
  format::GgufWriter scratch;
  return format::AddLlamaGgufMetadata(model.config, model.tokenizer, model.path,
                                      format::LlamaFileType(DType::kF32), &scratch)
      .WithContext(model.path + ": the pruned model could not be written as GGUF");
}

Result<PrunedModel> Prune(const format::ModelFile& model, const ActivationNorms& norms,
                          const PruneTargets& targets, const PruneOptions& options,
                          ThreadPool* pool) {
  WEIR_ASSIGN_OR_RETURN(std::vector<LayerProjections> layers, BindProjections(model));
  WEIR_RETURN_IF_ERROR(CheckInputs(model, layers, norms, targets, options));
  const double share = options.mode == PruneMode::kUnstructured ? 0.0
                       : options.mode == PruneMode::kStructured ? 1.0
                                                                : options.structured_share;
  PrunedModel out;
  out.file = model;
  auto backing = std::make_shared<OwnedTensors>();
  PruneReport& rep = out.report;
  rep.projections.resize(layers.size());

  for (size_t li = 0; li < layers.size(); ++li) {
    const int l = static_cast<int>(li);
    LayerProjections L = layers[li];
    const int hd = L.head_dim;
    rep.dims_before.push_back({L.n_head, L.n_head_kv, L.d_ff});
    std::array<std::vector<float>, sparsity::kNumSites> site_norms;
    for (int s = 0; s < sparsity::kNumSites; ++s)
      site_norms[static_cast<size_t>(s)] = norms.Norms(l, static_cast<sparsity::Site>(s));
    std::array<const float*, kNumProjections> norm{};
    for (Projection p : kAllProjections)
      norm[static_cast<size_t>(p)] = site_norms[static_cast<size_t>(ProjectionSite(p))].data();

    // 1. How many units stay (fixed before the unstructured step; composite picks which later).
    const HeadCounts heads =
        ChooseHeadCounts(L.n_head, L.n_head_kv, hd, L.d_model, share * targets.BlockMean(l, true),
                         BlockSize(L[Projection::kO].dtype));
    const int keep_ff = ChooseNeuronCount(L.d_ff, share * targets.BlockMean(l, false),
                                          BlockSize(L[Projection::kDown].dtype));
    const bool drop_heads = heads.n_head() != L.n_head;
    const bool drop_ff = keep_ff != L.d_ff;
    auto kept_fraction = [&](Projection p) {
      switch (p) {
        case Projection::kQ:
        case Projection::kO:
          return static_cast<double>(heads.n_head()) / L.n_head;
        case Projection::kK:
        case Projection::kV:
          return static_cast<double>(heads.n_head_kv) / L.n_head_kv;
        default:
          return static_cast<double>(keep_ff) / L.d_ff;
      }
    };

    // 2. Unstructured: zero the lowest-omega weights of each row.
    std::array<std::unique_ptr<OwnedTensor>, kNumProjections> edited;
    std::array<std::unique_ptr<OwnedTensor>, 3> edited_bias;  // q, k, v
    for (Projection p : kAllProjections) {
      if (share >= 1) break;
      const double u = std::max(0.0, 1.0 - (1.0 - targets.at(l, p)) / kept_fraction(p));
      if (PrunedPerRow(u, L[p].cols()) == 0) continue;
      WEIR_ASSIGN_OR_RETURN(OwnedTensor copy, CopyTensor(L[p]));
      edited[static_cast<size_t>(p)] = std::make_unique<OwnedTensor>(std::move(copy));
      PruneUnstructured(edited[static_cast<size_t>(p)].get(), norm[static_cast<size_t>(p)], u,
                        pool);
      L.w[static_cast<size_t>(p)] = edited[static_cast<size_t>(p)]->view;
    }

    // 3. Structured: remove the least important heads / groups and neurons.
    auto replace = [&](Projection p, Result<OwnedTensor> r) -> Status {
      if (!r.ok()) return r.status().WithContext(L.name(p));
      edited[static_cast<size_t>(p)] = std::make_unique<OwnedTensor>(std::move(r).value());
      L.w[static_cast<size_t>(p)] = edited[static_cast<size_t>(p)]->view;
      return Status::Ok();
    };
    std::vector<int64_t> q_rows, ff_idx;  // kept q rows (= o columns) and neurons (= down columns)
    if (drop_heads) {
      const HeadSelection sel =
          SelectHeads(AttentionImportance(L, norm, pool), L.n_head, L.n_head_kv, heads);
      q_rows = UnitIndices(sel.heads, hd);
      const std::vector<int64_t> kv_rows = UnitIndices(sel.groups, hd);
      WEIR_RETURN_IF_ERROR(replace(Projection::kQ, SelectRows(L[Projection::kQ], q_rows)));
      WEIR_RETURN_IF_ERROR(replace(Projection::kK, SelectRows(L[Projection::kK], kv_rows)));
      WEIR_RETURN_IF_ERROR(replace(Projection::kV, SelectRows(L[Projection::kV], kv_rows)));
      WEIR_RETURN_IF_ERROR(replace(Projection::kO, SelectColumns(L[Projection::kO], q_rows, pool)));
      // The q/k/v biases (qwen2; optional on every row) lose the entries of the removed rows.
      for (Projection p : {Projection::kQ, Projection::kK, Projection::kV}) {
        const size_t i = static_cast<size_t>(p);
        if (!L.bias[i].valid()) continue;
        auto r = SelectEntries(L.bias[i], p == Projection::kQ ? q_rows : kv_rows);
        if (!r.ok()) return r.status().WithContext(L.bias_names[i]);
        edited_bias[i] = std::make_unique<OwnedTensor>(std::move(r).value());
        L.bias[i] = edited_bias[i]->view;
      }
      L.n_head = heads.n_head();
      L.n_head_kv = heads.n_head_kv;
    }
    if (drop_ff) {
      const std::vector<int> keep = SelectNeurons(NeuronImportance(L, norm, pool), keep_ff);
      ff_idx = UnitIndices(keep, 1);
      WEIR_RETURN_IF_ERROR(replace(Projection::kGate, SelectRows(L[Projection::kGate], ff_idx)));
      WEIR_RETURN_IF_ERROR(replace(Projection::kUp, SelectRows(L[Projection::kUp], ff_idx)));
      WEIR_RETURN_IF_ERROR(
          replace(Projection::kDown, SelectColumns(L[Projection::kDown], ff_idx, pool)));
      L.d_ff = keep_ff;
    }

    // 3b. Composite: o and down lost columns, and the removed (least important) columns held
    // more than their share of the zeros, so their rows are topped up to round((1 - p) * the
    // original width) non-zeros. Existing zeros have omega 0 and are counted first.
    for (Projection p : {Projection::kO, Projection::kDown}) {
      const std::vector<int64_t>& kept = p == Projection::kO ? q_rows : ff_idx;
      if (share <= 0 || share >= 1 || kept.empty()) continue;
      const int64_t cols = L[p].cols();
      const int64_t nonzero =
          std::llround((1.0 - targets.at(l, p)) * static_cast<double>(layers[li][p].cols()));
      const int64_t zeros = cols - nonzero;
      if (zeros <= 0) continue;
      std::vector<float> kept_norm(kept.size());
      for (size_t j = 0; j < kept.size(); ++j) kept_norm[j] = norm[static_cast<size_t>(p)][kept[j]];
      PruneUnstructured(edited[static_cast<size_t>(p)].get(), kept_norm.data(),
                        static_cast<double>(zeros) / static_cast<double>(cols), pool);
    }

    // 4. Install the new tensors and account.
    for (Projection p : kAllProjections) {
      ProjectionResult& r = rep.projections[li][static_cast<size_t>(p)];
      r.target = targets.at(l, p);
      r.params_before = layers[li].params(p);
      r.params_after = L.params(p);
      r.nonzero_after = CountNonzero(L[p], pool);
      rep.params_before += r.params_before;
      rep.params_after += r.params_after;
      rep.nonzero_after += r.nonzero_after;
      if (edited[static_cast<size_t>(p)]) {
        out.file.tensors[L.name(p)] = L[p];
        backing->tensors.push_back(std::move(edited[static_cast<size_t>(p)]));
      }
    }
    for (size_t i = 0; i < edited_bias.size(); ++i) {
      if (!edited_bias[i]) continue;
      out.file.tensors[L.bias_names[i]] = L.bias[i];
      backing->tensors.push_back(std::move(edited_bias[i]));
    }
    rep.dims_after.push_back({L.n_head, L.n_head_kv, L.d_ff});
  }

  format::LlamaConfig& c = out.file.config;
  c.layers = rep.dims_after;
  c.n_head = c.layers[0].n_head;
  c.n_head_kv = c.layers[0].n_head_kv;
  c.d_ff = c.layers[0].d_ff;
  if (!backing->tensors.empty()) out.file.backing.push_back(std::move(backing));
  return out;
}

}  // namespace weir::prune
