// Calibration data for the threshold policies (CATS, TEAL): per layer and per statistic, a
// uniform sample of activation magnitudes collected on calibration text, from which the
// threshold for any target density is an exact quantile.
//
// Statistics per layer (the four input sites plus CATS's gate activation):
//   attn_in   |RMSNorm(x)|          input of W_q, W_k, W_v   [d_model]
//   attn_out  |attention output|    input of W_o             [q_dim]
//   mlp_in    |RMSNorm(x)|          input of W_gate, W_up    [d_model]
//   mlp_down  |silu(g) * u|         input of W_down          [d_ff]
//   gate_silu |silu(W_gate x)|      CATS's score             [d_ff]
//
// File format (JSON, written by `weir calibrate -o CALIB`, read by --calib; docs/sparsity.md):
//   {
//     "format": "weir-calibration", "version": 1,
//     "note": "free text: model and calibration text",
//     "max_samples": 4096,            // reservoir size per (layer, statistic)
//     "n_layer": 16,
//     "layers": [                     // n_layer objects, layer 0 first
//       { "attn_in":  {"width": 2048, "seen": 1048576, "samples": [0.0012, 0.0013, ...],
//                      "kept_half": [130, 4, ...]},   // optional, width entries (see below)
//         "mlp_down": {...}, ... },   // any statistic may be absent (never observed)
//       ...
//     ]
//   }
// "samples" are non-negative finite magnitudes in ascending order, at most max_samples of them and
// at most "seen" (the number of magnitudes offered to the reservoir).
// A layer of a mixture of experts also has "expert_chosen": [c_0, ..., c_{n_expert-1}] (absent
// for dense models and in files written before it): on how many tokens the router chose expert e
// in that layer. `weir pack --calib` stores each layer's experts most chosen first, which
// `--policy hot` then keeps (docs/moe.md).
// "kept_half" (input sites only; absent in files written before it): per entry i of the vector,
// on how many tokens |a_i| was among the ceil(width / 2) largest of its token: how often a top-K
// policy at density 0.5 keeps that input channel / neuron. `weir pack --calib` orders a column
// pack by it (hot channels together).
//
// Threshold rule: with N sorted samples s[0] <= ... <= s[N-1] and m = KeepCount(keep, N), the
// threshold is t = s[N - m]; a policy keeps entries with |a| >= t, which keeps exactly m of the N
// samples when they are distinct (so the achieved density on the samples is within 1/(2N) of keep).
//
// Thread safety: Calibration is an immutable value after loading. Calibrator has no
// synchronisation; feed it from one thread.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "sparsity/site.h"

namespace weir::sparsity {

enum class CalibStat : uint8_t {
  kAttnIn = 0,
  kAttnOut = 1,
  kMlpIn = 2,
  kMlpDown = 3,
  kGateSilu = 4
};
inline constexpr int kNumCalibStats = 5;
std::string_view CalibStatName(CalibStat stat);
inline CalibStat StatOf(Site site) { return static_cast<CalibStat>(site); }

struct SampleSet {
  int64_t width = 0;          // entries per activation vector; 0 when never observed
  int64_t seen = 0;           // magnitudes offered to the reservoir
  std::vector<float> sorted;  // kept magnitudes, ascending
  std::vector<uint32_t> kept_half;  // per entry: tokens on which it was in the top half (or empty)
};

struct Calibration {
  std::string note;
  int64_t max_samples = 0;
  std::vector<std::array<SampleSet, kNumCalibStats>> layers;  // [n_layer]
  // [n_layer] of [n_expert] routing counts ("expert_chosen"); all empty when not recorded.
  std::vector<std::vector<uint32_t>> expert_chosen;

  int n_layer() const { return static_cast<int>(layers.size()); }
  const SampleSet& samples(int layer, CalibStat stat) const {
    return layers[static_cast<size_t>(layer)][static_cast<size_t>(stat)];
  }
  // The threshold for keeping a fraction `keep` in (0, 1] (rule above). Errors name the layer and
  // statistic when there are no samples or the layer does not exist.
  Result<float> Threshold(int layer, CalibStat stat, double keep) const;

  std::string ToJson() const;
  // `path` only names the source in messages.
  static Result<Calibration> FromJson(std::string_view text, const std::string& path);
  Status Save(const std::string& path) const;
  static Result<Calibration> Load(const std::string& path);
};

// Collects magnitudes with one reservoir (Algorithm R, seeded, deterministic) per (layer,
// statistic), so memory stays at n_layer * 5 * max_samples floats however much text is fed.
class Calibrator {
 public:
  explicit Calibrator(int n_layer, int64_t max_samples = 4096, uint64_t seed = 1);

  // Offers |a_i| for every entry of one token's activation vector at `site` of `layer`.
  void Add(int layer, Site site, std::span<const float> activations);
  // Offers |silu(g_i)| for one token's gate pre-activations g = W_gate · xm [d_ff] (CATS).
  void AddGate(int layer, std::span<const float> gate_pre);
  // Counts one token's routing in a mixture-of-experts layer of n_expert experts: the chosen
  // expert ids (each in [0, n_expert)).
  void AddExperts(int layer, std::span<const int32_t> chosen, int n_expert);

  // The samples so far, sorted; `note` is stored in the file.
  Calibration Finish(std::string note = "") const;

 private:
  void Offer(int layer, CalibStat stat, std::span<const float> a, bool silu);
  uint64_t Next();

  int64_t max_samples_;
  uint64_t rng_;
  std::vector<int32_t> order_;  // scratch of Offer
  std::vector<std::array<SampleSet, kNumCalibStats>> layers_;  // samples unsorted here
  std::vector<std::vector<uint32_t>> expert_chosen_;          // [n_layer][n_expert]
};

}  // namespace weir::sparsity
