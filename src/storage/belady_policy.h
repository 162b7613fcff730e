// BeladyPolicy: the offline optimum (Belady's MIN) for replaying a recorded access trace: on
// eviction, the resident unit whose next use lies farthest in the future (or never comes)
// leaves. It is optimal for hits when all units have the same size and every miss is inserted;
// with variable sizes it is the classic heuristic, not a proven optimum. Time advances by one
// per access (WeightCache::Lookup/Acquire); accesses that do not match the trace are counted in
// mismatches() and the oracle keeps going with the trace's positions (it can then be wrong).
//
// Thread safety: none; driven under the WeightCache mutex.
#pragma once

#include <limits>
#include <unordered_map>
#include <vector>

#include "storage/ordered_policy.h"

namespace weir::storage {

class BeladyPolicy : public OrderedPolicy {
 public:
  explicit BeladyPolicy(std::vector<UnitId> trace);

  std::string_view name() const override { return "belady"; }
  void OnAccess(UnitId id, PolicyHook* resident) override;
  void OnInsert(PolicyHook* hook) override;
  size_t metadata_bytes() const override;

  uint64_t mismatches() const { return mismatches_; }

 private:
  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  // First trace position >= `from` where `id` is used, or kNever.
  uint64_t NextUse(UnitId id, uint64_t from) const;
  void SetKeys(PolicyHook* h) const;

  std::vector<UnitId> trace_;
  std::unordered_map<UnitId, std::vector<uint64_t>> positions_;  // sorted, per unit
  uint64_t now_ = 0;  // accesses so far = position of the next access
  uint64_t mismatches_ = 0;
};

}  // namespace weir::storage
