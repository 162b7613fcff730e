// The flash -> DRAM -> compute simulator of DIP appendix A, generalized to traces, policies and
// a three-tier hierarchy:
//
// Memory plan: static tensors (everything not streamed: attention when only the MLP streams,
// embeddings, output head, norms, router, and the KV cache at kv_len tokens) are placed in
// memory first; the rest of the budget is the weight cache, split across mask streams in
// proportion to their dense bytes (uniform across equal layers, as in DIP).
//
// Per token, per stream: bytes from storage = active ∧ ¬cached, bytes from memory = active ∧
// cached. Misses are read as requests of consecutive missed units (one per run and tensor),
// each costing size / storage_read.At(size). With a host tier, memory misses are looked up in
// a host cache (LRU, like a page cache; it starts holding each stream's first units up to its
// capacity, as a host that loaded the model before decoding) and cross the link; host misses
// come from storage and cross the link too.
//
// Per stage (one layer of one token): memory time = (static bytes of the layer + its KV read +
// hit bytes) / memory bandwidth; compute time = FLOPs / rate (optional); storage and link time
// as above. Stage time = max(max(memory, compute), storage, link) with concurrent I/O, else
// max(memory, compute) + storage + link. A final stage reads the output head, the final norm
// and one embedding row. Token time = sum of stages. Tokens before warmup_tokens are simulated
// but not counted.
//
// Thread safety: Simulate is a pure function of its inputs (it reads the source).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/device_profile.h"
#include "sim/mask_source.h"
#include "sim/model_shape.h"
#include "sim/unit_cache.h"

namespace weir::sim {

struct SimConfig {
  double memory_bytes = 0;  // memory for the model (static + cache); 0 = the profile's capacity
  double host_bytes = -1;   // host-tier capacity for cached weights; < 0 = the profile's
  WeightBits bits = WeightBits::Uniform(4);
  double kv_bits = 16;    // per K or V element
  int64_t kv_len = 1024;  // context tokens held (and read) per token: the average length
  CachePolicy policy = CachePolicy::kLfu;
  int concurrent_io = -1;     // -1: the profile's flag; 0 / 1 override
  bool model_compute = true;  // use the profile's FLOP rate when it has one
  int64_t warmup_tokens = 0;
  uint64_t belady_memory_limit = 1ull << 30;  // occurrence bitsets; larger runs go by layer groups
};

struct MemoryPlan {
  double memory_bytes = 0;      // the budget used
  double attention_bytes = 0;   // static (non-streamed) attention weights
  double mlp_static_bytes = 0;  // non-streamed MLP weights
  double router_bytes = 0;
  double norm_bytes = 0;
  double embedding_bytes = 0;  // token_embd table
  double output_bytes = 0;     // output head (0 when tied)
  double kv_bytes = 0;
  double static_bytes = 0;    // sum of the above
  double streamed_bytes = 0;  // all streamed tensors, dense
  double cache_bytes = 0;     // memory - static, at most streamed_bytes
  double host_cache_bytes = 0;
  std::vector<double> unit_bytes;     // [streams]
  std::vector<uint32_t> cache_units;  // [streams]
  std::vector<uint32_t> host_units;   // [streams]
};

// Errors (InvalidArgument) when the budget cannot hold the static tensors, naming both sizes.
Result<MemoryPlan> PlanMemory(const ModelShape& shape, const MaskLayout& layout,
                              const DeviceProfile& device, const SimConfig& config);

// Counters summed over the measured tokens.
struct LayerStats {
  int layer = 0;
  uint64_t units = 0;   // streamed units (per token)
  uint64_t active = 0;  // active unit-token pairs
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t host_hits = 0;
  uint64_t storage_requests = 0;
  double storage_bytes = 0;
  double memory_bytes = 0;  // static reads + hits
  double link_bytes = 0;
  double flops = 0;
  double storage_s = 0, memory_s = 0, compute_s = 0, link_s = 0, stage_s = 0;
  // From the trace, when it carries cache events.
  RecordedEvents recorded;
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0; }
};

struct SimResult {
  std::string model, device, policy, masks;
  MemoryPlan plan;
  bool concurrent_io = false;
  bool compute_modeled = false;
  int64_t tokens_simulated = 0;
  int64_t tokens_measured = 0;
  // Per measured token:
  double seconds_per_token = 0;
  double tokens_per_second = 0;
  double storage_bytes_per_token = 0;
  double memory_bytes_per_token = 0;
  double link_bytes_per_token = 0;
  double flops_per_token = 0;
  double storage_s = 0, memory_s = 0, compute_s = 0, link_s = 0;  // sums of stage components
  double head_s = 0;                                              // the output-head stage
  double density = 0;                                             // active / streamed units
  double hit_rate = 0;                                            // hits / active over all streams
  uint64_t storage_requests_per_token = 0;
  bool has_recorded = false;
  RecordedEvents recorded;  // totals from the trace
  std::vector<LayerStats> layers;
};

Result<SimResult> Simulate(const ModelShape& shape, const DeviceProfile& device,
                           const SimConfig& config, MaskSource* source);

}  // namespace weir::sim
