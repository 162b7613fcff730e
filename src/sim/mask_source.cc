#include "sim/mask_source.h"

#include <sstream>

namespace weir::sim {

Result<StreamSet> ParseStreamSet(const std::string& text) {
  if (text == "mlp") return StreamSet::kMlp;
  if (text == "all") return StreamSet::kAll;
  if (text == "experts") return StreamSet::kExperts;
  return Status::InvalidArgument(
      StrFormat("--stream '%s': expected mlp, all or experts", text.c_str()));
}

Result<MaskStream> MakeMaskStream(const ModelShape& shape, int layer, const std::string& kind_name,
                                  uint32_t n_units, uint64_t weights_per_unit_hint) {
  if (layer < 0 || layer >= shape.n_layers) {
    return Status::InvalidArgument(StrFormat("mask '%s': layer %d outside the model's %d layers",
                                             kind_name.c_str(), layer, shape.n_layers));
  }
  if (n_units == 0) {
    return Status::InvalidArgument(
        StrFormat("mask '%s' layer %d: zero units", kind_name.c_str(), layer));
  }
  MaskStream s;
  s.layer = layer;
  s.name = kind_name;
  s.n_units = n_units;
  if (kind_name == kExpertUnitsKind) {
    if (shape.n_experts <= 1 || n_units != static_cast<uint32_t>(shape.n_experts)) {
      return Status::InvalidArgument(StrFormat(
          "mask '%s' layer %d: %u experts per layer, model '%s' has %d (expert units need a "
          "mixture-of-experts shape with the same expert count)",
          kind_name.c_str(), layer, n_units, shape.name.c_str(), shape.n_experts));
    }
    for (TensorKind k : {TensorKind::kFfnGate, TensorKind::kFfnUp, TensorKind::kFfnDown}) {
      s.tensors.push_back(k);
      s.weights_per_unit.push_back(shape.TensorParams(k, layer) / n_units);
    }
    s.unit_records = true;
    return s;
  }
  std::stringstream ss(kind_name);
  for (std::string part; std::getline(ss, part, '+');) {
    auto kind = TensorKindFromName(part);
    if (!kind || !IsLayerTensor(*kind) || *kind == TensorKind::kNorm) {
      return Status::InvalidArgument(StrFormat(
          "mask '%s': '%s' is not a streamable tensor kind (attn_q, attn_k, attn_v, attn_output, "
          "ffn_gate, ffn_up, ffn_down, ffn_gate_inp)",
          kind_name.c_str(), part.c_str()));
    }
    for (TensorKind seen : s.tensors) {
      if (seen == *kind) {
        return Status::InvalidArgument(
            StrFormat("mask '%s' names '%s' twice", kind_name.c_str(), part.c_str()));
      }
    }
    uint64_t params = shape.TensorParams(*kind, layer);
    if (params == 0 || params % n_units != 0) {
      return Status::InvalidArgument(StrFormat(
          "mask '%s' layer %d: %u units do not divide tensor %s of %llu weights in model '%s'",
          kind_name.c_str(), layer, n_units, part.c_str(), static_cast<unsigned long long>(params),
          shape.name.c_str()));
    }
    s.tensors.push_back(*kind);
    s.weights_per_unit.push_back(params / n_units);
  }
  if (s.tensors.empty()) {
    return Status::InvalidArgument(StrFormat("mask kind '%s' names no tensor", kind_name.c_str()));
  }
  if (weights_per_unit_hint != 0 && weights_per_unit_hint != s.UnitWeights()) {
    return Status::InvalidArgument(
        StrFormat("mask '%s' layer %d: the trace says %llu weights per unit, model '%s' has %llu",
                  kind_name.c_str(), layer, static_cast<unsigned long long>(weights_per_unit_hint),
                  shape.name.c_str(), static_cast<unsigned long long>(s.UnitWeights())));
  }
  // MoE experts: units of expert-sized MLP tensors form expert-major blocks.
  bool ffn = false;
  for (TensorKind k : s.tensors) {
    ffn |= k == TensorKind::kFfnGate || k == TensorKind::kFfnUp || k == TensorKind::kFfnDown;
  }
  if (ffn && shape.n_experts > 1 && n_units % static_cast<uint32_t>(shape.n_experts) == 0) {
    s.n_experts = shape.n_experts;
    s.n_experts_active = shape.n_experts_active;
  }
  return s;
}

Result<MaskLayout> MakeMaskLayout(const ModelShape& shape, StreamSet set) {
  WEIR_RETURN_IF_ERROR(ValidateShape(shape));
  MaskLayout layout;
  layout.n_layers = shape.n_layers;
  for (int l = 0; l < shape.n_layers; ++l) {
    const LayerShape& L = shape.layers[static_cast<size_t>(l)];
    if (set == StreamSet::kAll) {
      WEIR_ASSIGN_OR_RETURN(MaskStream qkv,
                            MakeMaskStream(shape, l, "attn_q+attn_k+attn_v",
                                           static_cast<uint32_t>(shape.d_model), 0));
      layout.streams.push_back(std::move(qkv));
      WEIR_ASSIGN_OR_RETURN(MaskStream o,
                            MakeMaskStream(shape, l, "attn_output",
                                           static_cast<uint32_t>(L.n_head * shape.head_dim), 0));
      layout.streams.push_back(std::move(o));
    }
    if (set == StreamSet::kExperts) {
      WEIR_ASSIGN_OR_RETURN(MaskStream experts,
                            MakeMaskStream(shape, l, kExpertUnitsKind,
                                           static_cast<uint32_t>(shape.n_experts), 0));
      layout.streams.push_back(std::move(experts));
      continue;
    }
    uint32_t units = static_cast<uint32_t>(L.d_ff) * static_cast<uint32_t>(shape.n_experts);
    WEIR_ASSIGN_OR_RETURN(MaskStream ffn,
                          MakeMaskStream(shape, l, "ffn_gate+ffn_up+ffn_down", units, 0));
    layout.streams.push_back(std::move(ffn));
  }
  return layout;
}

}  // namespace weir::sim
