// The places in one decoder layer where a sparsity policy chooses what to compute, and the
// per-layer widths of those places.
//
//   attention: xa = RMSNorm(x) [d_model] -> W_q, W_k, W_v    (site kAttnIn,  width d_model)
//              o  = attention output [q_dim] -> W_o          (site kAttnOut, width q_dim)
//   MLP:       xm = RMSNorm(x) [d_model] -> W_gate, W_up     (site kMlpIn,   width d_model)
//              h  = silu(g) * u [d_ff]   -> W_down           (site kMlpDown, width d_ff)
// A selection at a site lists the active *input columns* of the linear layers fed by that site.
// Units are the d_ff rows of W_gate / W_up (equivalently the columns of W_down).
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace weir::sparsity {

enum class Site : uint8_t { kAttnIn = 0, kAttnOut = 1, kMlpIn = 2, kMlpDown = 3 };
inline constexpr int kNumSites = 4;

// "attn_in", "attn_out", "mlp_in", "mlp_down" (also the keys of the calibration file).
std::string_view SiteName(Site site);

// Which projection, computed densely first, chooses the MLP units of a token (gate / up
// pruning and CATS). kNone: every unit is computed over the selected kMlpIn columns.
enum class UnitPredictor : uint8_t { kNone = 0, kGate = 1, kUp = 2 };
std::string_view UnitPredictorName(UnitPredictor p);

// Dimensions of one layer, as the sparsity code needs them.
struct LayerDims {
  int64_t d_model = 0;  // width of kAttnIn and kMlpIn
  int64_t q_dim = 0;    // n_head * head_dim: width of kAttnOut, rows of W_q
  int64_t kv_dim = 0;   // n_head_kv * head_dim: rows of W_k and W_v
  int64_t d_ff = 0;     // width of kMlpDown, number of units
};

// The width (number of input columns) of `site` in a layer of these dimensions.
int64_t SiteWidth(const LayerDims& dims, Site site);

}  // namespace weir::sparsity
