// HotPrefixPolicy ("hot"): a static priority by position. Within each cached extent a unit's
// rank is its index (UnitIndex); the lower, the hotter. A unit is admitted only into free room or
// in place of a colder one, and the coldest resident unit is the victim. So each partition fills
// with the leading units of its extents that have been used and keeps them.
//
// Why: a column pack written with an activation order (`weir pack --layout columns --calib`)
// stores each layer group's input channels and neurons hottest first, by how often calibration
// text kept them. The leading blocks are then the columns DIP keeps most often: a hot set pinned
// from calibration (PowerInfer-2's hot region), which DIP-CA's cache-aware masking then prefers.
// On a pack without an order the prefix is just the first channels, and the policy is a static
// pin of whatever comes first, as MRU is.
//
// Thread safety: none; driven under the WeightCache mutex.
#pragma once

#include "storage/ordered_policy.h"

namespace weir::storage {

class HotPrefixPolicy : public OrderedPolicy {
 public:
  std::string_view name() const override { return "hot"; }
  void OnAccess(UnitId id, PolicyHook* resident) override { (void)id, (void)resident; }
  void OnInsert(PolicyHook* hook) override;
  bool Admit(const PolicyHook& incoming, const PolicyHook& victim) const override;
};

}  // namespace weir::storage
