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
  // kMlpIn only: a selection made at a layer l with l % span == 0 is reused, token by token, by
  // the next span - 1 layers (ActiveFlow's cross-layer channel groups, paper 002 §3.2): one
  // choice per group of layers, so a streamed pack reads a channel's records for the whole group
  // at once or not at all.
  int span = 1;
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
  void SetMlpInputScale(int layer, std::span<const float> scale) override;
  void SelectInput(int layer, Site site, std::span<const float> x, const CacheStateView* cache,
                   IndexList* out) override;
  bool PredictSpan(int from_layer, int span_layer, std::span<const float> x,
                   IndexList* out) override;
  void SelectUnits(int layer, std::span<const float> pre, IndexList* out) override;
  void SelectDown(int layer, std::span<const float> h, const IndexList& units,
                  const CacheStateView* cache, IndexList* out) override;

 private:
  const SiteRule& RuleFor(Site site) const;
  void Apply(const SiteRule& rule, int layer, std::span<const float> x, Magnitude mag,
             const CacheStateView* cache, IndexList* out);
  const LayerDims& Dims(int layer) const;
  // The scores the span starting at `first` selects by, from layer `from`'s input x (x itself
  // without scales), written to *score.
  std::span<const float> SpanScores(int from, int first, int span, std::span<const float> x,
                                    std::vector<float>* score) const;

  PolicyConfig c_;
  std::vector<LayerDims> dims_;  // set by Prepare
  Selector selector_;
  // The span's selections, one per token of the batch in call order (c_.mlp_in.span > 1): a
  // layer's calls come token by token, so the k-th call of a layer reuses the k-th selection of
  // its span's first layer. Grows to the largest batch once.
  std::vector<IndexList> span_sel_;
  int span_layer_ = -1;  // the layer of the last kMlpIn call
  size_t span_call_ = 0;  // calls so far at span_layer_
  int span_first_ = -1;   // the span-first layer span_sel_ holds, and its number of tokens
  size_t span_count_ = 0;
  int64_t span_width_ = 0;
  std::vector<std::vector<float>> mlp_scale_;  // per layer (SetMlpInputScale), or empty
  std::vector<float> span_score_;              // [d_model] the span-first layer's scores
  std::vector<float> predict_score_;           // [d_model] PredictSpan's
};

}  // namespace weir::sparsity
