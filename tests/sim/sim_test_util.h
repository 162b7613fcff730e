// Test helpers of the simulator's tests.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sim/mask_source.h"
#include "sim/simulator.h"

namespace weir::sim {

// Replays fixed masks, like a trace would.
class VectorSource : public MaskSource {
 public:
  VectorSource(MaskLayout layout, std::vector<TokenMasks> tokens)
      : layout_(std::move(layout)), tokens_(std::move(tokens)) {}
  const MaskLayout& layout() const override { return layout_; }
  int64_t n_tokens() const override { return static_cast<int64_t>(tokens_.size()); }
  std::string Describe() const override { return "vector"; }
  Status Rewind() override {
    next_ = 0;
    return Status::Ok();
  }
  Result<bool> Next(TokenMasks* out) override {
    if (next_ >= tokens_.size()) return false;
    *out = tokens_[next_++];
    return true;
  }

 private:
  MaskLayout layout_;
  std::vector<TokenMasks> tokens_;
  size_t next_ = 0;
};

// The mixture of experts of the expert simulator and planner tests: one layer, d_model 64,
// 4 experts of d_ff 32, 2 per token; an expert is 3 x 64 x 32 = 6144 weights, 6144 bytes at 8 bits.
inline ModelShape OneLayerMoe() {
  ModelShape s = UniformShape("moe", 64, 1, 4, 2, 16, 32, 100);
  s.n_experts = 4;
  s.n_experts_active = 2;
  return s;
}
inline constexpr double kExpertBytes = 6144;

// 10 GB/s memory, 1 GB/s storage at any read size.
inline DeviceProfile Flat() {
  DeviceProfile d;
  d.name = "flat";
  d.memory_bandwidth = 10 * kGB;
  d.storage_read = BandwidthCurve::Flat(1 * kGB);
  return d;
}

// OneLayerMoe's routing: token t chooses the experts chosen[t].
inline std::unique_ptr<VectorSource> Routing(const MaskLayout& layout,
                                             const std::vector<std::vector<uint32_t>>& chosen) {
  std::vector<TokenMasks> tokens;
  for (const auto& c : chosen) {
    TokenMasks t;
    t.masks.assign(1, UnitMask(4));
    for (uint32_t e : c) t.masks[0].Set(e);
    tokens.push_back(std::move(t));
  }
  return std::make_unique<VectorSource>(layout, std::move(tokens));
}

}  // namespace weir::sim
