#include "storage/bucket_policy.h"

#include <algorithm>

#include "base/check.h"

namespace weir::storage {

void BucketPolicy::MakeEvictable(PolicyHook* h) {
  if (h->evictable) return;
  RefreshKey(h);
  parts_[h->partition][h->key1].PushFront(h);
  h->evictable = true;
}

void BucketPolicy::MakeUnevictable(PolicyHook* h) {
  if (!h->evictable) return;
  Buckets& b = parts_[h->partition];
  auto it = b.find(h->key1);
  WEIR_CHECK(it != b.end());
  it->second.Unlink(h);
  if (it->second.empty()) b.erase(it);
  h->evictable = false;
}

PolicyHook* BucketPolicy::PickVictim(uint32_t partition, bool force) {
  const Buckets& b = parts_[partition];
  return b.empty() ? nullptr : b.begin()->second.tail;
}

size_t BucketPolicy::metadata_bytes() const {
  size_t n = 0;
  for (const Buckets& b : parts_) n += b.size();
  return n * 64;
}

void BucketPolicy::MergeAllInto(uint64_t key) {
  for (Buckets& b : parts_) {
    std::vector<PolicyHook*> all;
    for (auto& [k, list] : b) {
      for (PolicyHook* h = list.head; h != nullptr; h = h->next) all.push_back(h);
    }
    b.clear();
    std::sort(all.begin(), all.end(),
              [](const PolicyHook* x, const PolicyHook* y) { return x->key2 < y->key2; });
    HookList& merged = b[key];
    for (PolicyHook* h : all) {  // oldest first, so the most recent ends at the head
      h->key1 = key;
      merged.PushFront(h);
    }
    if (merged.empty()) b.erase(key);
  }
}

}  // namespace weir::storage
