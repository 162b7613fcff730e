// MixedMlp: one token's MLP with dynamic sparse mixed-precision neurons (M2Cache §5.2-5.3):
//   score = predictor(x)                         low-rank gate predictor (low_rank_predictor.h),
//                                                or the oracle |act(W_gate x) · (W_up x)|
//   high, low = SplitByScore(score, n_high, n_low)       n_p = round(r_p · d_ff)
//   for p in {high, low}:
//     slots = unit[p].Update(p's neurons)        ATU: only changed neurons are copied (optional)
//     g, u  = gathered rows of gate, up at p     h = act(g) ⊙ u
//     y    += Σ_i h_i · down_i at p              gathered down columns
// Neurons outside both lists are skipped (h = 0). With the cache units the kernels read the
// units' slots; without them they read the layer's rows directly (same numbers). The rows come
// from a LayerSource (layer_source.h), acquired for the step and released after it: the store in
// DRAM (ResidentSource) or the SSD tier (FileSource, file_source.h).
//
// M2Weights is what a model needs for this, built once and shared by every session: one predictor
// per layer and, when built from the model (not opened from a store file), the neuron store at
// both precisions.
//
// Thread safety: M2Weights is immutable; a MixedMlp belongs to one session (one thread).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "m2cache/cache_unit.h"
#include "m2cache/layer_source.h"
#include "m2cache/low_rank_predictor.h"
#include "m2cache/neuron_store.h"
#include "m2cache/tier_memory.h"

namespace weir::m2cache {

// kLowRank: score = |act(ĝ)| from a low-rank gate; kLowRankGlu: score = |act(ĝ) · û| from
// low-rank gate and up (twice the predictor bytes); kOracle: the true |act(g) · u| (dense);
// kTrained: the logits U(A x) + b of a predictor trained offline (trained_predictor.h), read from
// a `weir m2fit` file (predictor_file.h).
enum class PredictorKind { kLowRank, kLowRankGlu, kOracle, kTrained };

// What a run asks for; parsed from `--m2cache` (mix_config.h).
struct MixConfig {
  double r_high = 0.1;  // fraction of each layer's neurons loaded at the high precision
  double r_low = 0.4;   // fraction loaded at the low precision (the rest are skipped)
  StoreTypes types;     // the two precisions (Q8_0 and Q4_0 by default)
  int rank = 64;        // the low-rank predictor's rank
  PredictorKind predictor = PredictorKind::kLowRank;
  std::string predictor_file;   // kTrained: the `weir m2fit` file
  bool cache_units = true;      // compute from per-layer ATU cache units in the top tier
  std::string tier = "dram";    // where the units live: dram (CPU engine) or cuda
  bool measure_recall = false;  // also compute the true top set (dense) to count the recall
  std::string ToString() const;  // canonical spec, e.g. "high=0.1,low=0.4,hi=q8_0,lo=q4_0,rank=64"
};

struct M2Weights {
  std::unique_ptr<NeuronStore> store;           // null when the rows come from a store file
  std::vector<LowRankPredictor> predictors;     // of W_gate, one per layer (empty for the oracle)
  std::vector<LowRankPredictor> up_predictors;  // of W_up, one per layer (kLowRankGlu only)
  // Per layer, the expected magnitude of each neuron's up projection, sqrt(w_upᵢᵀ C w_upᵢ) with
  // C the input's second moment (‖w_upᵢ‖ without one); kLowRank scores |act(ĝᵢ)| · up_scaleᵢ.
  // Empty = 1 (the plain gate score).
  std::vector<std::vector<float>> up_scale;
  // Per layer, the trained predictor's bias b [d_ff] (kTrained of the logit form: predictors hold
  // its U and A; the gated form keeps its scale in up_scale and scores as kLowRank does).
  std::vector<std::vector<float>> bias;
  int rank = 0;
  uint64_t predictor_bytes() const;
  // Builds the store and (rank > 0) the gate predictors, and with `up` those of W_up too;
  // progress(layer) after each layer.
  static Result<std::unique_ptr<M2Weights>> Build(std::span<const MlpWeights> layers, const StoreTypes& types,
                                                  int rank, bool up, ThreadPool* pool,
                                                  const std::function<void(int)>& progress = nullptr);
};

// Counters summed over tokens and layers (bytes are weight bytes).
struct M2Stats {
  uint64_t layer_tokens = 0;           // (token, layer) steps
  uint64_t neurons[kNumPrecisions] = {0, 0};
  uint64_t bytes_computed = 0;         // neuron rows the kernels read (both precisions)
  uint64_t bytes_predictor = 0;        // predictor factors read
  uint64_t bytes_dense = 0;            // what the dense MLP at the high precision would read
  uint64_t unit_hits = 0;              // neurons already in their cache unit (ATU)
  uint64_t unit_loads[kNumPrecisions] = {0, 0};  // neurons copied into a unit, per precision
  uint64_t bytes_into_top = 0;         // bytes copied from the DRAM tier into the top tier
  uint64_t recall_hits = 0, recall_total = 0;  // predicted active ∩ true top set, true set size
  // The layer source's counters (layer_source.h) since the MLP was created or its stats reset
  // (a FileSource's fixed area, read when the source is created, is not in them).
  uint64_t bytes_from_storage = 0;     // bytes read from storage (the SSD tier)
  uint64_t storage_reads = 0;
  double storage_read_seconds = 0;     // time inside the device's reads (the preloader's thread)
  double stall_seconds = 0;            // time the forward pass waited for a layer to arrive
  double recall() const { return recall_total ? static_cast<double>(recall_hits) / recall_total : 0.0; }
  double unit_hit_rate() const {
    const uint64_t n = unit_hits + unit_loads[kHigh] + unit_loads[kLow];
    return n ? static_cast<double>(unit_hits) / n : 0.0;
  }
};

class MixedMlp {
 public:
  // top: the memory of the cache units (nullptr = compute from the layer's rows); not owned.
  // source: where the rows come from (not owned, used by this MixedMlp only); nullptr = the
  // weights' neuron store in DRAM (a ResidentSource owned by the MixedMlp).
  static Result<std::unique_ptr<MixedMlp>> Create(const M2Weights* weights, const MixConfig& config,
                                                  kernels::Glu glu, TierMemory* top, ThreadPool* pool,
                                                  LayerSource* source = nullptr);

  // y[d_model] = MLP_layer(x[d_model]) for one token. x and y may not alias. Fails only when
  // the layer source's storage or the top tier's device fails.
  Status Forward(int layer, const float* x, float* y);

  const M2Stats& stats() const { return stats_; }
  void ResetStats() {
    stats_ = {};
    source_base_ = source_->stats();
  }
  const LayerSource& source() const { return *source_; }
  const MixConfig& config() const { return config_; }
  int64_t n_active(int layer, Precision p) const { return counts_[static_cast<size_t>(layer)][p]; }

 private:
  MixedMlp(const M2Weights* weights, const MixConfig& config, kernels::Glu glu, ThreadPool* pool)
      : w_(weights), config_(config), glu_(glu), pool_(pool) {}
  void Score(int layer, const LayerNeurons& ln, const float* x);
  void CountRecall(int layer, const LayerNeurons& ln, const float* x);
  Status Compute(int layer, const LayerNeurons& ln, const float* x, float* y);
  void SyncSourceStats();

  const M2Weights* w_;
  std::unique_ptr<LayerSource> own_source_;  // the ResidentSource when none was given
  LayerSource* source_ = nullptr;
  SourceStats source_base_;  // the source's counters when stats_ started
  MixConfig config_;
  kernels::Glu glu_;
  ThreadPool* pool_;
  TierMemory* top_ = nullptr;  // the cache units' memory and compute; nullptr = the store's rows
  std::vector<std::array<int64_t, kNumPrecisions>> counts_;  // n_high, n_low per layer
  std::vector<CacheUnit> units_;  // [layer * kNumPrecisions + p]; empty without cache units
  M2Stats stats_;
  // Scratch, sized for the widest layer.
  std::vector<float> score_, t_, g_, u_, h_, y2_, u_hat_;
  std::vector<int32_t> order_, list_[kNumPrecisions], slots_, true_order_;
  std::vector<uint8_t> mark_;
};

}  // namespace weir::m2cache
