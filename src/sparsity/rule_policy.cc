#include "sparsity/rule_policy.h"

#include <algorithm>
#include <cmath>

namespace weir::sparsity {

std::string PolicyInfo::ToString() const {
  std::string s = StrFormat("%s: target MLP density %.4f", spec.c_str(), target_mlp_density);
  if (attn_keep < 1) s += StrFormat(", attention keep %.4f", attn_keep);
  if (mlp_in_keep < 1) s += StrFormat(", up/gate columns keep %.4f", mlp_in_keep);
  if (units_keep < 1) s += StrFormat(", units keep %.4f", units_keep);
  if (down_keep < 1) s += StrFormat(", down columns keep %.4f", down_keep);
  if (cache_aware) s += StrFormat(", cache-aware gamma %.3g", gamma);
  if (mlp_in_span > 1) s += StrFormat(", up/gate selection per %d layers", mlp_in_span);
  return s;
}

RulePolicy::RulePolicy(PolicyConfig config) : c_(std::move(config)) {}

const SiteRule& RulePolicy::RuleFor(Site site) const {
  switch (site) {
    case Site::kAttnIn:
      return c_.attn_in;
    case Site::kAttnOut:
      return c_.attn_out;
    case Site::kMlpIn:
      return c_.mlp_in;
    case Site::kMlpDown:
      return c_.down;
  }
  return c_.attn_in;
}

bool RulePolicy::MayPrune(Site site) const { return RuleFor(site).kind != RuleKind::kAll; }

const LayerDims& RulePolicy::Dims(int layer) const {
  WEIR_CHECK(layer >= 0 && layer < static_cast<int>(dims_.size()));  // Prepare first
  return dims_[static_cast<size_t>(layer)];
}

Status RulePolicy::Prepare(std::span<const LayerDims> layers) {
  const int n_layer = static_cast<int>(layers.size());
  int64_t widest = 0;
  for (int l = 0; l < n_layer; ++l) {
    const LayerDims& d = layers[static_cast<size_t>(l)];
    if (d.d_model < 1 || d.q_dim < 1 || d.kv_dim < 1 || d.d_ff < 1 || d.d_ff > INT32_MAX ||
        d.d_model > INT32_MAX || d.q_dim > INT32_MAX) {
      return Status::InvalidArgument(
          StrFormat("%s: layer %d has bad dimensions d_model %lld q_dim %lld kv_dim %lld d_ff %lld",
                    c_.info.spec.c_str(), l, (long long)d.d_model, (long long)d.q_dim,
                    (long long)d.kv_dim, (long long)d.d_ff));
    }
    widest = std::max({widest, d.d_model, d.q_dim, d.d_ff});
  }
  struct Named {
    const SiteRule* rule;
    const char* stat;
    int64_t LayerDims::*width;
  };
  const Named rules[] = {
      {&c_.attn_in, "attn_in", &LayerDims::d_model},
      {&c_.attn_out, "attn_out", &LayerDims::q_dim},
      {&c_.mlp_in, "mlp_in", &LayerDims::d_model},
      {&c_.down, "mlp_down", &LayerDims::d_ff},
      {&c_.units, c_.predictor == UnitPredictor::kGate ? "gate_silu" : "up", &LayerDims::d_ff}};
  for (const Named& r : rules) {
    if (r.rule->kind != RuleKind::kThreshold) continue;
    if (static_cast<int>(r.rule->thresholds.size()) != n_layer) {
      return Status::InvalidArgument(StrFormat(
          "%s: the calibration has %zu layers but the model has %d (calibrated on another model?)",
          c_.info.spec.c_str(), r.rule->thresholds.size(), n_layer));
    }
    for (int l = 0; l < n_layer; ++l) {
      const int64_t want = layers[static_cast<size_t>(l)].*(r.width);
      const int64_t got = r.rule->widths[static_cast<size_t>(l)];
      if (got != want) {
        return Status::InvalidArgument(StrFormat(
            "%s: calibration layer %d '%s' has width %lld but the model's is %lld (calibrated on "
            "another model?)",
            c_.info.spec.c_str(), l, r.stat, (long long)got, (long long)want));
      }
    }
  }
  dims_.assign(layers.begin(), layers.end());
  selector_.Reserve(widest);
  span_width_ = widest;
  mlp_scale_.assign(layers.size(), {});
  span_score_.assign(static_cast<size_t>(widest), 0.0f);
  span_sel_.clear();
  span_layer_ = -1;
  span_call_ = 0;
  return Status::Ok();
}

void RulePolicy::Apply(const SiteRule& rule, int layer, std::span<const float> x, Magnitude mag,
                       const CacheStateView* cache, IndexList* out) {
  const int64_t n = static_cast<int64_t>(x.size());
  switch (rule.kind) {
    case RuleKind::kAll:
      out->SetAll(n);
      return;
    case RuleKind::kTopK:
      selector_.TopK(x, mag, KeepCount(rule.keep, n), rule.cache_aware ? cache : nullptr,
                     c_.info.gamma, out);
      return;
    case RuleKind::kThreshold:
      SelectThreshold(x, mag, rule.thresholds[static_cast<size_t>(layer)], out);
      return;
    case RuleKind::kSameAsUnits:
      break;
  }
  WEIR_CHECK(false && "kSameAsUnits is only valid for W_down with a unit predictor");
}

void RulePolicy::SelectInput(int layer, Site site, std::span<const float> x,
                             const CacheStateView* cache, IndexList* out) {
  const int64_t width = SiteWidth(Dims(layer), site);
  WEIR_CHECK(static_cast<int64_t>(x.size()) == width);
  if (site == Site::kMlpDown) WEIR_CHECK(c_.predictor == UnitPredictor::kNone);
  const SiteRule& rule = RuleFor(site);
  if (site != Site::kMlpIn || rule.span <= 1) {
    Apply(rule, layer, x, Magnitude::kAbs, cache, out);
    return;
  }
  // Cross-layer span: the first layer of the span selects, the others reuse its selection for
  // the same token (the k-th call of a layer is the k-th token of the batch).
  if (layer != span_layer_) {
    span_layer_ = layer;
    span_call_ = 0;
  }
  const size_t k = span_call_++;
  if (layer % rule.span == 0) {
    if (span_sel_.size() <= k) span_sel_.emplace_back(span_width_);
    Apply(rule, layer, SpanScores(layer, layer, rule.span, x, &span_score_), Magnitude::kAbs, cache,
          &span_sel_[k]);
    out->CopyFrom(span_sel_[k]);
    span_first_ = layer;
    span_count_ = k + 1;
    return;
  }
  // A span whose first layer was not seen for this token (a pass that started mid-span, or a
  // larger batch than the first layer's) selects afresh rather than reuse another token's.
  if (span_first_ == layer - layer % rule.span && k < span_count_ &&
      span_sel_[k].universe() == width) {
    out->CopyFrom(span_sel_[k]);
  } else {
    Apply(rule, layer, x, Magnitude::kAbs, cache, out);
  }
}

void RulePolicy::SetMlpInputScale(int layer, std::span<const float> scale) {
  WEIR_CHECK(static_cast<int64_t>(scale.size()) == Dims(layer).d_model);
  mlp_scale_[static_cast<size_t>(layer)].assign(scale.begin(), scale.end());
}

std::span<const float> RulePolicy::SpanScores(int from, int first, int span,
                                              std::span<const float> x,
                                              std::vector<float>* score) const {
  // x_i = r_i * s_from,i with r the normalized residual, which changes little from layer to
  // layer; layer l of the span will see about r_i * s_l,i. A channel is worth its largest
  // predicted magnitude over the span's layers: |r_i| * max_l |s_l,i|.
  const int n_layers = static_cast<int>(mlp_scale_.size());
  if (from < 0 || from >= n_layers) return x;
  const std::vector<float>& own = mlp_scale_[static_cast<size_t>(from)];
  if (own.size() != x.size()) return x;  // no scales: |x| decides
  const size_t n = x.size();
  if (score->size() < n) score->resize(n);
  for (size_t i = 0; i < n; ++i) {
    float most = 0.0f;
    for (int l = first; l < std::min(first + span, n_layers); ++l) {
      const std::vector<float>& s = mlp_scale_[static_cast<size_t>(l)];
      if (s.size() == n) most = std::max(most, std::fabs(s[i]));
    }
    const float r = own[i] != 0.0f ? x[i] / own[i] : 0.0f;
    (*score)[i] = std::fabs(r) * most;
  }
  return {score->data(), n};
}

bool RulePolicy::PredictSpan(int from_layer, int span_layer, std::span<const float> x,
                             IndexList* out) {
  const SiteRule& rule = RuleFor(Site::kMlpIn);
  if (rule.span <= 1 || span_layer < 0 || span_layer % rule.span != 0 ||
      span_layer >= static_cast<int>(dims_.size()) ||
      static_cast<int64_t>(x.size()) != Dims(span_layer).d_model) {
    return false;
  }
  Apply(rule, span_layer, SpanScores(from_layer, span_layer, rule.span, x, &predict_score_),
        Magnitude::kAbs, nullptr, out);
  return true;
}

void RulePolicy::SelectUnits(int layer, std::span<const float> pre, IndexList* out) {
  WEIR_CHECK(c_.predictor != UnitPredictor::kNone);
  WEIR_CHECK(static_cast<int64_t>(pre.size()) == Dims(layer).d_ff);
  const Magnitude mag =
      c_.predictor == UnitPredictor::kGate ? Magnitude::kAbsSilu : Magnitude::kAbs;
  Apply(c_.units, layer, pre, mag, nullptr, out);
}

void RulePolicy::SelectDown(int layer, std::span<const float> h, const IndexList& units,
                            const CacheStateView* cache, IndexList* out) {
  const int64_t d_ff = Dims(layer).d_ff;
  WEIR_CHECK(static_cast<int64_t>(h.size()) == d_ff && units.universe() == d_ff);
  if (c_.down.kind == RuleKind::kSameAsUnits) {
    out->CopyFrom(units);
    return;
  }
  Apply(c_.down, layer, h, Magnitude::kAbs, cache, out);
}

}  // namespace weir::sparsity
