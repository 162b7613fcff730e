// A trained predictor of a layer's important neurons (M2Cache §5.2's "trained one", in the spirit
// of Deja Vu's), of the same shape and cost as the low-rank predictor (low_rank_predictor.h):
//   t = A x                      A [r, d_model]    (F16 at run time)
//   z = U t + b                  U [d_ff, r] (F16), b [d_ff] (F32)
//   score_i = z_i                the logit that neuron i is in the layer's true top set
// (the form kLogit; kGated, below, keeps the low-rank predictor's |act(ĝ)|·s instead), so a token reads r·(d_model + d_ff) F16 values and d_ff floats, exactly what the default
// low-rank predictor with its up scale reads.
//
// Training (TrainPredictor), offline, on recorded MLP inputs x of calibration text:
//   target  y_i = 1 if |act(W_gate x)_i · (W_up x)_i| is among the top round(f·d_ff) of the
//           layer for this token, else 0 (f = TrainOptions::top_fraction)
//   loss    the mean logistic loss  Σ_i softplus(z_i) − y_i z_i  over neurons and tokens
//   start   kLogit: A = the calibrated low-rank A, U_i = c · s_i · U_i (s = the low-rank
//           predictor's up scale, c normalizing ĝ·s to unit spread), b = logit(f): the low-rank
//           score's ranking for the neurons whose gate is positive. kGated: A, U, s of the
//           low-rank predictor (s times c normalizing the score to unit spread), β = logit(f) −
//           the mean score: exactly the low-rank predictor's ranking
//   steps   Adam (β = 0.9, 0.999) on minibatches, the learning rate decaying linearly to zero,
//           samples shuffled per epoch from a seed; the epoch with the lowest held-out loss is
//           kept (the start counts as epoch 0).
// Everything runs on the calling thread in a fixed order, so a seed gives the same predictor on
// every run and thread count (train layers in parallel, not one layer on many threads).
//
// Thread safety: the free functions write only their arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "m2cache/low_rank_predictor.h"
#include "tensor/tensor_view.h"

namespace weir::m2cache {

// What the trained predictor computes per token (both read the same bytes: A, U in F16 and one
// float per neuron, v):
//   kLogit  score = U(A x) + v            v = b, a bias: a linear logit
//   kGated  score = v ⊙ |act(U(A x))|     v = s, a scale: the low-rank predictor's own score
//           (low_rank_predictor.h with M2Weights::up_scale), so training starts exactly from it;
//           the loss adds a scalar β per layer, z = score + β, which does not change the ranking
//           and is not stored.
enum class PredictorForm : uint32_t { kLogit = 0, kGated = 1 };

struct TrainOptions {
  PredictorForm form = PredictorForm::kGated;
  double top_fraction = 0.5;  // f: the labels mark the true top round(f·d_ff) neurons
  int epochs = 4;
  int batch = 32;
  double learning_rate = 1e-3;  // Adam's step at the start (decays linearly to 0)
  double holdout = 0.125;       // share of the samples held out to pick the epoch and report
  uint64_t seed = 1;
};

// One epoch's numbers (epoch 0 = the start), on the held-out samples except train_loss.
struct EpochReport {
  int epoch = 0;
  double train_loss = 0;   // mean over the epoch's minibatches (0 for epoch 0)
  double heldout_loss = 0;
  double heldout_recall = 0;  // |predicted top set ∩ true top set| / size, at top_fraction
};

struct TrainReport {
  double lowrank_recall = 0;  // the low-rank predictor's own score |act(ĝ)|·s, held out
  double start_loss = 0, start_recall = 0;  // the trained form before any step
  double final_loss = 0, final_recall = 0;  // the kept epoch, after rounding to F16
  int kept_epoch = 0;
  int64_t train_samples = 0, heldout_samples = 0;
};

// A layer's trained predictor: the factors (as a LowRankPredictor: ĝ = U(A x)) and v.
struct TrainedLayer {
  LowRankPredictor factors;
  std::vector<float> bias;  // [d_ff]: v, the bias b (kLogit) or the scale s (kGated)
};

// score[d_ff] by `form` (above); t is scratch of factors.rank() floats.
void TrainedScore(PredictorForm form, kernels::Glu glu, const LowRankPredictor& factors, std::span<const float> bias,
                  const float* x, float* t, float* score, ThreadPool* pool);

// Trains one layer. gate, up: [d_ff, d_model] (any dtype, row-major), the layer's weights, which
// define the targets; x: n samples of the layer's MLP input, [n, d_model] row-major; init: the
// low-rank predictor to start from and up_scale its per-neuron scale (empty = 1). on_epoch, if
// set, is called after each epoch (and for the start). Fails on bad shapes or too few samples.
Result<TrainedLayer> TrainPredictor(const TensorView& gate, const TensorView& up, kernels::Glu glu,
                                    const LowRankPredictor& init, std::span<const float> up_scale,
                                    std::span<const float> x, int64_t n, const TrainOptions& options,
                                    const std::function<void(const EpochReport&)>& on_epoch, TrainReport* report);

}  // namespace weir::m2cache
