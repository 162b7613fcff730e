// The dense MLP over resident weights: two batched products sharing x, the gated unit, one more
// product (mlp_provider.h).
#include "kernels/matvec.h"
#include "model/mlp_provider.h"
#include "model/session.h"

namespace weir::model {
namespace {

class DenseMlp final : public MlpProvider {
 public:
  explicit DenseMlp(const MlpContext& ctx) : c_(ctx) {}

  // x = W_down · glu(W_gate · x, W_up · x)
  Status Forward(int layer, float* x, int n) override {
    const auto& cfg = c_.model->config();
    const LayerWeights& w = c_.model->weights().layers[static_cast<size_t>(layer)];
    const int d_ff = cfg.layers[static_cast<size_t>(layer)].d_ff;
    ActivationObserver* observer = *c_.observer;
    float* gate = c_.gate;  // [n, d_ff]
    float* up = c_.up;      // [n, d_ff]
    const TensorView* gate_up[] = {&w.w_gate, &w.w_up};
    float* gate_up_out[] = {gate, up};
    kernels::MatMulShared(gate_up, x, n, gate_up_out, c_.pool);
    if (observer) {
      for (int t = 0; t < n; ++t) observer->OnGate(layer, gate + t * d_ff, d_ff);
    }
    kernels::GatedActivation(c_.glu, gate, up, static_cast<int64_t>(n) * d_ff);
    if (observer) {
      for (int t = 0; t < n; ++t) {
        observer->OnInput(layer, sparsity::Site::kMlpDown, gate + t * d_ff, d_ff);
      }
    }
    kernels::MatMul(w.w_down, gate, n, x, c_.pool);
    const uint64_t bytes = w.mlp_bytes();
    c_.traffic->mlp_used += bytes * static_cast<uint64_t>(n);
    c_.traffic->mlp_dense += bytes * static_cast<uint64_t>(n);
    return Status::Ok();
  }

 private:
  MlpContext c_;
};

}  // namespace

std::unique_ptr<MlpProvider> MakeDenseMlp(const MlpContext& ctx) {
  return std::make_unique<DenseMlp>(ctx);
}

}  // namespace weir::model
