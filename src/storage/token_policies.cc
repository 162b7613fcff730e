#include "storage/token_policies.h"

namespace weir::storage {

void TokenStampedPolicy::OnAccess(UnitId id, PolicyHook* resident) {
  ++clock_;
  if (resident != nullptr) {
    resident->key1 = token_;
    resident->key2 = clock_;
  }
}

void TokenStampedPolicy::OnInsert(PolicyHook* h) {
  h->key1 = token_;
  h->key2 = ++clock_;
}

void WindowPolicy::BeginToken(std::vector<PolicyHook*>* expired) {
  ++token_;
  // Keep units used in tokens token_-k .. token_-1; older ones expire.
  for (const Buckets& b : parts_) {
    for (const auto& [token, list] : b) {
      if (token + window_tokens_ >= token_) break;
      for (PolicyHook* h = list.tail; h != nullptr; h = h->prev) expired->push_back(h);
    }
  }
}

PolicyHook* AtuPolicy::PickVictim(uint32_t partition, bool force) {
  PolicyHook* v = BucketPolicy::PickVictim(partition, force);
  if (v != nullptr && !force && v->key1 >= token_) return nullptr;  // all of this token
  return v;
}

}  // namespace weir::storage
