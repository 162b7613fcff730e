// SlotMap: the bookkeeping of one cache unit (M2Cache §5.3, Fig. 7): a layer's neurons at one
// precision live in `capacity` slots of a contiguous buffer (on the GPU, or in DRAM on the CPU
// engine), and each token the unit is updated by Adjacent Token Update (ATU): a neuron the token
// needs that is already in a slot stays there; the others are loaded into the slots of neurons
// the token does not need. Nothing is kept beyond one token (no LRU history): what is resident is
// exactly the previous token's set, so the loads are the neurons that changed between adjacent
// tokens, and the buffer is always the working set itself, ready for the kernels.
//
// SlotMap only assigns slots; a unit's memory (tier_memory.h) executes the loads.
//
// Thread safety: one writer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace weir::m2cache {

struct SlotLoad {
  int32_t neuron;
  int32_t slot;
};

class SlotMap {
 public:
  SlotMap(int64_t n_neurons, int64_t capacity);

  // Gives every neuron of `wanted` (distinct, < n_neurons, at most capacity of them) a slot:
  // slots[k] holds wanted[k]. `loads` (cleared first) lists the neurons that were not resident
  // and the slot each is to be copied into. Returns the number of neurons that were resident.
  int64_t Update(std::span<const int32_t> wanted, int32_t* slots, std::vector<SlotLoad>* loads);

  int64_t capacity() const { return static_cast<int64_t>(neuron_of_slot_.size()); }
  int64_t n_neurons() const { return static_cast<int64_t>(slot_of_neuron_.size()); }
  // The neuron in a slot, or -1.
  int32_t neuron_in(int32_t slot) const { return neuron_of_slot_[static_cast<size_t>(slot)]; }
  // Forgets every resident neuron (the next update loads all).
  void Clear();

 private:
  std::vector<int32_t> slot_of_neuron_;  // -1 = not resident
  std::vector<int32_t> neuron_of_slot_;  // -1 = free
  std::vector<uint32_t> wanted_stamp_;   // == stamp_ for neurons of the current update
  std::vector<int32_t> free_;            // scratch
  uint32_t stamp_ = 0;
};

}  // namespace weir::m2cache
