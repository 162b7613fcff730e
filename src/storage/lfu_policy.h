// LfuPolicy: contextual least-frequently-used, as in DIP (§5.1) and ActiveFlow (§4.2): a count
// of accesses is kept for every unit touched in the current sequence, resident or not (so a
// unit that was evicted comes back with its history), and the resident unit with the smallest
// count is evicted, the least recently used among equals. ResetSequence() forgets all counts.
//
// Thread safety: none; driven under the WeightCache mutex.
#pragma once

#include <unordered_map>

#include "storage/bucket_policy.h"

namespace weir::storage {

class LfuPolicy : public BucketPolicy {
 public:
  std::string_view name() const override { return "lfu"; }
  void OnAccess(UnitId id, PolicyHook* resident) override;
  void OnInsert(PolicyHook* hook) override;
  void ResetSequence() override;
  // The counts: one hash node (key, count, next) in a 32-byte chunk plus a bucket pointer per
  // counted unit, and the buckets.
  size_t metadata_bytes() const override {
    return counts_.size() * 40 + counts_.bucket_count() * 8 + BucketPolicy::metadata_bytes();
  }

 private:
  uint64_t Count(UnitId id) const;
  void RefreshKey(PolicyHook* hook) override { hook->key1 = Count(hook->id); }

  std::unordered_map<UnitId, uint64_t> counts_;
  uint64_t clock_ = 0;  // access counter, for recency among equal counts
};

}  // namespace weir::storage
