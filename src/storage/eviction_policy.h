// EvictionPolicy: decides which cached unit leaves the DRAM weight cache when room is needed.
// One interface, seven policies chosen by name (`--policy NAME`, MakeEvictionPolicy):
//   lru     least recently used
//   lfu     least frequently used in the current sequence (contextual LFU of DIP / ActiveFlow:
//           counts are kept for every unit touched, resident or not, and reset by
//           ResetSequence()); ties go to the least recently used
//   belady  offline oracle: evicts the unit whose next use in a recorded access trace is
//           farthest away (Belady's MIN); needs the trace of a previous run
//   atu     M2Cache's Adjacent Token Update: a miss may only replace a unit that the current
//           token has not used; units of the current token are never evicted
//   window  LLM-in-a-flash sliding window: units not used in the last k tokens are dropped at
//           each token boundary; under pressure the least recently used goes first
//   mru     most recently used: optimal for a cyclic scan larger than the cache (dense
//           streaming of a model that does not fit: keeps a fixed part, streams the rest)
//   hot     a static priority by position: the lowest unit indices of each extent stay (the
//           hottest columns of a pack ordered by activation, hot_prefix_policy.h)
// docs/storage.md describes each rule and its source.
//
// How the cache drives a policy (all calls under the cache's mutex, so policies need no locks;
// one virtual call per access or per eviction, never per byte):
//   Lookup/Acquire of a resident unit:  MakeUnevictable (if it was unpinned), OnAccess(id, hook)
//   Lookup/Acquire of an absent unit:   OnAccess(id, nullptr)  [then OnInsert on a reservation]
//   a reservation (miss or prefetch):   OnInsert(hook)         (the new entry is pinned)
//   last pin released:                  MakeEvictable(hook)
//   room needed in a partition:         PickVictim(partition, force) -> an evictable hook
//   entry leaves (evicted or aborted):  OnRemove(hook)
//   token / sequence boundaries:        BeginToken(&expired), ResetSequence()
// Only evictable (unpinned) hooks are ever returned by PickVictim or BeginToken.
//
// Thread safety: none of its own; the owning WeightCache serializes every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "storage/unit_id.h"

namespace weir::storage {

// Per-entry state a policy may use, embedded in each cache entry so that policies need no map
// of their own for resident units.
struct PolicyHook {
  UnitId id = 0;
  uint32_t partition = 0;
  uint64_t key1 = 0;  // policy-defined ordering keys (time stamp, count, next use ...)
  uint64_t key2 = 0;
  PolicyHook* prev = nullptr;  // intrusive list links (LRU)
  PolicyHook* next = nullptr;
  bool evictable = false;  // linked into the policy's eviction order
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  virtual std::string_view name() const = 0;
  // Called once by the cache before anything else.
  virtual void Init(uint32_t n_partitions) = 0;

  // The compute path asked for `id`: `resident` is its (pinned) hook on a hit, null on a miss.
  virtual void OnAccess(UnitId id, PolicyHook* resident) = 0;
  // A new entry (pinned, not yet evictable).
  virtual void OnInsert(PolicyHook* hook) = 0;
  virtual void MakeEvictable(PolicyHook* hook) = 0;
  virtual void MakeUnevictable(PolicyHook* hook) = 0;
  // The entry leaves the cache; unlink it if linked. No further calls mention it.
  virtual void OnRemove(PolicyHook* hook) = 0;

  // An evictable unit of `partition` to evict, or null when there is none. Without `force` a
  // policy may also refuse (ATU refuses to evict units of the current token); with `force`
  // (budget shrink) it must return one whenever one is evictable.
  virtual PolicyHook* PickVictim(uint32_t partition, bool force) = 0;

  // Admission (WeightCache::Move): may `incoming` take the place of `victim`? MRU says no: the
  // incoming unit is the most recently used, so it is the one MRU would evict. Default yes.
  virtual bool Admit(const PolicyHook& incoming, const PolicyHook& victim) const {
    (void)incoming, (void)victim;
    return true;
  }

  // A new token starts; append evictable units the policy wants dropped now (window).
  virtual void BeginToken(std::vector<PolicyHook*>* expired) { (void)expired; }
  // A new sequence (prompt) starts: per-sequence statistics are forgotten (LFU).
  virtual void ResetSequence() {}

  // Bytes the policy allocates per resident entry beyond the hook (charged to each entry), and
  // bytes it holds independently of entries (LFU's counts, Belady's trace), reported in stats.
  virtual size_t per_entry_bytes() const = 0;
  virtual size_t metadata_bytes() const { return 0; }
};

struct PolicyOptions {
  uint32_t window_tokens = 4;        // window: k, the tokens a unit stays after its last use
  std::vector<UnitId> belady_trace;  // belady: the accesses of the run to replay, in order
  // hot: the partition that reads ahead land in (a staging partition), or -1. There a unit's
  // rank says nothing about when it is needed, so the unit released last goes first (as with
  // mru: the read furthest ahead, or a unit just used), never one read ahead for sooner.
  int64_t read_ahead_partition = -1;
};

// "lru", "lfu", "belady", "atu", "window", "mru". InvalidArgument for an unknown name (listing the
// known ones), for belady without a trace, or for window_tokens == 0.
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                           PolicyOptions options = {});
std::vector<std::string> EvictionPolicyNames();

}  // namespace weir::storage
