#include "sparsity/rule_policy.h"

#include <algorithm>

namespace weir::sparsity {

std::string PolicyInfo::ToString() const {
  std::string s = StrFormat("%s: target MLP density %.4f", spec.c_str(), target_mlp_density);
  if (attn_keep < 1) s += StrFormat(", attention keep %.4f", attn_keep);
  if (mlp_in_keep < 1) s += StrFormat(", up/gate columns keep %.4f", mlp_in_keep);
  if (units_keep < 1) s += StrFormat(", units keep %.4f", units_keep);
  if (down_keep < 1) s += StrFormat(", down columns keep %.4f", down_keep);
  if (cache_aware) s += StrFormat(", cache-aware gamma %.3g", gamma);
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
  Apply(RuleFor(site), layer, x, Magnitude::kAbs, cache, out);
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
