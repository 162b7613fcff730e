#include "storage/belady_policy.h"

#include <algorithm>

namespace weir::storage {

BeladyPolicy::BeladyPolicy(std::vector<UnitId> trace) : trace_(std::move(trace)) {
  for (uint64_t i = 0; i < trace_.size(); ++i) positions_[trace_[i]].push_back(i);
}

uint64_t BeladyPolicy::NextUse(UnitId id, uint64_t from) const {
  auto it = positions_.find(id);
  if (it == positions_.end()) return kNever;
  const std::vector<uint64_t>& pos = it->second;
  auto p = std::lower_bound(pos.begin(), pos.end(), from);
  return p == pos.end() ? kNever : *p;
}

void BeladyPolicy::SetKeys(PolicyHook* h) const {
  // Smallest key = evicted first = farthest next use.
  h->key1 = kNever - NextUse(h->id, now_);
  h->key2 = 0;
}

void BeladyPolicy::OnAccess(UnitId id, PolicyHook* resident) {
  if (now_ >= trace_.size() || trace_[now_] != id) ++mismatches_;
  ++now_;
  if (resident != nullptr) SetKeys(resident);
}

void BeladyPolicy::OnInsert(PolicyHook* h) { SetKeys(h); }

size_t BeladyPolicy::metadata_bytes() const {
  // The trace, one position per access, and a hash node + vector header per distinct unit.
  return trace_.capacity() * sizeof(UnitId) + trace_.size() * sizeof(uint64_t) +
         positions_.size() * 64 + positions_.bucket_count() * 8;
}

}  // namespace weir::storage
