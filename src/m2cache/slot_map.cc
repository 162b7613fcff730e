#include "m2cache/slot_map.h"

#include <algorithm>

#include "base/check.h"

namespace weir::m2cache {

SlotMap::SlotMap(int64_t n_neurons, int64_t capacity)
    : slot_of_neuron_(static_cast<size_t>(n_neurons), -1),
      neuron_of_slot_(static_cast<size_t>(capacity), -1),
      wanted_stamp_(static_cast<size_t>(n_neurons), 0) {
  free_.reserve(static_cast<size_t>(capacity));
}

void SlotMap::Clear() {
  std::fill(slot_of_neuron_.begin(), slot_of_neuron_.end(), -1);
  std::fill(neuron_of_slot_.begin(), neuron_of_slot_.end(), -1);
}

int64_t SlotMap::Update(std::span<const int32_t> wanted, int32_t* slots, std::vector<SlotLoad>* loads) {
  WEIR_CHECK(static_cast<int64_t>(wanted.size()) <= capacity());
  loads->clear();
  if (++stamp_ == 0) {  // the stamp wrapped: start the marks afresh
    std::fill(wanted_stamp_.begin(), wanted_stamp_.end(), 0);
    stamp_ = 1;
  }
  for (int32_t n : wanted) {
    WEIR_CHECK(n >= 0 && static_cast<size_t>(n) < slot_of_neuron_.size());
    WEIR_CHECK(wanted_stamp_[static_cast<size_t>(n)] != stamp_);  // distinct
    wanted_stamp_[static_cast<size_t>(n)] = stamp_;
  }
  // Slots whose neuron this token does not need (or empty ones) are free, lowest first.
  free_.clear();
  for (size_t s = 0; s < neuron_of_slot_.size(); ++s) {
    const int32_t n = neuron_of_slot_[s];
    if (n < 0 || wanted_stamp_[static_cast<size_t>(n)] != stamp_) free_.push_back(static_cast<int32_t>(s));
  }
  int64_t hits = 0;
  size_t next_free = 0;
  for (size_t k = 0; k < wanted.size(); ++k) {
    const int32_t n = wanted[k];
    int32_t s = slot_of_neuron_[static_cast<size_t>(n)];
    if (s >= 0) {
      ++hits;
    } else {
      s = free_[next_free++];
      const int32_t old = neuron_of_slot_[static_cast<size_t>(s)];
      if (old >= 0) slot_of_neuron_[static_cast<size_t>(old)] = -1;
      neuron_of_slot_[static_cast<size_t>(s)] = n;
      slot_of_neuron_[static_cast<size_t>(n)] = s;
      loads->push_back({n, s});
    }
    slots[k] = s;
  }
  return hits;
}

}  // namespace weir::m2cache
