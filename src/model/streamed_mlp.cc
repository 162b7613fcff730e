// The MLP of a weir pack, read from storage by StreamingWeights (mlp_provider.h,
// streaming_weights.h): bundles dense, or columns with the policy's selection.
#include <cstring>

#include "model/mlp_provider.h"
#include "model/session.h"

namespace weir::model {
namespace {

class StreamedMlp final : public MlpProvider {
 public:
  StreamedMlp(const MlpContext& ctx, StreamingWeights* streamed, sparsity::SparsityPolicy* policy)
      : c_(ctx), streamed_(streamed), policy_(policy) {}

  Status Forward(int layer, float* x, int n) override {
    const auto& cfg = c_.model->config();
    const LayerWeights& w = c_.model->weights().layers[static_cast<size_t>(layer)];
    float* y = c_.gate;  // [n, d_model]: the session sizes it for this
    uint64_t used = 0;
    WEIR_RETURN_IF_ERROR(streamed_->Forward(layer, x, n, y, c_.pool, policy_, &used));
    std::memcpy(x, y, sizeof(float) * static_cast<size_t>(n) * static_cast<size_t>(cfg.d_model));
    // The model's MLP tensors are stand-ins with the real shapes: their bytes are the dense size.
    const uint64_t bytes = w.mlp_bytes();
    c_.traffic->mlp_used += used;
    c_.traffic->mlp_dense += bytes * static_cast<uint64_t>(n);
    return Status::Ok();
  }

 private:
  MlpContext c_;
  StreamingWeights* streamed_;
  sparsity::SparsityPolicy* policy_;
};

}  // namespace

std::unique_ptr<MlpProvider> MakeStreamedMlp(const MlpContext& ctx, StreamingWeights* streamed,
                                             sparsity::SparsityPolicy* policy) {
  return std::make_unique<StreamedMlp>(ctx, streamed, policy);
}

}  // namespace weir::model
