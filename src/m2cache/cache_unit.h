// CacheUnit: one layer's isolated cache unit at one precision (M2Cache §5.3, Fig. 7): a
// contiguous buffer of `capacity` neuron slots in the top tier's memory, three [capacity,
// d_model] matrices (gate rows, up rows, down columns) in the store's type for that precision,
// updated per token by ATU (slot_map.h) from the layer's rows in DRAM (a LayerSource's, acquired
// for the token: layer_source.h). The kernels compute straight from the slots (rows()), so
// nothing is copied again before the product.
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
  // like: rows of the shape and type the unit will be fed from (one layer at one precision);
  // only their shape and type are used (the data may be null).
  static Result<CacheUnit> Create(const NeuronRows& like, int64_t capacity, TierMemory* memory);

  // Makes `wanted` resident (slots[k] holds wanted[k]), queuing the copies from `src` (the
  // layer's rows at this unit's precision, of the shape given to Create) of the neurons that were
  // not (adjacent runs coalesced into one copy). `src` must stay valid until the tier's next
  // Flush or Compute. Returns the neurons that were resident; *bytes_in += the bytes copied.
  int64_t Update(const NeuronRows& src, std::span<const int32_t> wanted, int32_t* slots, uint64_t* bytes_in);

  // Views over the unit's memory ([capacity, d_model]); host-readable only for the dram tier.
  const NeuronRows& rows() const { return rows_; }
  int64_t capacity() const { return map_.capacity(); }
  const SlotMap& map() const { return map_; }

 private:
  CacheUnit(const NeuronRows& like, int64_t capacity, TierMemory* memory)
      : map_(like.gate.rows(), capacity), memory_(memory) {}
  NeuronRows rows_;
  SlotMap map_;
  TierMemory* memory_;
  std::vector<SlotLoad> loads_;
};

}  // namespace weir::m2cache
