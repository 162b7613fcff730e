#include "storage/hot_prefix_policy.h"

namespace weir::storage {

// The victim is the smallest key: the highest index goes first.
void HotPrefixPolicy::OnInsert(PolicyHook* hook) {
  hook->key1 = kUnitIndexLimit - 1 - UnitIndex(hook->id);
  hook->key2 = 0;
}

bool HotPrefixPolicy::Admit(const PolicyHook& incoming, const PolicyHook& victim) const {
  return UnitIndex(incoming.id) < UnitIndex(victim.id);
}

}  // namespace weir::storage
