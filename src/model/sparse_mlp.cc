// The MLP under a sparsity policy over resident weights, one token at a time (selections are
// per token, DIP §3; mlp_provider.h). Per token:
//   in    = SelectInput(kMlpIn, x)             columns of W_gate, W_up
//   units = all, or SelectUnits(g or u)        rows of W_gate / W_up computed
//   h     = glu(g, u) on the units, 0 elsewhere
//   down  = SelectDown(h, units)               columns of W_down
//   out   = W_down[:, down] · h[down]
#include <cstring>

#include "kernels/gather.h"
#include "kernels/matvec.h"
#include "model/mlp_provider.h"
#include "model/session.h"

namespace weir::model {
namespace {

using sparsity::Site;

class SparseMlp final : public MlpProvider {
 public:
  SparseMlp(const MlpContext& ctx, sparsity::SparsityPolicy* policy,
            const TransposedWeights* transposed, sparsity::IndexList* sel_in,
            sparsity::IndexList* sel_units, sparsity::IndexList* sel_down)
      : c_(ctx),
        policy_(policy),
        transposed_(transposed),
        sel_in_(*sel_in),
        sel_units_(*sel_units),
        sel_down_(*sel_down) {}

  Status Forward(int layer, float* x, int n) override {
    const int d = c_.model->config().d_model;
    for (int t = 0; t < n; ++t) Token(layer, x + static_cast<int64_t>(t) * d);
    return Status::Ok();
  }

 private:
  void Token(int layer, float* x);

  MlpContext c_;
  sparsity::SparsityPolicy* policy_;
  const TransposedWeights* transposed_;
  sparsity::IndexList& sel_in_;
  sparsity::IndexList& sel_units_;
  sparsity::IndexList& sel_down_;
};

// x = MLP(x) for one token, reading only the selected columns and rows.
void SparseMlp::Token(int layer, float* x) {
  const auto& c = c_.model->config();
  const LayerWeights& w = c_.model->weights().layers[static_cast<size_t>(layer)];
  const LayerTransposed& wt = transposed_->layer(layer);
  const int d = c.d_model, d_ff = c.layers[static_cast<size_t>(layer)].d_ff;
  ActivationObserver* observer = *c_.observer;
  ThreadPool* pool = c_.pool;
  float* g = c_.gate;  // [d_ff]
  float* u = c_.up;    // [d_ff]
  uint64_t used = 0;
  const float* xm = x;
  const std::span<const float> xs(xm, static_cast<size_t>(d));

  // Full product of one projection over the selected input columns.
  auto full = [&](const TensorView& W, const TensorView& W_t, float* y) {
    if (sel_in_.all()) {
      kernels::MatVec(W, xm, y, pool);
      used += W.nbytes();
    } else {
      auto idx = sel_in_.indices();
      kernels::GatherMatVecCols(W_t, idx.data(), static_cast<int64_t>(idx.size()), xm, y, pool);
      used += idx.size() * W_t.row_bytes();
    }
  };
  // Rows `units` of one projection (the others are not computed).
  auto rows = [&](const TensorView& W, float* y) {
    auto idx = sel_units_.indices();
    kernels::GatherMatVecRows(W, idx.data(), static_cast<int64_t>(idx.size()), xm, y, pool);
    used += idx.size() * W.row_bytes();
  };

  if (policy_->MayPrune(Site::kMlpIn)) {
    policy_->SelectInput(layer, Site::kMlpIn, xs, nullptr, &sel_in_);
  } else {
    sel_in_.SetAll(d);
  }
  switch (policy_->unit_predictor()) {
    case sparsity::UnitPredictor::kNone:
      full(w.w_gate, wt.w_gate_t, g);
      full(w.w_up, wt.w_up_t, u);
      sel_units_.SetAll(d_ff);
      break;
    case sparsity::UnitPredictor::kGate:
      full(w.w_gate, wt.w_gate_t, g);
      policy_->SelectUnits(layer, std::span<const float>(g, static_cast<size_t>(d_ff)),
                           &sel_units_);
      if (sel_units_.all()) {
        full(w.w_up, wt.w_up_t, u);
      } else {
        rows(w.w_up, u);
      }
      break;
    case sparsity::UnitPredictor::kUp:
      full(w.w_up, wt.w_up_t, u);
      policy_->SelectUnits(layer, std::span<const float>(u, static_cast<size_t>(d_ff)),
                           &sel_units_);
      if (sel_units_.all()) {
        full(w.w_gate, wt.w_gate_t, g);
      } else {
        rows(w.w_gate, g);
      }
      break;
  }
  if (observer) observer->OnGate(layer, g, d_ff);
  // h = glu(g, u) on the computed units, 0 elsewhere (kept in g).
  if (sel_units_.all()) {
    kernels::GatedActivation(c_.glu, g, u, d_ff);
  } else {
    auto idx = sel_units_.indices();
    for (int32_t i : idx) {
      kernels::GatedActivation(c_.glu, g + i, u + i, 1);
      u[i] = g[i];
    }
    std::memset(g, 0, sizeof(float) * static_cast<size_t>(d_ff));
    for (int32_t i : idx) g[i] = u[i];
  }
  const std::span<const float> h(g, static_cast<size_t>(d_ff));
  if (observer) observer->OnInput(layer, Site::kMlpDown, g, d_ff);
  policy_->SelectDown(layer, h, sel_units_, nullptr, &sel_down_);
  if (observer) observer->OnMlpUnits(layer, sel_down_);
  // x is read no more: the product overwrites it.
  if (sel_down_.all()) {
    kernels::MatVec(w.w_down, g, x, pool);
    used += w.w_down.nbytes();
  } else {
    auto idx = sel_down_.indices();
    kernels::GatherMatVecCols(wt.w_down_t, idx.data(), static_cast<int64_t>(idx.size()), g, x,
                              pool);
    used += idx.size() * wt.w_down_t.row_bytes();
  }
  c_.traffic->mlp_used += used;
  c_.traffic->mlp_dense += w.mlp_bytes();
}

}  // namespace

std::unique_ptr<MlpProvider> MakeSparseMlp(const MlpContext& ctx,
                                           sparsity::SparsityPolicy* policy,
                                           const TransposedWeights* transposed,
                                           sparsity::IndexList* sel_in,
                                           sparsity::IndexList* sel_units,
                                           sparsity::IndexList* sel_down) {
  return std::make_unique<SparseMlp>(ctx, policy, transposed, sel_in, sel_units, sel_down);
}

}  // namespace weir::model
