// OrderedPolicy: a base for policies whose eviction order is an arbitrary key per unit (Belady:
// the next use). Each partition keeps its evictable units in a set ordered by (key1, key2, id);
// the victim is the smallest. Keys are only changed while a unit is out of the set (pinned) or
// by taking it out and putting it back, so the order is always consistent. O(log n) per
// operation, one set node per evictable unit.
//
// Thread safety: none; driven under the WeightCache mutex.
#pragma once

#include <set>
#include <vector>

#include "storage/eviction_policy.h"

namespace weir::storage {

class OrderedPolicy : public EvictionPolicy {
 public:
  void Init(uint32_t n_partitions) override { sets_.assign(n_partitions, {}); }
  void MakeEvictable(PolicyHook* hook) override;
  void MakeUnevictable(PolicyHook* hook) override;
  void OnRemove(PolicyHook* hook) override { MakeUnevictable(hook); }
  PolicyHook* PickVictim(uint32_t partition, bool force) override;
  // One std::set node per evictable unit: 32 bytes of tree links + the pointer, in a 48-byte
  // malloc chunk.
  size_t per_entry_bytes() const override { return 48; }

 protected:
  struct KeyLess {
    bool operator()(const PolicyHook* a, const PolicyHook* b) const {
      if (a->key1 != b->key1) return a->key1 < b->key1;
      if (a->key2 != b->key2) return a->key2 < b->key2;
      return a->id < b->id;
    }
  };
  using OrderedSet = std::set<PolicyHook*, KeyLess>;

  std::vector<OrderedSet> sets_;
};

}  // namespace weir::storage
