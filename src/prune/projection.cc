#include "prune/projection.h"

namespace weir::prune {

namespace {

using format::Dim;
using format::TensorRole;

// Per-layer roles pruning edits: the projections and the q/k/v biases.
bool EditedRole(TensorRole r) {
  for (Projection p : kAllProjections) {
    TensorRole b;
    if (r == ProjectionRole(p) || (ProjectionBiasRole(p, &b) && r == b)) return true;
  }
  return false;
}

bool PrunedDim(Dim d) { return d == Dim::kQDim || d == Dim::kKvDim || d == Dim::kDff; }

// Why `arch` cannot be pruned, or empty: a mixture-of-experts row, a projection missing from its
// table, or a per-layer tensor with a dimension pruning changes that pruning does not edit.
std::string Unprunable(const format::ArchSpec& arch) {
  if (arch.moe) {
    return StrFormat(
        "the mixture-of-experts architecture %s (its MLP is stacked experts and a "
        "router)",
        arch.name);
  }
  for (Projection p : kAllProjections) {
    if (format::FindTensorSpec(arch, ProjectionRole(p)) == nullptr) {
      return StrFormat("architecture %s, which has no %.*s projection", arch.name,
                       static_cast<int>(ProjectionName(p).size()), ProjectionName(p).data());
    }
  }
  for (const format::TensorSpec& t : arch.tensors) {
    if (!t.per_layer || EditedRole(t.role)) continue;
    if (PrunedDim(t.outer) || PrunedDim(t.inner) || PrunedDim(t.stack)) {
      return StrFormat("architecture %s, whose %s (%s) pruning would not resize", arch.name, t.name,
                       format::ShapeDerivation(t).c_str());
    }
  }
  return {};
}

}  // namespace

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

format::TensorRole ProjectionRole(Projection p) {
  switch (p) {
    case Projection::kQ:
      return TensorRole::kAttnQ;
    case Projection::kK:
      return TensorRole::kAttnK;
    case Projection::kV:
      return TensorRole::kAttnV;
    case Projection::kO:
      return TensorRole::kAttnOutput;
    case Projection::kGate:
      return TensorRole::kFfnGate;
    case Projection::kUp:
      return TensorRole::kFfnUp;
    case Projection::kDown:
      return TensorRole::kFfnDown;
  }
  return TensorRole::kAttnQ;
}

bool ProjectionBiasRole(Projection p, format::TensorRole* role) {
  switch (p) {
    case Projection::kQ:
      *role = TensorRole::kAttnQBias;
      return true;
    case Projection::kK:
      *role = TensorRole::kAttnKBias;
      return true;
    case Projection::kV:
      *role = TensorRole::kAttnVBias;
      return true;
    default:
      return false;
  }
}

std::string ProjectionTensorName(const format::ArchSpec& arch, int layer, Projection p) {
  const format::TensorSpec* t = format::FindTensorSpec(arch, ProjectionRole(p));
  return t != nullptr ? format::TensorName(*t, layer) : std::string();
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

std::string PrunableArchList() {
  std::string s;
  for (const format::ArchSpec* a : format::AllArchs()) {
    if (Unprunable(*a).empty()) s += (s.empty() ? "" : ", ") + std::string(a->name);
  }
  return s;
}

Result<std::vector<LayerProjections>> BindProjections(const format::ModelFile& model) {
  const format::LlamaConfig& c = model.config;
  const format::ArchSpec& arch = ArchOf(c);
  const char* path = model.path.c_str();
  if (const std::string why = Unprunable(arch); !why.empty()) {
    return Status::Unsupported(
        StrFormat("%s: pruning supports the dense architectures (%s), not %s", path,
                  PrunableArchList().c_str(), why.c_str()));
  }
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
    for (Projection p : kAllProjections) {
      const format::TensorSpec& spec = *format::FindTensorSpec(arch, ProjectionRole(p));
      const std::string name = format::TensorName(spec, l);
      const TensorView* v = model.Find(name);
      if (v == nullptr || !v->valid()) {
        return Status::NotFound(
            StrFormat("%s: the model has no projection %s (weir prune needs "
                      "q, k, v, o, gate, up and down in every layer)",
                      path, name.c_str()));
      }
      const Shape want = format::ExpectedShape(spec, c, l);
      if (!(v->shape == want)) {
        return Status::InvalidArgument(StrFormat("%s: %s has shape %s, expected %s", path,
                                                 name.c_str(), v->shape.ToString().c_str(),
                                                 want.ToString().c_str()));
      }
      if (v->layout != Layout::kRowMajor) {
        return Status::Unsupported(
            StrFormat("%s: %s is held tiled; pruning edits row-major rows", path, name.c_str()));
      }
      L.w[static_cast<size_t>(p)] = *v;
      L.names[static_cast<size_t>(p)] = name;
      format::TensorRole bias_role;
      if (!ProjectionBiasRole(p, &bias_role)) continue;
      const format::TensorSpec* bias_spec = format::FindTensorSpec(arch, bias_role);
      if (bias_spec == nullptr) continue;
      const std::string bias_name = format::TensorName(*bias_spec, l);
      const TensorView* b = model.Find(bias_name);
      if (b == nullptr || !b->valid()) continue;
      if (b->shape.ndim != 1 || b->shape[0] != v->rows() || b->dtype != DType::kF32) {
        return Status::InvalidArgument(StrFormat(
            "%s: bias %s is %s %s, expected F32 [%lld]", path, bias_name.c_str(),
            DTypeName(b->dtype), b->shape.ToString().c_str(), static_cast<long long>(v->rows())));
      }
      L.bias[static_cast<size_t>(p)] = *b;
      L.bias_names[static_cast<size_t>(p)] = bias_name;
    }
  }
  return out;
}

}  // namespace weir::prune
