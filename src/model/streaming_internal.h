// Internal to the streaming files (streaming_plan.cc, streaming_blocks.cc, streaming_columns.cc):
// unit kinds, clocks and small helpers they share.
#pragma once

#include <chrono>
#include <cstdint>

namespace weir::model::streaming_internal {

using Clock = std::chrono::steady_clock;
inline double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Unit kinds (storage/unit_id.h; the layer field is the extent's slab).
inline constexpr uint32_t kBundleBlockKind = 1;
inline constexpr uint32_t kAttentionBlockKind = 2;
inline constexpr uint32_t kInputBlockKind = 3;  // column layout: the input columns
// Experts stored as channel records: the cached copies of the experts' W_down (StreamPlan::
// Group::down_copy). The largest kind.
inline constexpr uint32_t kDownCopyKind = 4;
inline constexpr uint64_t kPage = 4096;

inline uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

inline constexpr const char* kAttentionTensors[] = {"attn_q", "attn_k", "attn_v", "attn_output"};

}  // namespace weir::model::streaming_internal
