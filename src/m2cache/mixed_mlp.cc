#include "m2cache/mixed_mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/gather.h"
#include "kernels/matvec.h"
#include "m2cache/precision_split.h"
#include "m2cache/trained_predictor.h"
#include "tensor/quantize.h"

namespace weir::m2cache {

std::string MixConfig::ToString() const {
  char buf[192];
  std::snprintf(buf, sizeof(buf), "high=%.4g,low=%.4g,hi=%s,lo=%s,%s%s", r_high, r_low, DTypeName(types.high),
                DTypeName(types.low),
                predictor == PredictorKind::kOracle
                    ? "predictor=oracle"
                    : ((predictor == PredictorKind::kLowRankGlu ? "predictor=glu,rank=" : "rank=") + std::to_string(rank)).c_str(),
                cache_units ? "" : ",units=off");
  std::string s = buf;
  if (predictor == PredictorKind::kTrained) {
    const size_t at = s.find(",rank=");
    s = s.substr(0, at) + ",predictor=trained:" + predictor_file + (cache_units ? "" : ",units=off");
  }
  if (cache_units && tier != "dram") s += ",tier=" + tier;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

namespace {

// sqrt(w_iᵀ C w_i) for every row w_i of `up` (‖w_i‖ when C is empty).
std::vector<float> UpScale(const TensorView& up, std::span<const double> c, ThreadPool* pool) {
  const int64_t rows = up.rows(), d = up.cols();
  std::vector<float> out(static_cast<size_t>(rows));
  ParallelFor(pool, static_cast<size_t>(rows), [&](size_t begin, size_t end, int) {
    std::vector<float> w(static_cast<size_t>(d));
    for (size_t i = begin; i < end; ++i) {
      DequantizeRow(up, static_cast<int64_t>(i), w.data());
      double q = 0;
      if (c.empty()) {
        for (float v : w) q += static_cast<double>(v) * v;
      } else {
        for (int64_t a = 0; a < d; ++a) {
          const double* ca = c.data() + a * d;
          double dot = 0;
          for (int64_t b = 0; b < d; ++b) dot += ca[b] * w[static_cast<size_t>(b)];
          q += dot * w[static_cast<size_t>(a)];
        }
      }
      out[i] = static_cast<float>(std::sqrt(std::max(q, 0.0)));
    }
  });
  return out;
}

}  // namespace

uint64_t M2Weights::predictor_bytes() const {
  uint64_t b = 0;
  for (const auto& p : predictors) b += p.bytes();
  for (const auto& p : up_predictors) b += p.bytes();
  for (const auto& s : up_scale) b += s.size() * sizeof(float);
  for (const auto& s : bias) b += s.size() * sizeof(float);
  return b;
}

Result<std::unique_ptr<M2Weights>> M2Weights::Build(std::span<const MlpWeights> layers, const StoreTypes& types,
                                                    int rank, bool up, ThreadPool* pool,
                                                    const std::function<void(int)>& progress) {
  auto w = std::make_unique<M2Weights>();
  WEIR_ASSIGN_OR_RETURN(w->store, NeuronStore::Build(layers, types, pool));
  w->rank = rank;
  if (rank > 0) {
    for (size_t l = 0; l < layers.size(); ++l) {
      const std::span<const double> scale = layers[l].input_second_moment;
      WEIR_ASSIGN_OR_RETURN(LowRankPredictor p, LowRankPredictor::Fit(layers[l].gate, rank, 0x4d32 + l, pool, scale));
      w->predictors.push_back(std::move(p));
      if (up) {
        WEIR_ASSIGN_OR_RETURN(LowRankPredictor q, LowRankPredictor::Fit(layers[l].up, rank, 0x5550 + l, pool, scale));
        w->up_predictors.push_back(std::move(q));
      } else {
        w->up_scale.push_back(UpScale(layers[l].up, scale, pool));
      }
      if (progress) progress(static_cast<int>(l));
    }
  }
  return w;
}

Result<std::unique_ptr<MixedMlp>> MixedMlp::Create(const M2Weights* weights, const MixConfig& config,
                                                   kernels::Glu glu, TierMemory* top, ThreadPool* pool,
                                                   LayerSource* source) {
  if (!(config.r_high >= 0 && config.r_low >= 0 && config.r_high + config.r_low <= 1.0 + 1e-9)) {
    return Status::InvalidArgument("m2cache: high=" + std::to_string(config.r_high) + " and low=" +
                                   std::to_string(config.r_low) +
                                   " must be fractions of the neurons with high + low <= 1");
  }
  auto m = std::unique_ptr<MixedMlp>(new MixedMlp(weights, config, glu, pool));
  if (source == nullptr) {
    if (weights->store == nullptr) {
      return Status::InvalidArgument("m2cache: the weights hold no neuron store; give the MLP a layer source");
    }
    m->own_source_ = std::make_unique<ResidentSource>(weights->store.get());
    source = m->own_source_.get();
  }
  m->source_ = source;
  m->top_ = top;
  const size_t layers = static_cast<size_t>(source->n_layers());
  if (config.predictor != PredictorKind::kOracle && weights->predictors.size() != layers) {
    return Status::InvalidArgument("m2cache: the weights were built without a low-rank predictor");
  }
  if (config.predictor == PredictorKind::kTrained && weights->bias.size() != layers &&
      weights->up_scale.size() != layers) {
    return Status::InvalidArgument("m2cache: the weights hold no trained predictor (predictor=trained:FILE)");
  }
  if (config.predictor == PredictorKind::kLowRankGlu && weights->up_predictors.size() != layers) {
    return Status::InvalidArgument("m2cache: the weights were built without the up projection's predictor");
  }
  int64_t widest = 0, d_model = 0, rank = 1;
  for (int l = 0; l < source->n_layers(); ++l) {
    const LayerShape ln = source->shape(l);
    widest = std::max(widest, ln.d_ff);
    d_model = std::max(d_model, ln.d_model);
    for (const auto* preds : {&weights->predictors, &weights->up_predictors}) {
      if (preds->empty() || config.predictor == PredictorKind::kOracle) continue;
      const LowRankPredictor& p = (*preds)[static_cast<size_t>(l)];
      if (p.u().rows() != ln.d_ff || p.a().cols() != ln.d_model) {
        return Status::InvalidArgument("m2cache: layer " + std::to_string(l) + "'s predictor is for [" +
                                       std::to_string(p.u().rows()) + ", " + std::to_string(p.a().cols()) +
                                       "], its neurons are [" + std::to_string(ln.d_ff) + ", " +
                                       std::to_string(ln.d_model) + "]");
      }
      rank = std::max<int64_t>(rank, p.rank());
    }
    const auto& v = weights->bias.empty() ? weights->up_scale : weights->bias;
    if (config.predictor == PredictorKind::kTrained && static_cast<int64_t>(v[static_cast<size_t>(l)].size()) != ln.d_ff) {
      return Status::InvalidArgument("m2cache: layer " + std::to_string(l) + "'s trained predictor has " +
                                     std::to_string(v[static_cast<size_t>(l)].size()) +
                                     " biases, the layer " + std::to_string(ln.d_ff) + " neurons");
    }
    int64_t n_high = std::llround(config.r_high * static_cast<double>(ln.d_ff));
    int64_t n_low = std::llround(config.r_low * static_cast<double>(ln.d_ff));
    n_high = std::min(n_high, ln.d_ff);
    n_low = std::min(n_low, ln.d_ff - n_high);
    m->counts_.push_back({n_high, n_low});
    if (top != nullptr) {
      for (int p = 0; p < kNumPrecisions; ++p) {
        const Shape shape{ln.d_ff, ln.d_model};
        const DType t = source->type(static_cast<Precision>(p));
        const NeuronRows like{TensorView{t, shape, nullptr}, TensorView{t, shape, nullptr},
                              TensorView{t, shape, nullptr}};
        WEIR_ASSIGN_OR_RETURN(CacheUnit unit, CacheUnit::Create(like, m->counts_.back()[p], top));
        m->units_.push_back(std::move(unit));
      }
    }
  }
  m->source_base_ = source->stats();
  const size_t w = static_cast<size_t>(widest);
  m->score_.resize(w);
  m->g_.resize(w);
  m->u_hat_.resize(w);
  m->u_.resize(w);
  m->h_.resize(w);
  m->t_.resize(static_cast<size_t>(std::max<int64_t>({rank, weights->rank, 1})));
  m->y2_.resize(static_cast<size_t>(d_model));
  m->slots_.resize(w);
  m->mark_.resize(w);
  for (auto& l : m->list_) l.reserve(w);
  return m;
}

// score_ = the importance of every neuron of the layer for input x.
void MixedMlp::Score(int layer, const LayerNeurons& ln, const float* x) {
  const size_t l = static_cast<size_t>(layer);
  // A trained predictor of the gated form is the low-rank score with trained factors and scale.
  if (config_.predictor == PredictorKind::kLowRank || (config_.predictor == PredictorKind::kTrained && w_->bias.empty())) {
    w_->predictors[l].Score(glu_, x, t_.data(), score_.data(), pool_);
    stats_.bytes_predictor += w_->predictors[l].bytes();
    if (l < w_->up_scale.size() && !w_->up_scale[l].empty()) {
      const float* s = w_->up_scale[l].data();
      for (int64_t i = 0; i < ln.d_ff; ++i) score_[static_cast<size_t>(i)] *= s[i];
      stats_.bytes_predictor += static_cast<uint64_t>(ln.d_ff) * sizeof(float);
    }
    return;
  }
  if (config_.predictor == PredictorKind::kTrained) {
    TrainedScore(PredictorForm::kLogit, glu_, w_->predictors[l], w_->bias[l], x, t_.data(), score_.data(), pool_);
    stats_.bytes_predictor += w_->predictors[l].bytes() + w_->bias[l].size() * sizeof(float);
    return;
  }
  if (config_.predictor == PredictorKind::kLowRankGlu) {
    w_->predictors[l].PredictGate(x, t_.data(), score_.data(), pool_);
    w_->up_predictors[l].PredictGate(x, t_.data(), u_hat_.data(), pool_);
    kernels::GatedActivation(glu_, score_.data(), u_hat_.data(), ln.d_ff);
    for (int64_t i = 0; i < ln.d_ff; ++i) score_[static_cast<size_t>(i)] = std::fabs(score_[static_cast<size_t>(i)]);
    stats_.bytes_predictor += w_->predictors[l].bytes() + w_->up_predictors[l].bytes();
    return;
  }
  // Oracle: the true |h| from every neuron at the high precision (reads the whole layer).
  kernels::MatVec(ln.at[kHigh].gate, x, score_.data(), pool_);
  kernels::MatVec(ln.at[kHigh].up, x, u_.data(), pool_);
  kernels::GatedActivation(glu_, score_.data(), u_.data(), ln.d_ff);
  for (int64_t i = 0; i < ln.d_ff; ++i) score_[static_cast<size_t>(i)] = std::fabs(score_[static_cast<size_t>(i)]);
  stats_.bytes_predictor += ln.at[kHigh].gate.nbytes() + ln.at[kHigh].up.nbytes();
}

// Recall of the predicted active set against the true top set of |h| (same size).
void MixedMlp::CountRecall(int layer, const LayerNeurons& ln, const float* x) {
  const int64_t active = counts_[static_cast<size_t>(layer)][kHigh] + counts_[static_cast<size_t>(layer)][kLow];
  if (active == 0) return;
  std::vector<float> g(static_cast<size_t>(ln.d_ff)), u(static_cast<size_t>(ln.d_ff));
  kernels::MatVec(ln.at[kHigh].gate, x, g.data(), pool_);
  kernels::MatVec(ln.at[kHigh].up, x, u.data(), pool_);
  kernels::GatedActivation(glu_, g.data(), u.data(), ln.d_ff);
  for (float& v : g) v = std::fabs(v);
  std::vector<int32_t> top, none;
  SplitByScore(g, active, 0, &true_order_, &top, &none);
  std::fill(mark_.begin(), mark_.begin() + ln.d_ff, 0);
  for (int32_t i : top) mark_[static_cast<size_t>(i)] = 1;
  for (int p = 0; p < kNumPrecisions; ++p) {
    for (int32_t i : list_[p]) stats_.recall_hits += mark_[static_cast<size_t>(i)];
  }
  stats_.recall_total += static_cast<uint64_t>(active);
}

Status MixedMlp::Forward(int layer, const float* x, float* y) {
  Result<const LayerNeurons*> rows = source_->Acquire(layer);
  if (!rows.ok()) {
    SyncSourceStats();
    return rows.status();
  }
  Status st = Compute(layer, **rows, x, y);
  // The units' copies read the acquired rows: they must have landed before the rows go.
  if (!units_.empty()) {
    const Status flushed = top_->Flush();
    if (st.ok()) st = flushed;
  }
  source_->Release(layer);
  SyncSourceStats();
  return st;
}

void MixedMlp::SyncSourceStats() {
  const SourceStats s = source_->stats();
  stats_.bytes_from_storage = s.bytes_read - source_base_.bytes_read;
  stats_.storage_reads = s.reads - source_base_.reads;
  stats_.storage_read_seconds = s.read_seconds - source_base_.read_seconds;
  stats_.stall_seconds = s.stall_seconds - source_base_.stall_seconds;
}

Status MixedMlp::Compute(int layer, const LayerNeurons& ln, const float* x, float* y) {
  const int64_t d = ln.d_model;
  const auto& count = counts_[static_cast<size_t>(layer)];
  Score(layer, ln, x);
  SplitByScore(std::span<const float>(score_.data(), static_cast<size_t>(ln.d_ff)), count[kHigh], count[kLow], &order_,
               &list_[kHigh], &list_[kLow]);
  if (config_.measure_recall) CountRecall(layer, ln, x);

  std::fill(y, y + d, 0.0f);
  for (int p = 0; p < kNumPrecisions; ++p) {
    const std::vector<int32_t>& neurons = list_[p];
    const int64_t n = static_cast<int64_t>(neurons.size());
    stats_.neurons[p] += static_cast<uint64_t>(n);
    if (n == 0) continue;
    const NeuronRows* rows = &ln.at[p];
    const int32_t* idx = neurons.data();
    if (!units_.empty()) {
      CacheUnit& unit = units_[static_cast<size_t>(layer) * kNumPrecisions + p];
      const int64_t hits = unit.Update(ln.at[p], neurons, slots_.data(), &stats_.bytes_into_top);
      stats_.unit_hits += static_cast<uint64_t>(hits);
      stats_.unit_loads[p] += static_cast<uint64_t>(n - hits);
      rows = &unit.rows();
      idx = slots_.data();
    }
    float* out = p == 0 ? y : y2_.data();
    if (top_ != nullptr) {
      WEIR_RETURN_IF_ERROR(top_->Compute(*rows, std::span<const int32_t>(idx, static_cast<size_t>(n)), glu_, x, out, pool_));
    } else {
      HostMlpPart(*rows, std::span<const int32_t>(idx, static_cast<size_t>(n)), glu_, x, out, g_.data(), u_.data(),
                  h_.data(), pool_);
    }
    if (p != 0) {
      for (int64_t i = 0; i < d; ++i) y[i] += y2_[static_cast<size_t>(i)];
    }
    stats_.bytes_computed += static_cast<uint64_t>(n) * source_->neuron_bytes(layer, static_cast<Precision>(p));
  }
  stats_.bytes_dense += static_cast<uint64_t>(ln.d_ff) * source_->neuron_bytes(layer, kHigh);
  stats_.layer_tokens += 1;
  return Status::Ok();
}

}  // namespace weir::m2cache
