// LruPolicy: least recently used, or with most_recent = true MRU, most recently used ("mru"):
// the victim is the unit released last. MRU is the optimal rule (Belady's choice) for a cyclic
// scan larger than the cache -- dense streaming reads every layer in the same order each token,
// which makes LRU evict exactly the unit needed soonest; MRU keeps a stable resident set and
// streams the rest through the space of the units just used.
//
// LRU: Each partition keeps its evictable units in an intrusive list
// (hook_list.h), so every operation is O(1) and allocates nothing. A unit joins the most-recent
// end when its last pin is released, so recency is release order, which equals access order
// when handles are dropped in the order they were taken (the compute path's case).
//
// Thread safety: none; driven under the WeightCache mutex.
#pragma once

#include <vector>

#include "storage/eviction_policy.h"
#include "storage/hook_list.h"

namespace weir::storage {

class LruPolicy : public EvictionPolicy {
 public:
  explicit LruPolicy(bool most_recent = false) : most_recent_(most_recent) {}
  std::string_view name() const override { return most_recent_ ? "mru" : "lru"; }
  void Init(uint32_t n_partitions) override { lists_.assign(n_partitions, HookList{}); }
  void OnAccess(UnitId id, PolicyHook* resident) override {}
  void OnInsert(PolicyHook* hook) override {}
  void MakeEvictable(PolicyHook* hook) override;
  void MakeUnevictable(PolicyHook* hook) override;
  void OnRemove(PolicyHook* hook) override { MakeUnevictable(hook); }
  PolicyHook* PickVictim(uint32_t partition, bool force) override {
    return most_recent_ ? lists_[partition].head : lists_[partition].tail;
  }
  bool Admit(const PolicyHook& incoming, const PolicyHook& victim) const override {
    return !most_recent_;
  }
  size_t per_entry_bytes() const override { return 0; }

 private:
  bool most_recent_;
  std::vector<HookList> lists_;
};

}  // namespace weir::storage
