#include "storage/hot_prefix_policy.h"

namespace weir::storage {

// The victim is the smallest key: the highest index goes first.
void HotPrefixPolicy::OnInsert(PolicyHook* hook) {
  hook->key1 = read_ahead(*hook) ? 0 : kUnitIndexLimit - 1 - UnitIndex(hook->id);
  hook->key2 = 0;
}

// In the read-ahead partition, the unit released last has the smallest key.
void HotPrefixPolicy::MakeEvictable(PolicyHook* hook) {
  if (!hook->evictable && read_ahead(*hook)) hook->key2 = UINT64_MAX - ++releases_;
  OrderedPolicy::MakeEvictable(hook);
}

bool HotPrefixPolicy::Admit(const PolicyHook& incoming, const PolicyHook& victim) const {
  return UnitIndex(incoming.id) < UnitIndex(victim.id);
}

}  // namespace weir::storage
