// LowRankPredictor: which neurons of a layer matter for this token, before reading them
// (M2Cache §5.2 uses a Deja Vu-style predictor; weir's is the rank-r truncated SVD of the gate
// projection, computed offline from the weights, no training):
//   W_gate ≈ U · A,   U [d_ff, r] (left singular vectors), A [r, d_model] (= S · Vᵀ)
//   ĝ = U · (A · x)                the predicted gate pre-activation, r·(d_model + d_ff) MACs
//   score_i = |act(ĝ_i)|           act = the model's SiLU or GELU; the higher, the more it matters
// The factors are found by randomized subspace iteration (Halko, Martinsson & Tropp 2011: a
// Gaussian start of r + 8 columns, 3 power iterations with re-orthonormalization, then the
// eigen-decomposition of the small projected matrix by cyclic Jacobi), in double precision, from
// a fixed seed, so a model gives the same predictor on every machine. They are kept in F16.
// With r >= min(d_ff, d_model) the factorization is exact up to F16 rounding.
//
// The inputs are not isotropic (a few channels of the normalized MLP input carry most of the
// magnitude), so given the second moment C = E[x xᵀ] of the layer's inputs on calibration text
// the fit minimizes the expected error E||W x - U A x||² = ||(W - U A) L||²_F instead, with
// C + εI = L Lᵀ (Cholesky, ε = 1e-6 · tr(C) / d_model): U A' = the rank-r truncated SVD of W L,
// A = A' L⁻¹ (as in activation-whitened SVD compression). Without C the fit is the plain SVD.
//
// Thread safety: immutable after Fit; Predict writes only its arguments.
#pragma once

#include <cstdint>
#include <span>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "tensor/tensor_view.h"

namespace weir::m2cache {

class LowRankPredictor {
 public:
  LowRankPredictor() = default;
  LowRankPredictor(LowRankPredictor&&) = default;
  LowRankPredictor& operator=(LowRankPredictor&&) = default;

  // w: [d_ff, d_model], any dtype, row-major. rank >= 1 (capped at min(d_ff, d_model)).
  // second_moment: E[x xᵀ] of the inputs, [d_model, d_model] row-major, or empty.
  static Result<LowRankPredictor> Fit(const TensorView& w, int rank, uint64_t seed, ThreadPool* pool,
                                      std::span<const double> second_moment = {});

  // A predictor from stored F16 factors (a store file's): a [rank, d_model], u [d_ff, rank],
  // row-major; the sizes must match exactly.
  static Result<LowRankPredictor> FromFactors(int64_t rank, int64_t d_model, int64_t d_ff,
                                              std::span<const uint8_t> a, std::span<const uint8_t> u);

  int rank() const { return static_cast<int>(a_.rows()); }
  // ĝ [d_ff] from x [d_model]; t is scratch of rank() floats.
  void PredictGate(const float* x, float* t, float* g_hat, ThreadPool* pool) const;
  // score[d_ff] = |act(ĝ)| (ĝ computed into score first).
  void Score(kernels::Glu glu, const float* x, float* t, float* score, ThreadPool* pool) const;
  // Bytes of the two factors (what a token reads to predict).
  uint64_t bytes() const { return a_.nbytes() + u_.nbytes(); }
  const TensorView& a() const { return a_; }
  const TensorView& u() const { return u_; }

 private:
  AlignedBuffer storage_;
  TensorView a_;  // [r, d_model] F16
  TensorView u_;  // [d_ff, r] F16
};

}  // namespace weir::m2cache
