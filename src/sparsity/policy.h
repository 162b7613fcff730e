// SparsityPolicy: per token and per layer, chooses which input columns of each linear layer and
// which MLP units the engine computes. Policies, their formulas and paper sections are listed in
// docs/sparsity.md; `--sparsity NAME:DENSITY[,k=v...]` builds one with ParseSparsity.
//
// Engine hook, per token (also per token of a prefill batch), per layer l:
//   xa = RMSNorm(x)                 SelectInput(l, kAttnIn, xa, cache, &in)    -> cols of q, k, v
//   o  = attention(...)             SelectInput(l, kAttnOut, o, cache, &out)   -> cols of W_o
//   xm = RMSNorm(x)                 SelectInput(l, kMlpIn, xm, cache, &in)     -> cols of gate, up
//   switch (unit_predictor()):
//     kNone: units.SetAll(d_ff); g, u = W_gate·xm, W_up·xm over `in` columns, all units
//     kGate: g = W_gate·xm (all units); SelectUnits(l, g, &units); u only for `units`
//     kUp:   u = W_up·xm   (all units); SelectUnits(l, u, &units); g only for `units`
//   h = silu(g) * u for the computed units (0 elsewhere)           [d_ff]
//   SelectDown(l, h, units, cache, &down)                          -> cols of W_down
// Every result is an IndexList (ascending, or all()). `cache` is the DRAM-cache state of the
// columns of that (layer, site), or nullptr; only cache-aware policies (dip-ca) read it, and
// nullptr then means "everything cached", which makes dip-ca select exactly as dip.
//
// Contract: call Prepare once with the model's dimensions before selecting; each `out` must have
// capacity() >= the width of its site. Per-token calls do not allocate and cannot fail on valid
// calls (a wrong width or layer is a bug and trips WEIR_CHECK).
//
// Thread safety: a policy owns scratch buffers, so one policy serves one thread (one Session);
// Clone() gives each further thread its own.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "sparsity/calibration.h"
#include "sparsity/index_list.h"
#include "sparsity/site.h"

namespace weir::sparsity {

// What a parsed policy does, for printing and for the accuracy harness.
struct PolicyInfo {
  std::string name;                 // "dip"
  std::string spec;                 // canonical spec, e.g. "dip:0.5,up=0.5744,down=0.3511"
  double density = 1.0;             // the DENSITY given (its meaning per method: docs/sparsity.md)
  double target_mlp_density = 1.0;  // fraction of MLP weights the selection sizes aim to read
  double attn_keep = 1.0;           // fraction kept at kAttnIn and kAttnOut
  double mlp_in_keep = 1.0;         // fraction of kMlpIn columns (up/gate) kept
  double units_keep = 1.0;          // fraction of units kept by the unit predictor
  double down_keep = 1.0;           // fraction of kMlpDown columns kept
  bool cache_aware = false;         // reads the cache state (DIP-CA)
  float gamma = 1.0f;               // DIP-CA penalty for uncached columns
  int mlp_in_span = 1;              // layers sharing one up/gate selection (dip span=N)
  std::string ToString() const;     // one line for logs and tables
};

class SparsityPolicy {
 public:
  virtual ~SparsityPolicy() = default;

  virtual const PolicyInfo& info() const = 0;

  // An independent copy (same rules and thresholds, own scratch, same prepared state), e.g. one
  // per session or per worker thread from one parsed spec.
  virtual std::unique_ptr<SparsityPolicy> Clone() const = 0;

  // Checks the policy against the model (calibration layer count and widths) and sizes scratch.
  virtual Status Prepare(std::span<const LayerDims> layers) = 0;

  virtual UnitPredictor unit_predictor() const = 0;
  // False when the site always yields all() under this policy (the engine may skip the call).
  virtual bool MayPrune(Site site) const = 0;

  // The per-channel scale the engine applies to kMlpIn's input after RMS normalization (the
  // layer's ffn_norm weights), for each layer, after Prepare. A span selection (span=N) uses
  // them to predict the inputs of the span's later layers from its first layer's. Optional:
  // without them the first layer's |x| decides alone.
  virtual void SetMlpInputScale(int layer, std::span<const float> scale) {
    (void)layer;
    (void)scale;
  }

  // Span read-ahead (ActiveFlow's cross-layer preloading, paper 002 §3): a guess of the
  // selection the span that starts at `span_layer` will make, from an earlier layer's MLP input
  // x (`from_layer`'s normalized input, its scale replaced by the span's as a span-first layer
  // does). Changes no state the selections depend on. False (out untouched) when the policy
  // selects no span starting there.
  virtual bool PredictSpan(int from_layer, int span_layer, std::span<const float> x,
                           IndexList* out) {
    (void)from_layer;
    (void)span_layer;
    (void)x;
    (void)out;
    return false;
  }

  // Selection at kAttnIn, kAttnOut or kMlpIn from the site's input x [width]. kMlpDown is also
  // accepted when unit_predictor() is kNone (it equals SelectDown with all units computed).
  virtual void SelectInput(int layer, Site site, std::span<const float> x,
                           const CacheStateView* cache, IndexList* out) = 0;
  // Units to compute, from the predictor's full pre-activation [d_ff] (g for kGate, u for kUp).
  virtual void SelectUnits(int layer, std::span<const float> pre, IndexList* out) = 0;
  // Columns of W_down, from h [d_ff] and the units that were computed.
  virtual void SelectDown(int layer, std::span<const float> h, const IndexList& units,
                          const CacheStateView* cache, IndexList* out) = 0;
};

// Builds a policy from `--sparsity` syntax: NAME[:DENSITY][,key=value...]
//   dense | glu:D | gate:D | up:D | cats:D | teal:D | topk-all:D | dip:D[,up=U][,down=W][,span=N]
//   | dip-ca:D[,up=U][,down=W][,gamma=G][,span=N]
// span=N (an integer, 1 to 1024): the up/gate columns are chosen at layers 0, N, 2N, ... and kept
// for the N - 1 layers after (cross-layer channel groups, paper 002 §3.2).
// cats and teal need `calib`; the others ignore it. Errors name the spec and the bad part.
Result<std::unique_ptr<SparsityPolicy>> ParseSparsity(const std::string& spec,
                                                      const Calibration* calib);

}  // namespace weir::sparsity
