#include "model/m2cache_weights.h"

#include <algorithm>

#include "m2cache/predictor_file.h"
#include "model/activation_observer.h"
#include "model/session.h"

namespace weir::model {
namespace {

// Sums x xᵀ of each layer's MLP input (the lower triangle; mirrored at the end).
class SecondMoments final : public ActivationObserver {
 public:
  SecondMoments(int layers, int64_t d) : d_(d), sums_(static_cast<size_t>(layers)), count_(static_cast<size_t>(layers), 0) {
    for (auto& s : sums_) s.assign(static_cast<size_t>(d * d), 0.0);
  }
  void OnInput(int layer, sparsity::Site site, const float* x, int64_t dim) override {
    if (site != sparsity::Site::kMlpIn || dim != d_) return;
    double* s = sums_[static_cast<size_t>(layer)].data();
    for (int64_t i = 0; i < d_; ++i) {
      const double xi = x[i];
      double* row = s + i * d_;
      for (int64_t j = 0; j <= i; ++j) row[j] += xi * x[j];
    }
    ++count_[static_cast<size_t>(layer)];
  }
  std::vector<std::vector<double>> Take() {
    for (size_t l = 0; l < sums_.size(); ++l) {
      const double inv = count_[l] ? 1.0 / static_cast<double>(count_[l]) : 0.0;
      double* s = sums_[l].data();
      for (int64_t i = 0; i < d_; ++i) {
        for (int64_t j = 0; j <= i; ++j) s[j * d_ + i] = s[i * d_ + j] = s[i * d_ + j] * inv;
      }
    }
    return std::move(sums_);
  }

 private:
  int64_t d_;
  std::vector<std::vector<double>> sums_;
  std::vector<uint64_t> count_;
};

// Keeps every MLP input of each layer, in token order.
class MlpInputRecorder final : public ActivationObserver {
 public:
  MlpInputRecorder(int layers, int64_t d) : d_(d), rows_(static_cast<size_t>(layers)) {}
  void OnInput(int layer, sparsity::Site site, const float* x, int64_t dim) override {
    if (site != sparsity::Site::kMlpIn || dim != d_) return;
    auto& r = rows_[static_cast<size_t>(layer)];
    r.insert(r.end(), x, x + d_);
  }
  std::vector<std::vector<float>> Take() { return std::move(rows_); }

 private:
  int64_t d_;
  std::vector<std::vector<float>> rows_;
};

}  // namespace

Result<std::vector<std::vector<double>>> MlpInputSecondMoments(const Model& model, std::span<const int32_t> tokens,
                                                               ThreadPool* pool) {
  const auto& c = model.config();
  SessionOptions so;
  so.ctx = std::max(1, std::min<int>(512, static_cast<int>(tokens.size())));
  so.n_batch = std::min(so.ctx, 64);
  WEIR_ASSIGN_OR_RETURN(auto session, Session::Create(model, pool, so));
  SecondMoments moments(c.n_layers, c.d_model);
  session->set_observer(&moments);
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(so.ctx)) {
    session->Reset();
    const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(so.ctx));
    WEIR_RETURN_IF_ERROR(session->Prefill(tokens.subspan(begin, n)).status());
  }
  return moments.Take();
}

Result<std::unique_ptr<m2cache::M2Weights>> BuildM2Weights(const Model& model, const m2cache::MixConfig& config,
                                                            ThreadPool* pool, const std::function<void(int)>& progress,
                                                            std::span<const int32_t> calibration) {
  const auto& c = model.config();
  if (c.IsMoe()) return Status::Unsupported("--m2cache: " + model.file().path + " is a mixture of experts");
  std::vector<std::vector<double>> moments;
  const bool trained = config.predictor == m2cache::PredictorKind::kTrained;
  const bool predicts = config.predictor != m2cache::PredictorKind::kOracle && !trained;
  if (predicts && !calibration.empty()) {
    WEIR_ASSIGN_OR_RETURN(moments, MlpInputSecondMoments(model, calibration, pool));
  }
  std::vector<m2cache::MlpWeights> layers;
  for (size_t l = 0; l < model.weights().layers.size(); ++l) {
    const LayerWeights& w = model.weights().layers[l];
    layers.push_back({w.w_gate, w.w_up, w.w_down, moments.empty() ? std::span<const double>() : moments[l]});
  }
  const int rank = predicts ? config.rank : 0;
  WEIR_ASSIGN_OR_RETURN(auto weights, m2cache::M2Weights::Build(layers, config.types, rank,
                                                                config.predictor == m2cache::PredictorKind::kLowRankGlu,
                                                                pool, progress));
  if (trained) {
    WEIR_ASSIGN_OR_RETURN(m2cache::PredictorFile file, m2cache::ReadPredictorFile(config.predictor_file));
    if (file.layers.size() != layers.size()) {
      return Status::InvalidArgument(config.predictor_file + ": trained for " + std::to_string(file.layers.size()) +
                                     " layers, " + model.file().path + " has " + std::to_string(layers.size()));
    }
    for (size_t l = 0; l < layers.size(); ++l) {
      m2cache::TrainedLayer& t = file.layers[l];
      if (t.factors.u().rows() != layers[l].gate.rows() || t.factors.a().cols() != layers[l].gate.cols()) {
        return Status::InvalidArgument(config.predictor_file + ": layer " + std::to_string(l) + " is for [" +
                                       std::to_string(t.factors.u().rows()) + ", " + std::to_string(t.factors.a().cols()) +
                                       "], the model's W_gate is [" + std::to_string(layers[l].gate.rows()) + ", " +
                                       std::to_string(layers[l].gate.cols()) + "]");
      }
      weights->rank = std::max(weights->rank, t.factors.rank());
      weights->predictors.push_back(std::move(t.factors));
      // The gated form scores as the low-rank predictor does, with its scale as the up scale.
      (file.form == m2cache::PredictorForm::kGated ? weights->up_scale : weights->bias).push_back(std::move(t.bias));
    }
  }
  return weights;
}

Result<std::vector<std::vector<float>>> RecordMlpInputs(const Model& model, std::span<const int32_t> tokens,
                                                        ThreadPool* pool, const m2cache::M2Weights* m2,
                                                        const m2cache::MixConfig& config) {
  const auto& c = model.config();
  SessionOptions so;
  so.m2cache = m2;
  so.m2cache_config = config;
  so.ctx = std::max(1, std::min<int>(512, static_cast<int>(tokens.size())));
  so.n_batch = std::min(so.ctx, 64);
  WEIR_ASSIGN_OR_RETURN(auto session, Session::Create(model, pool, so));
  MlpInputRecorder recorder(c.n_layers, c.d_model);
  session->set_observer(&recorder);
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(so.ctx)) {
    session->Reset();
    const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(so.ctx));
    WEIR_RETURN_IF_ERROR(session->Prefill(tokens.subspan(begin, n)).status());
  }
  return recorder.Take();
}

}  // namespace weir::model
