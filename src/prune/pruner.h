// Prune: applies per-projection targets (targets.h) to a model, giving a new ModelFile.
//
// Modes (Mosaic §3.2-3.3):
//   unstructured  every projection (n, m) has p_{n,m} of each output row zeroed (Wanda);
//                 shapes and file size unchanged.
//   structured    attention heads / key-value groups and MLP neurons are removed
//                 (structured.h). A layer's attention block loses the parameter-weighted mean
//                 of its q, k, v, o targets, its MLP that of gate, up, down -- the units couple
//                 those projections, so one block-level fraction is what can be honoured. The
//                 result has per-layer head counts and d_ff.
//   composite     unstructured first, then structured: a share s (structured_share, default
//                 0.5) of each block's target is removed as whole units and the rest zeroed.
//                 The unit counts are fixed first (from s * block target); each projection is
//                 then zeroed by u = 1 - (1 - p_{n,m}) / kept_{n,m} (kept = the fraction of its
//                 parameters the units leave), so the non-zero weights left are ~(1 - p_{n,m});
//                 the units to remove are then chosen by importance measured on the zeroed
//                 weights. o and down lose columns, and the columns removed held more than
//                 their share of the zeros, so their rows are finally topped up (lowest omega)
//                 to round((1 - p_{n,m}) * original width) non-zeros.
//
// Architectures: every dense row of format/arch_spec.h (projection.h names the projections
// from the row's roles). Removing a query head or key-value group also removes its entries of
// the q/k/v biases; QK-norm weights ([head_dim], shared by the heads), post-norms, soft-caps and
// sliding layers are untouched by construction; the activation that feeds down's metric is the
// model's own (SwiGLU or GeGLU, observed in the forward pass). Phi-3's fused attn_qkv and ffn_up
// are pruned as their parts and fused again by the GGUF writer.
//
// Projections that end up unchanged (target 0) keep pointing at the input's bytes; edited ones
// live in an OwnedTensors backing of the returned ModelFile. Element types are kept (see
// tensor_edit.h for how quantized rows are edited). Everything else (embeddings, norms, output
// head, tokenizer, config except the per-layer dims) is the input's.
//
// Thread safety: free function; `pool` is used from the calling thread only.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "format/model_file.h"
#include "prune/activation_norms.h"
#include "prune/targets.h"

namespace weir::prune {

enum class PruneMode : uint8_t { kUnstructured = 0, kStructured = 1, kComposite = 2 };
std::string_view PruneModeName(PruneMode m);  // "unstructured", "structured", "composite"
Result<PruneMode> ParsePruneMode(std::string_view name);

struct PruneOptions {
  PruneMode mode = PruneMode::kUnstructured;
  double structured_share = 0.5;  // composite: share of each target removed as whole units
};

struct ProjectionResult {
  double target = 0;  // p_{n,m}
  int64_t params_before = 0;
  int64_t params_after = 0;  // elements stored after structured removal
  int64_t nonzero_after = 0;
  // Fraction of the original parameters removed or zero: 1 - nonzero_after / params_before.
  double sparsity() const {
    return params_before > 0
               ? 1.0 - static_cast<double>(nonzero_after) / static_cast<double>(params_before)
               : 0;
  }
};

struct PruneReport {
  std::vector<std::array<ProjectionResult, kNumProjections>> projections;  // [layer][projection]
  std::vector<format::LayerDims> dims_before, dims_after;
  int64_t params_before = 0, params_after = 0, nonzero_after = 0;  // over all projections
  double sparsity() const {
    return params_before > 0
               ? 1.0 - static_cast<double>(nonzero_after) / static_cast<double>(params_before)
               : 0;
  }
  // Fraction of projection parameters no longer stored.
  double removed() const {
    return params_before > 0
               ? 1.0 - static_cast<double>(params_after) / static_cast<double>(params_before)
               : 0;
  }
};

struct PrunedModel {
  format::ModelFile file;
  PruneReport report;
};

// Everything Prune (and the GGUF writer of its result) would refuse that is known before
// calibration: P outside [0, 1), a composite share outside [0, 1], an architecture or model
// pruning does not support (BindProjections: mixture-of-experts rows by name, missing or
// misshapen projections), head removal on a model whose query scale llama.cpp infers from the
// head count (Gemma 2/3 27B), and what format::WriteLlamaGguf refuses of the model's config. `weir
// prune` calls it before it calibrates.
Status CheckPrunable(const format::ModelFile& model, const PruneOptions& options, double target);

// `norms` must come from the same model (widths are checked); `targets` must cover its layers.
Result<PrunedModel> Prune(const format::ModelFile& model, const ActivationNorms& norms,
                          const PruneTargets& targets, const PruneOptions& options,
                          ThreadPool* pool);

}  // namespace weir::prune
