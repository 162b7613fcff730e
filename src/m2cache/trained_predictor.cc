#include "m2cache/trained_predictor.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/matvec.h"
#include "m2cache/precision_split.h"
#include "tensor/quantize.h"

namespace weir::m2cache {
namespace {

// splitmix64: the same shuffles on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t s_;
};

// Eight independent partial sums, so that the compiler may vectorize without reordering.
float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// The predictor in F32 while it trains.
// act(g) and its derivative, in double (the reference formulas of kernels/ops.h's GLUs).
double Act(kernels::Glu glu, double g, double* slope) {
  if (glu == kernels::Glu::kGeluTanh) {
    const double k = 0.7978845608028654, c = 0.044715;
    const double th = std::tanh(k * (g + c * g * g * g));
    *slope = 0.5 * (1 + th) + 0.5 * g * (1 - th * th) * k * (1 + 3 * c * g * g);
    return 0.5 * g * (1 + th);
  }
  const double sig = 1 / (1 + std::exp(-g));
  *slope = sig * (1 + g * (1 - sig));
  return g * sig;
}

struct Params {
  PredictorForm form = PredictorForm::kGated;
  kernels::Glu glu = kernels::Glu::kSilu;
  int64_t r = 0, d = 0, f = 0;
  std::vector<float> a;  // [r, d]
  std::vector<float> u;  // [f, r]
  std::vector<float> b;  // [f]: the bias (kLogit) or the scale (kGated)
  float beta = 0;        // kGated: the loss's offset

  // z = the logits; g_hat = U t (kGated's backward needs it).
  void Forward(const float* x, float* t, float* z, float* g_hat = nullptr) const {
    for (int64_t i = 0; i < r; ++i) t[i] = Dot(&a[static_cast<size_t>(i * d)], x, d);
    for (int64_t j = 0; j < f; ++j) {
      const float g = Dot(&u[static_cast<size_t>(j * r)], t, r);
      if (g_hat) g_hat[j] = g;
      if (form == PredictorForm::kGated) {
        double slope;
        z[j] = static_cast<float>(b[static_cast<size_t>(j)] * std::fabs(Act(glu, g, &slope)) + beta);
      } else {
        z[j] = b[static_cast<size_t>(j)] + g;
      }
    }
  }
};

double Softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z))); }

// Σ_i softplus(z_i) − y_i z_i.
double LogisticLoss(const float* z, const uint8_t* y, int64_t f) {
  double s = 0;
  for (int64_t j = 0; j < f; ++j) s += Softplus(z[j]) - (y[j] ? static_cast<double>(z[j]) : 0.0);
  return s;
}

// Share of the top k of `score` that the labels mark.
double Recall(std::span<const float> score, const uint8_t* y, int64_t k, std::vector<int32_t>* order,
              std::vector<int32_t>* top, std::vector<int32_t>* none) {
  if (k == 0) return 1.0;
  SplitByScore(score, k, 0, order, top, none);
  int64_t hits = 0;
  for (int32_t i : *top) hits += y[i];
  return static_cast<double>(hits) / static_cast<double>(k);
}

}  // namespace

void TrainedScore(PredictorForm form, kernels::Glu glu, const LowRankPredictor& factors, std::span<const float> bias,
                  const float* x, float* t, float* score, ThreadPool* pool) {
  if (form == PredictorForm::kGated) {
    factors.Score(glu, x, t, score, pool);
    for (size_t i = 0; i < bias.size(); ++i) score[i] *= bias[i];
    return;
  }
  factors.PredictGate(x, t, score, pool);
  for (size_t i = 0; i < bias.size(); ++i) score[i] += bias[i];
}

namespace {

Result<LowRankPredictor> ToF16(const Params& p) {
  std::vector<uint8_t> a(RowBytes(DType::kF16, p.d) * static_cast<size_t>(p.r));
  std::vector<uint8_t> u(RowBytes(DType::kF16, p.r) * static_cast<size_t>(p.f));
  for (int64_t i = 0; i < p.r; ++i) {
    QuantizeRow(DType::kF16, &p.a[static_cast<size_t>(i * p.d)], a.data() + static_cast<size_t>(i) * RowBytes(DType::kF16, p.d), p.d);
  }
  for (int64_t j = 0; j < p.f; ++j) {
    QuantizeRow(DType::kF16, &p.u[static_cast<size_t>(j * p.r)], u.data() + static_cast<size_t>(j) * RowBytes(DType::kF16, p.r), p.r);
  }
  return LowRankPredictor::FromFactors(p.r, p.d, p.f, a, u);
}

}  // namespace

Result<TrainedLayer> TrainPredictor(const TensorView& gate, const TensorView& up, kernels::Glu glu,
                                    const LowRankPredictor& init, std::span<const float> up_scale,
                                    std::span<const float> x, int64_t n, const TrainOptions& options,
                                    const std::function<void(const EpochReport&)>& on_epoch, TrainReport* report) {
  const int64_t f = gate.rows(), d = gate.cols(), r = init.rank();
  if (up.rows() != f || up.cols() != d || init.u().rows() != f || init.a().cols() != d) {
    return Status::InvalidArgument("m2cache: training a predictor of [" + std::to_string(init.u().rows()) + ", " +
                                   std::to_string(init.a().cols()) + "] for gate [" + std::to_string(f) + ", " +
                                   std::to_string(d) + "] and up [" + std::to_string(up.rows()) + ", " +
                                   std::to_string(up.cols()) + "]");
  }
  if (!up_scale.empty() && static_cast<int64_t>(up_scale.size()) != f) {
    return Status::InvalidArgument("m2cache: the up scale has " + std::to_string(up_scale.size()) + " values for " +
                                   std::to_string(f) + " neurons");
  }
  if (n < 0 || static_cast<int64_t>(x.size()) != n * d) {
    return Status::InvalidArgument("m2cache: " + std::to_string(x.size()) + " input values for " + std::to_string(n) +
                                   " samples of " + std::to_string(d));
  }
  if (!(options.top_fraction > 0 && options.top_fraction < 1) || options.epochs < 0 || options.batch < 1 ||
      !(options.learning_rate > 0) || !(options.holdout > 0 && options.holdout < 1)) {
    return Status::InvalidArgument("m2cache: training needs 0 < top < 1, 0 < holdout < 1, epochs >= 0, batch >= 1, "
                                   "a positive learning rate");
  }
  const int64_t n_hold = std::max<int64_t>(1, std::llround(options.holdout * static_cast<double>(n)));
  const int64_t n_train = n - n_hold;
  if (n_train < 1) return Status::InvalidArgument("m2cache: " + std::to_string(n) + " samples are too few to train on");
  const int64_t k = std::clamp<int64_t>(std::llround(options.top_fraction * static_cast<double>(f)), 1, f);

  // Targets: the true top k of |act(g) · u| per sample.
  std::vector<uint8_t> labels(static_cast<size_t>(n * f), 0);
  std::vector<float> g(static_cast<size_t>(f)), uu(static_cast<size_t>(f)), z(static_cast<size_t>(f));
  std::vector<float> t(static_cast<size_t>(r)), dt(static_cast<size_t>(r));
  std::vector<int32_t> order, top, none;
  for (int64_t s = 0; s < n; ++s) {
    const float* xs = &x[static_cast<size_t>(s * d)];
    kernels::MatVec(gate, xs, g.data(), nullptr);
    kernels::MatVec(up, xs, uu.data(), nullptr);
    kernels::GatedActivation(glu, g.data(), uu.data(), f);
    for (float& v : g) v = std::fabs(v);
    SplitByScore(g, k, 0, &order, &top, &none);
    for (int32_t i : top) labels[static_cast<size_t>(s * f + i)] = 1;
  }
  const float* xs_hold = &x[static_cast<size_t>(n_train * d)];
  const uint8_t* y_hold = &labels[static_cast<size_t>(n_train * f)];

  // The low-rank predictor's own held-out recall, and the start.
  TrainReport rep;
  rep.train_samples = n_train;
  rep.heldout_samples = n_hold;
  {
    double sum = 0;
    for (int64_t s = 0; s < n_hold; ++s) {
      init.Score(glu, xs_hold + s * d, t.data(), z.data(), nullptr);
      for (int64_t j = 0; j < f && !up_scale.empty(); ++j) z[static_cast<size_t>(j)] *= up_scale[static_cast<size_t>(j)];
      sum += Recall(z, y_hold + s * f, k, &order, &top, &none);
    }
    rep.lowrank_recall = sum / static_cast<double>(n_hold);
  }
  Params p;
  p.form = options.form;
  p.glu = glu;
  p.r = r, p.d = d, p.f = f;
  p.a.resize(static_cast<size_t>(r * d));
  p.u.resize(static_cast<size_t>(f * r));
  p.b.assign(static_cast<size_t>(f), static_cast<float>(std::log(options.top_fraction / (1 - options.top_fraction))));
  for (int64_t i = 0; i < r; ++i) DequantizeRow(init.a(), i, &p.a[static_cast<size_t>(i * d)]);
  for (int64_t j = 0; j < f; ++j) DequantizeRow(init.u(), j, &p.u[static_cast<size_t>(j * r)]);
  if (options.form == PredictorForm::kGated) {
    // s = c · up_scale, c = 1 / rms(|act(ĝ)| · up_scale); β = logit(f) − the mean of the scores.
    double sq = 0, sum = 0;
    for (int64_t s = 0; s < n_train; ++s) {
      init.Score(glu, &x[static_cast<size_t>(s * d)], t.data(), z.data(), nullptr);
      for (int64_t j = 0; j < f; ++j) {
        const double v = z[static_cast<size_t>(j)] * (up_scale.empty() ? 1.0f : up_scale[static_cast<size_t>(j)]);
        sq += v * v;
        sum += v;
      }
    }
    const double cnt = static_cast<double>(n_train * f);
    const double rms = std::sqrt(sq / cnt);
    const double c = rms > 0 && std::isfinite(rms) ? 1.0 / rms : 1.0;
    for (int64_t j = 0; j < f; ++j) {
      p.b[static_cast<size_t>(j)] = static_cast<float>(c * (up_scale.empty() ? 1.0f : up_scale[static_cast<size_t>(j)]));
    }
    p.beta = static_cast<float>(std::log(options.top_fraction / (1 - options.top_fraction)) - c * sum / cnt);
  } else {
    // c = 1 / rms(ĝ · s) over the training samples: a unit spread for the logits.
    double sq = 0;
    for (int64_t s = 0; s < n_train; ++s) {
      init.PredictGate(&x[static_cast<size_t>(s * d)], t.data(), z.data(), nullptr);
      for (int64_t j = 0; j < f; ++j) {
        const double v = z[static_cast<size_t>(j)] * (up_scale.empty() ? 1.0f : up_scale[static_cast<size_t>(j)]);
        sq += v * v;
      }
    }
    const double rms = std::sqrt(sq / static_cast<double>(n_train * f));
    const double c = rms > 0 && std::isfinite(rms) ? 1.0 / rms : 1.0;
    for (int64_t j = 0; j < f; ++j) {
      const float scale = static_cast<float>(c * (up_scale.empty() ? 1.0f : up_scale[static_cast<size_t>(j)]));
      for (int64_t i = 0; i < r; ++i) p.u[static_cast<size_t>(j * r + i)] *= scale;
    }
  }
  auto evaluate = [&](const Params& q, double* loss, double* recall) {
    double l = 0, rc = 0;
    for (int64_t s = 0; s < n_hold; ++s) {
      q.Forward(xs_hold + s * d, t.data(), z.data());
      l += LogisticLoss(z.data(), y_hold + s * f, f);
      rc += Recall(z, y_hold + s * f, k, &order, &top, &none);
    }
    *loss = l / static_cast<double>(n_hold * f);
    *recall = rc / static_cast<double>(n_hold);
  };
  EpochReport er;
  evaluate(p, &er.heldout_loss, &er.heldout_recall);
  rep.start_loss = er.heldout_loss;
  rep.start_recall = er.heldout_recall;
  if (on_epoch) on_epoch(er);
  Params best = p;
  double best_loss = er.heldout_loss;

  // Adam.
  std::vector<float> ga(p.a.size()), gu(p.u.size()), gb(p.b.size());
  std::vector<float> ma(p.a.size()), va(p.a.size()), mu(p.u.size()), vu(p.u.size()), mb(p.b.size()), vb(p.b.size());
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  const int64_t batches = (n_train + options.batch - 1) / options.batch;
  const int64_t total_steps = batches * options.epochs;
  int64_t step = 0;
  std::vector<int64_t> perm(static_cast<size_t>(n_train));
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(options.seed);
  std::vector<float> dz(static_cast<size_t>(f)), g_hat(static_cast<size_t>(f));
  float g_beta = 0, m_beta = 0, v_beta = 0;
  auto adam = [&](std::vector<float>& w, const std::vector<float>& grad, std::vector<float>& m, std::vector<float>& v,
                  double lr, double c1, double c2) {
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = static_cast<float>(beta1 * m[i] + (1 - beta1) * grad[i]);
      v[i] = static_cast<float>(beta2 * v[i] + (1 - beta2) * static_cast<double>(grad[i]) * grad[i]);
      w[i] -= static_cast<float>(lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps));
    }
  };
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    for (int64_t i = n_train - 1; i > 0; --i) {  // Fisher-Yates
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(rng.Next() % static_cast<uint64_t>(i + 1))]);
    }
    double epoch_loss = 0;
    for (int64_t bi = 0; bi < batches; ++bi) {
      const int64_t begin = bi * options.batch, end = std::min(n_train, begin + options.batch);
      const float inv = 1.0f / static_cast<float>(end - begin);
      std::fill(ga.begin(), ga.end(), 0.0f);
      std::fill(gu.begin(), gu.end(), 0.0f);
      std::fill(gb.begin(), gb.end(), 0.0f);
      g_beta = 0;
      for (int64_t q = begin; q < end; ++q) {
        const int64_t s = perm[static_cast<size_t>(q)];
        const float* xs = &x[static_cast<size_t>(s * d)];
        const uint8_t* ys = &labels[static_cast<size_t>(s * f)];
        p.Forward(xs, t.data(), z.data(), g_hat.data());
        epoch_loss += LogisticLoss(z.data(), ys, f);
        // d loss / d z_j = σ(z_j) − y_j (per sample; the batch mean via inv).
        std::fill(dt.begin(), dt.end(), 0.0f);
        for (int64_t j = 0; j < f; ++j) {
          const float sig = 1.0f / (1.0f + std::exp(-z[static_cast<size_t>(j)]));
          float dzj = (sig - static_cast<float>(ys[j])) * inv;
          if (p.form == PredictorForm::kGated) {
            // z = s |act(ĝ)| + β: ds = dz |act|, dβ = dz, dĝ = dz s sign(act) act'.
            double slope;
            const double act = Act(glu, g_hat[static_cast<size_t>(j)], &slope);
            gb[static_cast<size_t>(j)] += static_cast<float>(dzj * std::fabs(act));
            g_beta += dzj;
            dzj = static_cast<float>(dzj * p.b[static_cast<size_t>(j)] * (act < 0 ? -slope : slope));
          } else {
            gb[static_cast<size_t>(j)] += dzj;
          }
          dz[static_cast<size_t>(j)] = dzj;
          Axpy(dzj, &p.u[static_cast<size_t>(j * r)], dt.data(), r);   // dt = Uᵀ dz
          Axpy(dzj, t.data(), &gu[static_cast<size_t>(j * r)], r);     // dU += dz tᵀ
        }
        for (int64_t i = 0; i < r; ++i) Axpy(dt[static_cast<size_t>(i)], xs, &ga[static_cast<size_t>(i * d)], d);
      }
      ++step;
      const double lr = options.learning_rate * (1.0 - static_cast<double>(step - 1) / static_cast<double>(total_steps));
      const double c1 = 1 - std::pow(beta1, static_cast<double>(step)), c2 = 1 - std::pow(beta2, static_cast<double>(step));
      adam(p.a, ga, ma, va, lr, c1, c2);
      adam(p.u, gu, mu, vu, lr, c1, c2);
      adam(p.b, gb, mb, vb, lr, c1, c2);
      if (p.form == PredictorForm::kGated) {
        m_beta = static_cast<float>(beta1 * m_beta + (1 - beta1) * g_beta);
        v_beta = static_cast<float>(beta2 * v_beta + (1 - beta2) * static_cast<double>(g_beta) * g_beta);
        p.beta -= static_cast<float>(lr * (m_beta / c1) / (std::sqrt(v_beta / c2) + eps));
      }
    }
    er.epoch = epoch;
    er.train_loss = epoch_loss / static_cast<double>(n_train * f);
    evaluate(p, &er.heldout_loss, &er.heldout_recall);
    if (on_epoch) on_epoch(er);
    if (er.heldout_loss < best_loss) {
      best_loss = er.heldout_loss;
      best = p;
      rep.kept_epoch = epoch;
    }
  }

  TrainedLayer out;
  WEIR_ASSIGN_OR_RETURN(out.factors, ToF16(best));
  out.bias = best.b;
  {  // The numbers of what will run: F16 factors.
    double l = 0, rc = 0;
    for (int64_t s = 0; s < n_hold; ++s) {
      TrainedScore(options.form, glu, out.factors, out.bias, xs_hold + s * d, t.data(), z.data(), nullptr);
      if (options.form == PredictorForm::kGated) {
        for (float& v : z) v += best.beta;
      }
      l += LogisticLoss(z.data(), y_hold + s * f, f);
      rc += Recall(z, y_hold + s * f, k, &order, &top, &none);
    }
    rep.final_loss = l / static_cast<double>(n_hold * f);
    rep.final_recall = rc / static_cast<double>(n_hold);
  }
  if (report) *report = rep;
  return out;
}

}  // namespace weir::m2cache
