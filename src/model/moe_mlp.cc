// The MLP of a mixture-of-experts layer (mlp_provider.h): the router picks n_expert_used experts
// per token and their outputs are summed with the router's weights (model/moe.h).
#include <cstring>

#include "model/mlp_provider.h"
#include "model/session.h"

namespace weir::model {
namespace {

class MoeMlpProvider final : public MlpProvider {
 public:
  MoeMlpProvider(const MlpContext& ctx, MoeMlp* moe, ExpertSource* experts)
      : c_(ctx), moe_(moe), experts_(experts) {}

  Status Forward(int layer, float* x, int n) override {
    const auto& cfg = c_.model->config();
    const LayerWeights& w = c_.model->weights().layers[static_cast<size_t>(layer)];
    float* y = c_.gate;  // [n, d_model]: the session sizes it for this
    uint64_t bytes = 0;
    const auto& layers = c_.model->weights().layers;
    const TensorView* next = layer + 1 < static_cast<int>(layers.size()) &&
                                     layers[static_cast<size_t>(layer) + 1].ffn_gate_inp.valid()
                                 ? &layers[static_cast<size_t>(layer) + 1].ffn_gate_inp
                                 : nullptr;
    WEIR_RETURN_IF_ERROR(
        moe_->Forward(layer, w.ffn_gate_inp, x, n, y, experts_, c_.pool, &bytes, next));
    std::memcpy(x, y, sizeof(float) * static_cast<size_t>(n) * static_cast<size_t>(cfg.d_model));
    c_.traffic->mlp_used += bytes;
    c_.traffic->mlp_dense += moe_->last_dense_bytes();  // less than bytes only when pruned
    return Status::Ok();
  }

 private:
  MlpContext c_;
  MoeMlp* moe_;
  ExpertSource* experts_;
};

}  // namespace

std::unique_ptr<MlpProvider> MakeMoeMlp(const MlpContext& ctx, MoeMlp* moe,
                                        ExpertSource* experts) {
  return std::make_unique<MoeMlpProvider>(ctx, moe, experts);
}

}  // namespace weir::model
