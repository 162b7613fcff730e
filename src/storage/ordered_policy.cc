#include "storage/ordered_policy.h"

namespace weir::storage {

void OrderedPolicy::MakeEvictable(PolicyHook* h) {
  if (h->evictable) return;
  sets_[h->partition].insert(h);
  h->evictable = true;
}

void OrderedPolicy::MakeUnevictable(PolicyHook* h) {
  if (!h->evictable) return;
  sets_[h->partition].erase(h);
  h->evictable = false;
}

PolicyHook* OrderedPolicy::PickVictim(uint32_t partition, bool force) {
  const OrderedSet& s = sets_[partition];
  return s.empty() ? nullptr : *s.begin();
}

}  // namespace weir::storage
