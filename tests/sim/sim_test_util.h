// Test helpers of the simulator's tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/mask_source.h"

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

}  // namespace weir::sim
