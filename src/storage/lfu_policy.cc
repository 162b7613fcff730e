#include "storage/lfu_policy.h"

namespace weir::storage {

uint64_t LfuPolicy::Count(UnitId id) const {
  auto it = counts_.find(id);
  return it == counts_.end() ? 0 : it->second;
}

void LfuPolicy::OnAccess(UnitId id, PolicyHook* resident) {
  ++clock_;
  const uint64_t c = ++counts_[id];
  if (resident != nullptr) {  // pinned, so in no bucket: keys may change
    resident->key1 = c;
    resident->key2 = clock_;
  }
}

void LfuPolicy::OnInsert(PolicyHook* h) {
  h->key1 = Count(h->id);
  h->key2 = clock_;
}

void LfuPolicy::ResetSequence() {
  counts_.clear();
  MergeAllInto(0);
}

}  // namespace weir::storage
