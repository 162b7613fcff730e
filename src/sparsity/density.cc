#include "sparsity/density.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace weir::sparsity {

DipAllocation DipAllocate(double keep) {
  DipAllocation a;
  if (keep >= 1.0) return a;  // logit(1) = +inf: everything dense
  if (keep <= 0.0) return {0.0, 0.0};
  const double logit = std::log(keep / (1.0 - keep));
  const double z = 0.985 * logit + 0.300;
  a.up_keep = std::clamp(1.0 / (1.0 + std::exp(-z)), 0.0, 1.0);
  a.down_keep = std::clamp(3.0 * (keep - (2.0 / 3.0) * a.up_keep), 0.0, 1.0);
  return a;
}

double DipMlpDensity(const DipAllocation& a) { return (2.0 * a.up_keep + a.down_keep) / 3.0; }

MlpCounts CountMlp(const LayerDims& dims, UnitPredictor predictor, const IndexList& in,
                   const IndexList& units, const IndexList& down) {
  WEIR_CHECK(in.universe() == dims.d_model && units.universe() == dims.d_ff &&
             down.universe() == dims.d_ff);
  MlpCounts c;
  c.d_model = dims.d_model;
  c.d_ff = dims.d_ff;
  c.n_in = in.size();
  c.n_gate_rows = predictor == UnitPredictor::kUp ? units.size() : dims.d_ff;
  c.n_up_rows = predictor == UnitPredictor::kGate ? units.size() : dims.d_ff;
  if (predictor == UnitPredictor::kNone) c.n_gate_rows = c.n_up_rows = units.size();
  c.n_down = down.size();
  return c;
}

double MlpDensity(const MlpCounts& c) {
  const double total = 3.0 * static_cast<double>(c.d_ff) * static_cast<double>(c.d_model);
  if (total <= 0) return 1.0;
  const double used = static_cast<double>(c.n_gate_rows + c.n_up_rows) * c.n_in +
                      static_cast<double>(c.d_model) * c.n_down;
  return used / total;
}

void DensityMeter::AddAttention(const LayerDims& dims, int64_t n_attn_in, int64_t n_attn_out) {
  const double qkv_rows = static_cast<double>(dims.q_dim + 2 * dims.kv_dim);
  attn_used_ += qkv_rows * n_attn_in + static_cast<double>(dims.d_model) * n_attn_out;
  attn_total_ += qkv_rows * dims.d_model + static_cast<double>(dims.d_model) * dims.q_dim;
}

void DensityMeter::AddMlp(const MlpCounts& c) {
  mlp_used_ += static_cast<double>(c.n_gate_rows + c.n_up_rows) * c.n_in +
               static_cast<double>(c.d_model) * c.n_down;
  mlp_total_ += 3.0 * static_cast<double>(c.d_ff) * static_cast<double>(c.d_model);
}

}  // namespace weir::sparsity
