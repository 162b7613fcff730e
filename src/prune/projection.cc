#include "prune/projection.h"

namespace weir::prune {

std::string_view ProjectionName(Projection p) {
  switch (p) {
    case Projection::kQ:
      return "q";
    case Projection::kK:
      return "k";
    case Projection::kV:
      return "v";
    case Projection::kO:
      return "o";
    case Projection::kGate:
      return "gate";
    case Projection::kUp:
      return "up";
    case Projection::kDown:
      return "down";
  }
  return "?";
}

std::string ProjectionTensorName(int layer, Projection p) {
  static constexpr const char* kTensor[kNumProjections] = {
      "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  return "blk." + std::to_string(layer) + "." + kTensor[static_cast<int>(p)] + ".weight";
}

sparsity::Site ProjectionSite(Projection p) {
  switch (p) {
    case Projection::kQ:
    case Projection::kK:
    case Projection::kV:
      return sparsity::Site::kAttnIn;
    case Projection::kO:
      return sparsity::Site::kAttnOut;
    case Projection::kGate:
    case Projection::kUp:
      return sparsity::Site::kMlpIn;
    case Projection::kDown:
      return sparsity::Site::kMlpDown;
  }
  return sparsity::Site::kAttnIn;
}

Result<std::vector<LayerProjections>> BindProjections(const format::ModelFile& model) {
  const format::LlamaConfig& c = model.config;
  const char* path = model.path.c_str();
  if (c.n_layers <= 0 || c.d_model <= 0 || c.head_dim <= 0) {
    return Status::InvalidArgument(
        StrFormat("%s: config has n_layers %d, d_model %d, head_dim %d; "
                  "nothing to prune",
                  path, c.n_layers, c.d_model, c.head_dim));
  }
  if (static_cast<int>(c.layers.size()) != c.n_layers) {
    return Status::InvalidArgument(StrFormat("%s: config has %zu per-layer dims for %d layers",
                                             path, c.layers.size(), c.n_layers));
  }
  std::vector<LayerProjections> out(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const format::LayerDims& d = c.layers[static_cast<size_t>(l)];
    if (d.n_head <= 0 || d.n_head_kv <= 0 || d.d_ff <= 0 || d.n_head % d.n_head_kv != 0) {
      return Status::InvalidArgument(StrFormat(
          "%s: layer %d has n_head %d, n_head_kv %d, d_ff %d (need positive values and n_head a "
          "multiple of n_head_kv)",
          path, l, d.n_head, d.n_head_kv, d.d_ff));
    }
    LayerProjections& L = out[static_cast<size_t>(l)];
    L.n_head = d.n_head;
    L.n_head_kv = d.n_head_kv;
    L.head_dim = c.head_dim;
    L.d_ff = d.d_ff;
    L.d_model = c.d_model;
    const int64_t q = int64_t{d.n_head} * c.head_dim, kv = int64_t{d.n_head_kv} * c.head_dim;
    const int64_t dm = c.d_model, ff = d.d_ff;
    const std::array<Shape, kNumProjections> want = {Shape{q, dm}, Shape{kv, dm}, Shape{kv, dm},
                                                     Shape{dm, q}, Shape{ff, dm}, Shape{ff, dm},
                                                     Shape{dm, ff}};
    for (Projection p : kAllProjections) {
      const std::string name = ProjectionTensorName(l, p);
      const TensorView* v = model.Find(name);
      if (v == nullptr || !v->valid()) {
        return Status::NotFound(
            StrFormat("%s: the model has no projection %s (weir prune needs "
                      "q, k, v, o, gate, up and down in every layer)",
                      path, name.c_str()));
      }
      const Shape& s = want[static_cast<size_t>(p)];
      if (!(v->shape == s)) {
        return Status::InvalidArgument(StrFormat("%s: %s has shape %s, expected %s", path,
                                                 name.c_str(), v->shape.ToString().c_str(),
                                                 s.ToString().c_str()));
      }
      L.w[static_cast<size_t>(p)] = *v;
    }
  }
  return out;
}

}  // namespace weir::prune
