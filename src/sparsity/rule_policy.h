// RulePolicy: the one implementation behind every built-in method. Each site gets a rule (all,
// per-token top-k of the magnitudes, or a calibrated per-layer threshold), the MLP optionally a
// unit predictor, and W_down either its own rule or the predictor's units. ParseSparsity fills
// the rules; tests and tools may build other combinations directly.
//
// Thread safety: as SparsityPolicy (one thread per instance).
#pragma once

#include <memory>
#include <vector>

#include "sparsity/policy.h"
#include "sparsity/select.h"

namespace weir::sparsity {

enum class RuleKind : uint8_t {
  kAll,          // every column
  kTopK,         // KeepCount(keep, width) largest magnitudes per token
  kThreshold,    // magnitudes >= thresholds[layer]
  kSameAsUnits,  // (W_down only) the units the predictor chose
};

struct SiteRule {
  RuleKind kind = RuleKind::kAll;
  double keep = 1.0;              // kTopK: fraction kept; kThreshold: the calibrated target
  bool cache_aware = false;       // kTopK: DIP-CA scores with PolicyInfo::gamma
  std::vector<float> thresholds;  // kThreshold: one per layer
  std::vector<int64_t> widths;    // kThreshold: calibrated width per layer (checked by Prepare)
};

struct PolicyConfig {
  PolicyInfo info;
  SiteRule attn_in, attn_out, mlp_in;
  UnitPredictor predictor = UnitPredictor::kNone;
  SiteRule units;  // when predictor != kNone: on |silu(g)| (kGate) or |u| (kUp)
  SiteRule down;
};

class RulePolicy final : public SparsityPolicy {
 public:
  explicit RulePolicy(PolicyConfig config);

  const PolicyInfo& info() const override { return c_.info; }
  std::unique_ptr<SparsityPolicy> Clone() const override {
    return std::make_unique<RulePolicy>(*this);
  }
  Status Prepare(std::span<const LayerDims> layers) override;
  UnitPredictor unit_predictor() const override { return c_.predictor; }
  bool MayPrune(Site site) const override;
  void SelectInput(int layer, Site site, std::span<const float> x, const CacheStateView* cache,
                   IndexList* out) override;
  void SelectUnits(int layer, std::span<const float> pre, IndexList* out) override;
  void SelectDown(int layer, std::span<const float> h, const IndexList& units,
                  const CacheStateView* cache, IndexList* out) override;

 private:
  const SiteRule& RuleFor(Site site) const;
  void Apply(const SiteRule& rule, int layer, std::span<const float> x, Magnitude mag,
             const CacheStateView* cache, IndexList* out);
  const LayerDims& Dims(int layer) const;

  PolicyConfig c_;
  std::vector<LayerDims> dims_;  // set by Prepare
  Selector selector_;
};

}  // namespace weir::sparsity
