// Masks of active units, where they come from, and how they map onto tensors.
//
// A mask stream is one (layer, kind) whose units are streamed from storage: e.g. the d_ff
// neurons of a layer's MLP, one mask covering ffn_gate, ffn_up and ffn_down. A unit covers the
// same slice index in every tensor the stream names; its bytes are the sum over those tensors.
// Per token a MaskSource yields one UnitMask per stream: synthetic generators
// (synthetic_masks.h) or a recorded trace (adapted in the tool layer, which may depend on
// weir::format; this module does not).
//
// Thread safety: UnitMask and layouts are values; a MaskSource is used by one thread.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/model_shape.h"

namespace weir::sim {

// A fixed-size bitset of units (bit u set = unit u active).
class UnitMask {
 public:
  UnitMask() = default;
  explicit UnitMask(uint32_t n) { Resize(n); }
  void Resize(uint32_t n) {
    n_ = n;
    words_.assign((n + 63) / 64, 0);
  }
  uint32_t size() const { return n_; }
  void Clear() { std::fill(words_.begin(), words_.end(), 0); }
  void SetAll() {
    std::fill(words_.begin(), words_.end(), ~0ull);
    if (n_ % 64) words_.back() = (1ull << (n_ % 64)) - 1;
  }
  void Set(uint32_t u) { words_[u / 64] |= 1ull << (u % 64); }
  void Reset(uint32_t u) { words_[u / 64] &= ~(1ull << (u % 64)); }
  bool Test(uint32_t u) const { return (words_[u / 64] >> (u % 64)) & 1; }
  uint32_t Count() const {
    uint32_t c = 0;
    for (uint64_t w : words_) c += static_cast<uint32_t>(std::popcount(w));
    return c;
  }
  // Appends the set bits in ascending order.
  void AppendActive(std::vector<uint32_t>* out) const {
    for (size_t i = 0; i < words_.size(); ++i) {
      for (uint64_t w = words_[i]; w; w &= w - 1) {
        out->push_back(static_cast<uint32_t>(i * 64 + std::countr_zero(w)));
      }
    }
  }
  std::vector<uint64_t>& words() { return words_; }
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  uint32_t n_ = 0;
  std::vector<uint64_t> words_;
};

// The trace kind (and stream name) whose units are whole experts of a MoE layer: unit e is
// expert e's gate, up and down, read as one record (weir pack's experts layout). The same name
// as model::kExpertsKind; this module does not depend on the engine.
inline constexpr char kExpertUnitsKind[] = "ffn_experts";

struct MaskStream {
  int layer = 0;
  std::string name;                        // "ffn_gate+ffn_up+ffn_down"
  std::vector<TensorKind> tensors;         // the tensors the mask applies to
  std::vector<uint64_t> weights_per_unit;  // [tensors.size()]: weights of one unit per tensor
  uint32_t n_units = 0;
  int n_experts = 1;         // units form n_experts equal expert-major blocks
  int n_experts_active = 1;  // blocks a router enables per token (synthetic sources)
  // A unit's slices of all its tensors lie back to back (an expert record): a run of consecutive
  // missed units is one read, not one per tensor.
  bool unit_records = false;

  uint64_t UnitWeights() const {
    uint64_t s = 0;
    for (uint64_t w : weights_per_unit) s += w;
    return s;
  }
};

struct MaskLayout {
  int n_layers = 0;
  std::vector<MaskStream> streams;  // ordered by layer
};

// Which tensors a synthetic layout streams: the MLP (DIP's setting; units are the d_ff
// neurons shared by gate, up and down), or the MLP plus attention with input-channel units
// (ActiveFlow's setting: q/k/v share the d_model input mask, attn_output has its own), or a MoE
// model's experts as whole units (kExpertUnitsKind, n_experts units per layer).
enum class StreamSet { kMlp, kAll, kExperts };
Result<StreamSet> ParseStreamSet(const std::string& text);  // "mlp" | "all" | "experts"

Result<MaskLayout> MakeMaskLayout(const ModelShape& shape, StreamSet set);

// Builds the stream of `layer` for a mask named `kind_name` ('+'-joined tensor kinds) with
// `n_units` units, deriving weights per unit from the shape (each tensor's parameters must
// divide evenly by n_units). `weights_per_unit_hint`, when non-zero, must equal the sum. Used to
// turn a trace header into a layout. The kind kExpertUnitsKind needs a MoE shape and n_units ==
// shape.n_experts; its tensors are ffn_gate, ffn_up and ffn_down, one expert's slice each, read
// as one record; the hint is not checked for it, because an expert's size comes from the shape
// (a routing trace of a small model replays with a larger model's experts).
Result<MaskStream> MakeMaskStream(const ModelShape& shape, int layer, const std::string& kind_name,
                                  uint32_t n_units, uint64_t weights_per_unit_hint);

// Cache counters a recorded run observed for one stream and token (trace replay cross-check).
struct RecordedEvents {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t bytes_read = 0;
};

struct TokenMasks {
  std::vector<UnitMask> masks;         // [layout.streams.size()]
  std::vector<RecordedEvents> events;  // empty, or [layout.streams.size()]
};

class MaskSource {
 public:
  virtual ~MaskSource() = default;
  virtual const MaskLayout& layout() const = 0;
  virtual int64_t n_tokens() const = 0;
  // "dense", "zipf:d=0.3,s=1,r=0.5,seed=1", "trace:run.wtrace".
  virtual std::string Describe() const = 0;
  // Back to the first token; the same tokens follow again.
  virtual Status Rewind() = 0;
  // Fills out->masks (sized to the layout) for the next token; false after the last.
  virtual Result<bool> Next(TokenMasks* out) = 0;
};

}  // namespace weir::sim
