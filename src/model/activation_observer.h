// ActivationObserver: a seam through which tools watch the inputs of every linear layer during a
// forward pass -- calibration of sparsity thresholds (`weir calibrate`), Mosaic's activation
// norms (`weir prune`), traces. Called per token, in layer order, on the session's thread.
//
//   site kAttnIn : x [d_model]           input of W_q, W_k, W_v (after the attention RMSNorm)
//   site kAttnOut: x [n_head * head_dim] input of W_o
//   site kMlpIn  : x [d_model]           input of W_gate, W_up (after the MLP RMSNorm)
//   site kMlpDown: x [d_ff]              input of W_down, h = silu(g) * u
//   OnGate       : g [d_ff]              W_gate · x, before SiLU (CATS calibrates on |SiLU(g)|)
//   OnLayerBegin : a layer starts for a step of n tokens, before any of its weights is touched
//                  (a streamed pack's attention blocks are acquired right after): `--trace`
//                  cuts its per-layer cache windows here
//   OnMlpUnits   : per token, under a sparsity policy: the columns of W_down (neurons) read,
//                  as the policy chose them (`all()` when the whole MLP was read)
//   OnExperts    : per token, in a mixture-of-experts layer: the k experts the router chose
//                  (`weir calibrate` counts them for a hot set of experts)
#pragma once

#include <cstdint>

#include "sparsity/index_list.h"
#include "sparsity/site.h"

namespace weir::model {

class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  virtual void OnInput(int layer, sparsity::Site site, const float* x, int64_t dim) = 0;
  virtual void OnGate(int layer, const float* g, int64_t d_ff) { (void)layer, (void)g, (void)d_ff; }
  virtual void OnLayerBegin(int layer, int n_tokens) { (void)layer, (void)n_tokens; }
  virtual void OnMlpUnits(int layer, const sparsity::IndexList& down) { (void)layer, (void)down; }
  virtual void OnExperts(int layer, const int32_t* experts, int k) {
    (void)layer, (void)experts, (void)k;
  }
};

}  // namespace weir::model
