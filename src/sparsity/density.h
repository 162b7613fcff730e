// Densities: how DIP splits a target MLP density between the up/gate and down projections, and
// how much of the weights a token actually used given its selections.
//
// "MLP density" is the fraction of the MLP's weight elements a token reads (and, for one dtype,
// its bytes). W_gate, W_up [d_ff, d_model] and W_down [d_model, d_ff] are the same size, so each
// is 1/3 of the MLP and up+gate are 2/3 of it.
//
// Thread safety: pure functions; DensityMeter is a plain accumulator with no synchronisation.
#pragma once

#include <cstdint>

#include "sparsity/index_list.h"
#include "sparsity/site.h"

namespace weir::sparsity {

// DIP's fitted density allocation (DIP paper, Appendix B.1: a linear model in logit space of the
// pareto-optimal up/gate density as a function of the target MLP density; the paper gives no
// coefficients, these are the ones weir uses):
//   up_keep   = sigmoid(0.985 * logit(keep) + 0.300)       (columns of W_up and of W_gate)
//   down_keep = 3 * (keep - (2/3) * up_keep)               (columns of W_down)
// both clamped to [0, 1], so that (2 * up_keep + down_keep) / 3 == keep whenever no clamp bites.
struct DipAllocation {
  double up_keep = 1.0;
  double down_keep = 1.0;
};
DipAllocation DipAllocate(double keep);
// The MLP density an allocation gives when every count is exact: (2 * up_keep + down_keep) / 3.
double DipMlpDensity(const DipAllocation& a);

// What one token used in one MLP block.
struct MlpCounts {
  int64_t d_model = 0;
  int64_t d_ff = 0;
  int64_t n_in = 0;         // active columns of W_gate and W_up (kMlpIn selection)
  int64_t n_gate_rows = 0;  // rows of W_gate computed (d_ff unless units predicted by up)
  int64_t n_up_rows = 0;    // rows of W_up computed (d_ff unless units predicted by gate)
  int64_t n_down = 0;       // active columns of W_down (kMlpDown selection)
};
// Counts from the engine's selections for one token: in = kMlpIn, units = computed units (all
// when the predictor is kNone), down = kMlpDown.
MlpCounts CountMlp(const LayerDims& dims, UnitPredictor predictor, const IndexList& in,
                   const IndexList& units, const IndexList& down);
// (n_gate_rows * n_in + n_up_rows * n_in + d_model * n_down) / (3 * d_ff * d_model).
double MlpDensity(const MlpCounts& c);

// Accumulates weight elements used vs present over tokens and layers, for the attention
// projections (W_q, W_k, W_v over kAttnIn columns; W_o over kAttnOut columns) and the MLP.
// Densities are element-weighted, so layers of different widths count by their size.
class DensityMeter {
 public:
  void AddAttention(const LayerDims& dims, int64_t n_attn_in, int64_t n_attn_out);
  void AddMlp(const MlpCounts& c);
  void Reset() { *this = DensityMeter(); }

  double mlp_density() const { return Ratio(mlp_used_, mlp_total_); }
  double attention_density() const { return Ratio(attn_used_, attn_total_); }
  // Over all attention and MLP projections (embeddings and the output head are not counted).
  double total_density() const { return Ratio(attn_used_ + mlp_used_, attn_total_ + mlp_total_); }
  double mlp_elements_used() const { return mlp_used_; }
  double mlp_elements_total() const { return mlp_total_; }

 private:
  static double Ratio(double a, double b) { return b > 0 ? a / b : 1.0; }
  double mlp_used_ = 0, mlp_total_ = 0, attn_used_ = 0, attn_total_ = 0;
};

}  // namespace weir::sparsity
