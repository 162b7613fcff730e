// The MLP as M2Cache computes it (paper 004 §5.2-5.3; m2cache/mixed_mlp.h): per token, the
// low-rank predictor scores the neurons, the best r_high of them are computed at the high
// precision and the next r_low at the low one, from the layer's cache unit in the top tier.
#include "m2cache/mixed_mlp.h"
#include "model/mlp_provider.h"
#include "model/session.h"

namespace weir::model {
namespace {

class M2CacheMlp final : public MlpProvider {
 public:
  M2CacheMlp(const MlpContext& ctx, m2cache::MixedMlp* mixed) : c_(ctx), mixed_(mixed) {}

  Status Forward(int layer, float* x, int n) override {
    const int d = c_.model->config().d_model;
    const LayerWeights& w = c_.model->weights().layers[static_cast<size_t>(layer)];
    for (int t = 0; t < n; ++t) {
      float* xt = x + static_cast<int64_t>(t) * d;
      const uint64_t before = mixed_->stats().bytes_computed + mixed_->stats().bytes_predictor;
      WEIR_RETURN_IF_ERROR(mixed_->Forward(layer, xt, c_.gate));  // gate_ [max(d_ff, d_model)] holds y
      std::copy(c_.gate, c_.gate + d, xt);
      c_.traffic->mlp_used += mixed_->stats().bytes_computed + mixed_->stats().bytes_predictor - before;
      c_.traffic->mlp_dense += w.mlp_bytes();
    }
    return Status::Ok();
  }

 private:
  MlpContext c_;
  m2cache::MixedMlp* mixed_;
};

}  // namespace

std::unique_ptr<MlpProvider> MakeM2CacheMlp(const MlpContext& ctx, m2cache::MixedMlp* mixed) {
  return std::make_unique<M2CacheMlp>(ctx, mixed);
}

}  // namespace weir::model

