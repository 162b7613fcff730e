// UnitMap: the cache's hash map from UnitId to an entry pointer. Open addressing with linear
// probing and backward-shift deletion (no tombstones), so a lookup usually touches one cache line
// and the table never fills with dead slots. The load stays at most 1/2 (the table doubles past
// that); Compact() halves it while the load is under 1/8, so the table holds at most 8 slots per
// entry after a compaction and between 2 and 4 while entries come and go one for one.
//
// Thread safety: none; the owning WeightCache serializes every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "storage/unit_id.h"

namespace weir::storage {

template <typename T>
class UnitMap {
 public:
  struct Slot {
    UnitId key = 0;
    T* value = nullptr;  // nullptr: empty slot
  };

  UnitMap() : slots_(kMinSlots) {}

  size_t size() const { return size_; }
  size_t slot_count() const { return slots_.size(); }
  size_t bytes() const { return slots_.size() * sizeof(Slot); }

  T* Find(UnitId key) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = Hash(key) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.value == nullptr) return nullptr;
      if (s.key == key) return s.value;
    }
  }

  // `key` must be absent and `value` non-null.
  void Insert(UnitId key, T* value) {
    WEIR_CHECK(value != nullptr);
    if ((size_ + 1) * 2 > slots_.size()) Rehash(slots_.size() * 2);
    Place(key, value);
    ++size_;
  }

  // Returns the removed value, or nullptr when absent.
  T* Erase(UnitId key) {
    const size_t mask = slots_.size() - 1;
    size_t i = Hash(key) & mask;
    for (;; i = (i + 1) & mask) {
      if (slots_[i].value == nullptr) return nullptr;
      if (slots_[i].key == key) break;
    }
    T* removed = slots_[i].value;
    // Backward shift: pull later members of the probe run into the hole when their home slot
    // does not lie (cyclically) between the hole and their position.
    size_t hole = i;
    for (size_t j = (i + 1) & mask; slots_[j].value != nullptr; j = (j + 1) & mask) {
      const size_t home = Hash(slots_[j].key) & mask;
      const bool stays = (hole <= j) ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    return removed;
  }

  // Shrinks the table while it is more than 7/8 empty.
  void Compact() {
    size_t n = slots_.size();
    while (n > kMinSlots && size_ * 8 < n) n /= 2;
    if (n != slots_.size()) Rehash(n);
  }

  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const Slot& s : slots_) {
      if (s.value != nullptr) fn(s.key, s.value);
    }
  }

 private:
  static constexpr size_t kMinSlots = 64;

  // A full 64-bit mix (murmur3's finalizer): unit ids are structured, so their low bits alone
  // would cluster.
  static uint64_t Hash(UnitId k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
  }

  void Place(UnitId key, T* value) {
    const size_t mask = slots_.size() - 1;
    size_t i = Hash(key) & mask;
    while (slots_[i].value != nullptr) i = (i + 1) & mask;
    slots_[i] = Slot{key, value};
  }

  void Rehash(size_t n) {
    std::vector<Slot> old(n);
    old.swap(slots_);
    for (const Slot& s : old) {
      if (s.value != nullptr) Place(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace weir::storage
