// Two policies that think in tokens rather than in single accesses. Both stamp each unit with
// the token of its last use (WeightCache::BeginToken() advances the token) and order evictable
// units by last token, then by recency (release order) within a token.
//
// WindowPolicy (LLM in a flash, Alizadeh et al. 2023, as summarized by M2Cache §5.3): keep only
// the units used by the last k tokens. At each token boundary every evictable unit whose last
// use is older than the last k tokens is dropped (freeing its memory); under pressure inside a
// token the least recently used goes first.
//
// AtuPolicy (M2Cache §5.3, "Adjacent Token Update"): the per-layer cache holds the active units
// of the previous token, and for a new token only the units that differ are loaded, each
// replacing a unit of the previous token that the new token does not use. Hence a miss may
// evict only a unit not used by the current token (oldest first); when every resident unit of
// the partition belongs to the current token the insertion is refused (the caller reads into a
// transient buffer). Nothing is dropped eagerly: with the partition sized to one token's active
// set (M2Cache's capacity n*m per layer) the cache after each token is exactly that token's
// active set; with a larger budget stale units linger until their space is needed.
//
// Thread safety: none; driven under the WeightCache mutex.
#pragma once

#include "storage/bucket_policy.h"

namespace weir::storage {

class TokenStampedPolicy : public BucketPolicy {
 public:
  void OnAccess(UnitId id, PolicyHook* resident) override;
  void OnInsert(PolicyHook* hook) override;
  void BeginToken(std::vector<PolicyHook*>* expired) override { ++token_; }

 protected:
  uint64_t token_ = 0;
  uint64_t clock_ = 0;
};

class WindowPolicy : public TokenStampedPolicy {
 public:
  explicit WindowPolicy(uint32_t window_tokens) : window_tokens_(window_tokens) {}
  std::string_view name() const override { return "window"; }
  void BeginToken(std::vector<PolicyHook*>* expired) override;

 private:
  uint32_t window_tokens_;
};

class AtuPolicy : public TokenStampedPolicy {
 public:
  std::string_view name() const override { return "atu"; }
  PolicyHook* PickVictim(uint32_t partition, bool force) override;
};

}  // namespace weir::storage
