#include "storage/lru_policy.h"

namespace weir::storage {

void LruPolicy::MakeEvictable(PolicyHook* h) {
  if (h->evictable) return;
  lists_[h->partition].PushFront(h);
  h->evictable = true;
}

void LruPolicy::MakeUnevictable(PolicyHook* h) {
  if (!h->evictable) return;
  lists_[h->partition].Unlink(h);
  h->evictable = false;
}

}  // namespace weir::storage
