// CacheUnit: one layer's isolated cache unit at one precision (M2Cache §5.3, Fig. 7): a
// contiguous buffer of `capacity` neuron slots in the top tier's memory, three [capacity,
// d_model] matrices (gate rows, up rows, down columns) in the store's type for that precision,
// updated per token by ATU (slot_map.h) from the neuron store in DRAM. The kernels compute
// straight from the slots (rows()), so nothing is copied again before the product.
//
// Thread safety: one user thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "m2cache/neuron_store.h"
#include "m2cache/slot_map.h"
#include "m2cache/tier_memory.h"

namespace weir::m2cache {

class CacheUnit {
 public:
  // src: the store's rows of one layer at one precision.
  static Result<CacheUnit> Create(const NeuronRows& src, int64_t capacity, TierMemory* memory);

  // Makes `wanted` resident (slots[k] holds wanted[k]), queuing the copies of the neurons that
  // were not (adjacent runs coalesced into one copy). Returns the neurons that were resident;
  // *bytes_in += the bytes copied into the unit.
  int64_t Update(std::span<const int32_t> wanted, int32_t* slots, uint64_t* bytes_in);

  // Views over the unit's memory ([capacity, d_model]); host-readable only for the dram tier.
  const NeuronRows& rows() const { return rows_; }
  int64_t capacity() const { return map_.capacity(); }
  const SlotMap& map() const { return map_; }

 private:
  CacheUnit(const NeuronRows& src, int64_t capacity, TierMemory* memory)
      : src_(src), map_(src.gate.rows(), capacity), memory_(memory) {}
  NeuronRows src_;
  NeuronRows rows_;
  SlotMap map_;
  TierMemory* memory_;
  std::vector<SlotLoad> loads_;
};

}  // namespace weir::m2cache
