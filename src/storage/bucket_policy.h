// BucketPolicy: the shared base of the policies that evict by a small integer key first and by
// recency second (LFU: the access count; window/ATU: the token of the last use). Each partition
// keeps its evictable units in buckets, one per key value (an ordered map of intrusive lists);
// within a bucket the most recently released unit is at the head. The victim is the tail of the
// lowest bucket. A key has few distinct values at a time, so every operation costs a short map
// search on a small, hot map plus O(1) list work, and allocates only when a new key value
// appears.
//
// Thread safety: none; driven under the WeightCache mutex.
#pragma once

#include <map>
#include <vector>

#include "storage/eviction_policy.h"
#include "storage/hook_list.h"

namespace weir::storage {

class BucketPolicy : public EvictionPolicy {
 public:
  void Init(uint32_t n_partitions) override { parts_.assign(n_partitions, {}); }
  void MakeEvictable(PolicyHook* hook) override;
  void MakeUnevictable(PolicyHook* hook) override;
  void OnRemove(PolicyHook* hook) override { MakeUnevictable(hook); }
  PolicyHook* PickVictim(uint32_t partition, bool force) override;
  size_t per_entry_bytes() const override { return 0; }
  // One map node (about 64 bytes with its allocator header) per live bucket.
  size_t metadata_bytes() const override;

 protected:
  using Buckets = std::map<uint64_t, HookList>;  // key1 -> evictable units with that key

  // Called as a unit becomes evictable, to bring key1 up to date.
  virtual void RefreshKey(PolicyHook* hook) {}
  // Puts every evictable unit of every partition into bucket `key`, most recent (largest key2)
  // at the head.
  void MergeAllInto(uint64_t key);

  std::vector<Buckets> parts_;
};

}  // namespace weir::storage
