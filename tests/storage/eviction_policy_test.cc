// Eviction policies: hand traces for each rule, exact agreement with simple reference
// simulators (LRU, LFU, Belady), and the invariant Belady hits >= LRU, LFU hits on random and
// Zipf traces.
#include "storage/eviction_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <list>
#include <map>
#include <random>
#include <set>

#include "storage/belady_policy.h"
#include "storage/weight_cache.h"

namespace weir::storage {
namespace {

constexpr size_t kUnit = 1024;

struct Sim {
  std::unique_ptr<WeightCache> cache;
  uint64_t refused = 0;  // misses the cache could not hold (read into a transient buffer)

  // A cache holding exactly `capacity` units of kUnit bytes per partition.
  static Sim Make(const char* policy, size_t capacity, PolicyOptions po = {},
                  uint32_t partitions = 1, bool record = false) {
    CacheOptions o;
    o.partition_weights.assign(partitions, 1);
    o.record_trace = record;
    Sim s;
    s.cache = WeightCache::Create(o, MakeEvictionPolicy(policy, std::move(po)).value()).value();
    EXPECT_TRUE(s.cache->SetBudget(capacity * partitions * s.cache->EntryCharge(kUnit)).ok());
    return s;
  }
  static Sim Make(std::unique_ptr<EvictionPolicy> policy, size_t capacity) {
    Sim s;
    s.cache = WeightCache::Create(CacheOptions{}, std::move(policy)).value();
    EXPECT_TRUE(s.cache->SetBudget(capacity * s.cache->EntryCharge(kUnit)).ok());
    return s;
  }

  // One access; returns true on a hit. The handle is released at once (used and done).
  bool Access(UnitId id, uint32_t partition = 0) {
    auto r = cache->Acquire(id, kUnit, partition);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kOutOfMemory);
      ++refused;
      return false;
    }
    if (r->is_loader()) {
      r->Publish();
      return false;
    }
    return true;
  }
  uint64_t Replay(const std::vector<UnitId>& trace) {
    uint64_t hits = 0;
    for (UnitId id : trace) hits += Access(id);
    return hits;
  }
  bool Has(UnitId id) const { return cache->Contains(id); }
};

// ------------------------------------------------------------------ reference simulators

uint64_t ReferenceLru(const std::vector<UnitId>& trace, size_t capacity) {
  std::list<UnitId> order;  // front = most recent
  uint64_t hits = 0;
  for (UnitId id : trace) {
    auto it = std::find(order.begin(), order.end(), id);
    if (it != order.end()) {
      ++hits;
      order.erase(it);
    } else if (order.size() == capacity) {
      order.pop_back();
    }
    order.push_front(id);
  }
  return hits;
}

uint64_t ReferenceLfu(const std::vector<UnitId>& trace, size_t capacity) {
  std::map<UnitId, uint64_t> count, last;  // counts for every unit seen; last access time
  std::set<UnitId> resident;
  uint64_t hits = 0, t = 0;
  for (UnitId id : trace) {
    ++t;
    ++count[id];
    last[id] = t;
    if (resident.count(id)) {
      ++hits;
      continue;
    }
    if (resident.size() == capacity) {
      UnitId victim = *std::min_element(resident.begin(), resident.end(), [&](UnitId a, UnitId b) {
        return std::make_pair(count[a], last[a]) < std::make_pair(count[b], last[b]);
      });
      resident.erase(victim);
    }
    resident.insert(id);
  }
  return hits;
}

uint64_t ReferenceBelady(const std::vector<UnitId>& trace, size_t capacity) {
  std::set<UnitId> resident;
  uint64_t hits = 0;
  for (size_t t = 0; t < trace.size(); ++t) {
    if (resident.count(trace[t])) {
      ++hits;
      continue;
    }
    if (resident.size() == capacity) {
      UnitId victim = 0;
      size_t farthest = 0;
      for (UnitId r : resident) {
        size_t next = trace.size();  // never again
        for (size_t u = t + 1; u < trace.size(); ++u) {
          if (trace[u] == r) {
            next = u;
            break;
          }
        }
        if (next >= farthest) {
          farthest = next;
          victim = r;
        }
      }
      resident.erase(victim);
    }
    resident.insert(trace[t]);
  }
  return hits;
}

std::vector<UnitId> UniformTrace(size_t n_units, size_t length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<UnitId> t(length);
  for (UnitId& id : t) id = rng() % n_units;
  return t;
}

std::vector<UnitId> ZipfTrace(size_t n_units, size_t length, double s, uint64_t seed) {
  std::vector<double> w(n_units);
  for (size_t i = 0; i < n_units; ++i) w[i] = 1.0 / std::pow(static_cast<double>(i + 1), s);
  std::discrete_distribution<size_t> zipf(w.begin(), w.end());
  std::mt19937_64 rng(seed);
  // Shuffle ranks to ids so popularity is not the id order.
  std::vector<UnitId> ids(n_units);
  for (size_t i = 0; i < n_units; ++i) ids[i] = i * 7919 + 3;
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<UnitId> t(length);
  for (UnitId& id : t) id = ids[zipf(rng)];
  return t;
}

// ------------------------------------------------------------------ factory

TEST(EvictionPolicyTest, FactoryNamesAndErrors) {
  for (const std::string& name : EvictionPolicyNames()) {
    PolicyOptions po;
    po.belady_trace = {1, 2, 3};
    auto p = MakeEvictionPolicy(name, po);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  auto unknown = MakeEvictionPolicy("fifo");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("fifo"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("belady"), std::string::npos);
  auto no_trace = MakeEvictionPolicy("belady");
  ASSERT_FALSE(no_trace.ok());
  EXPECT_NE(no_trace.status().message().find("trace"), std::string::npos);
  PolicyOptions zero;
  zero.window_tokens = 0;
  EXPECT_FALSE(MakeEvictionPolicy("window", zero).ok());
}

// ------------------------------------------------------------------ hand traces

TEST(EvictionPolicyTest, LruEvictsTheLeastRecentlyUsed) {
  Sim s = Sim::Make("lru", 3);
  s.Access(1);
  s.Access(2);
  s.Access(3);
  EXPECT_TRUE(s.Access(1));   // 1 is now the most recent; 2 the least
  EXPECT_FALSE(s.Access(4));  // evicts 2
  EXPECT_FALSE(s.Has(2));
  EXPECT_TRUE(s.Has(1) && s.Has(3) && s.Has(4));
  EXPECT_FALSE(s.Access(2));  // evicts 3
  EXPECT_FALSE(s.Has(3));
}

TEST(EvictionPolicyTest, LfuEvictsTheLeastFrequentAndForgetsPerSequence) {
  Sim s = Sim::Make("lfu", 2);
  s.Access(1);
  s.Access(1);
  s.Access(2);
  s.Access(3);  // counts 1:2, 2:1 -> evicts 2
  EXPECT_TRUE(s.Has(1));
  EXPECT_FALSE(s.Has(2));
  EXPECT_TRUE(s.Has(3));
  // 2 comes back with its history (count 2 now) and evicts 3 (count 1), not 1 (count 2,
  // older): counts are kept for units that are not resident.
  s.Access(2);
  EXPECT_TRUE(s.Has(1) && s.Has(2));
  EXPECT_FALSE(s.Has(3));
  // A new sequence forgets the counts: the least recently used of the now-equal units goes.
  s.cache->ResetSequence();
  s.Access(4);  // 1 (last used at t=2) is older than 2 (t=5)
  EXPECT_FALSE(s.Has(1));
  EXPECT_TRUE(s.Has(2) && s.Has(4));
}

TEST(EvictionPolicyTest, WindowKeepsTheLastKTokens) {
  for (uint32_t k : {1u, 2u}) {
    PolicyOptions po;
    po.window_tokens = k;
    Sim s = Sim::Make("window", 100, po);  // plenty of room: only the window evicts
    s.cache->BeginToken();                 // token 1
    s.Access(1);
    s.Access(2);
    s.cache->BeginToken();  // token 2
    s.Access(1);
    s.Access(3);
    s.cache->BeginToken();  // token 3: the window is tokens {2} (k=1) or {1, 2} (k=2)
    EXPECT_TRUE(s.Has(1));
    EXPECT_TRUE(s.Has(3));
    EXPECT_EQ(s.Has(2), k == 2) << "k=" << k;
    s.Access(4);
    s.cache->BeginToken();  // token 4: k=1 keeps {4}; k=2 keeps {1, 3, 4}
    EXPECT_TRUE(s.Has(4));
    EXPECT_EQ(s.Has(1), k == 2);
    EXPECT_EQ(s.Has(3), k == 2);
    EXPECT_EQ(s.cache->stats().entries, k == 1 ? 1u : 3u);
  }
  // Under pressure inside a token the least recently used goes first.
  PolicyOptions po;
  po.window_tokens = 5;
  Sim s = Sim::Make("window", 2, po);
  s.cache->BeginToken();
  s.Access(1);
  s.Access(2);
  s.Access(1);
  s.Access(3);
  EXPECT_FALSE(s.Has(2));
  EXPECT_TRUE(s.Has(1) && s.Has(3));
}

TEST(EvictionPolicyTest, AtuUpdatesOnlyTheUnitsThatDiffer) {
  // The layer's cache holds one token's active set (capacity 3), as in M2Cache.
  Sim s = Sim::Make("atu", 3);
  s.cache->BeginToken();
  for (UnitId id : {1, 2, 3}) s.Access(id);
  s.cache->BeginToken();
  uint64_t loads_before = s.cache->stats().inserted_entries;
  EXPECT_TRUE(s.Access(1));
  EXPECT_FALSE(s.Access(4));
  EXPECT_FALSE(s.Access(5));
  // Only the two differing units were loaded, and the cache is exactly token 2's set.
  EXPECT_EQ(s.cache->stats().inserted_entries - loads_before, 2u);
  EXPECT_TRUE(s.Has(1) && s.Has(4) && s.Has(5));
  EXPECT_FALSE(s.Has(2) || s.Has(3));
  // Token 3 needs 4 units: 6 replaces the stale 5; 7 finds only units of token 3 and is
  // refused (read into a transient buffer) instead of evicting 1, which LRU would do.
  s.cache->BeginToken();
  EXPECT_TRUE(s.Access(1));
  EXPECT_TRUE(s.Access(4));
  EXPECT_FALSE(s.Access(6));
  EXPECT_FALSE(s.Has(5));
  EXPECT_EQ(s.refused, 0u);
  EXPECT_FALSE(s.Access(7));
  EXPECT_EQ(s.refused, 1u);
  EXPECT_TRUE(s.Has(1) && s.Has(4) && s.Has(6));
  EXPECT_FALSE(s.Has(7));

  Sim lru = Sim::Make("lru", 3);
  for (UnitId id : {1, 2, 3, 1, 4, 5, 1, 4, 6, 7}) lru.Access(id);
  EXPECT_EQ(lru.refused, 0u);
  EXPECT_FALSE(lru.Has(1));  // LRU evicted a unit of the current token

  // With spare room ATU keeps stale units until their space is needed (no eager drop).
  Sim roomy = Sim::Make("atu", 10);
  roomy.cache->BeginToken();
  roomy.Access(1);
  roomy.cache->BeginToken();
  roomy.Access(2);
  roomy.cache->BeginToken();
  EXPECT_TRUE(roomy.Has(1) && roomy.Has(2));
  // A budget shrink may evict current-token units (force): the budget always wins.
  roomy.Access(2);
  ASSERT_TRUE(roomy.cache->SetBudget(0).ok());
  EXPECT_EQ(roomy.cache->stats().entries, 0u);
}

TEST(EvictionPolicyTest, PoliciesWorkPerPartition) {
  // Two partitions of 2 units each; pressure in partition 0 never touches partition 1.
  for (const char* policy : {"lru", "lfu", "atu", "window"}) {
    Sim s = Sim::Make(policy, 2, PolicyOptions{}, 2);
    s.cache->BeginToken();
    s.Access(100, 1);
    s.Access(101, 1);
    s.cache->BeginToken();
    for (UnitId id = 0; id < 10; ++id) s.Access(id, 0);
    EXPECT_TRUE(s.Has(100) && s.Has(101)) << policy;
    EXPECT_EQ(s.cache->partition_stats(0).entries, 2u) << policy;
  }
}

// ------------------------------------------------------------------ references and invariants

TEST(EvictionPolicyTest, MatchesReferenceSimulators) {
  for (uint64_t seed : {1, 2, 3}) {
    for (size_t capacity : {1, 4, 12}) {
      std::vector<UnitId> trace =
          seed == 3 ? ZipfTrace(40, 1500, 1.0, seed) : UniformTrace(20, 1500, seed);
      Sim lru = Sim::Make("lru", capacity);
      EXPECT_EQ(lru.Replay(trace), ReferenceLru(trace, capacity)) << seed << " " << capacity;
      Sim lfu = Sim::Make("lfu", capacity);
      EXPECT_EQ(lfu.Replay(trace), ReferenceLfu(trace, capacity)) << seed << " " << capacity;
      PolicyOptions po;
      po.belady_trace = trace;
      Sim belady = Sim::Make("belady", capacity, po);
      EXPECT_EQ(belady.Replay(trace), ReferenceBelady(trace, capacity)) << seed << " " << capacity;
    }
  }
}

TEST(EvictionPolicyTest, BeladyHitsAtLeastLruAndLfu) {
  struct Case {
    const char* label;
    std::vector<UnitId> trace;
  };
  std::vector<Case> cases = {
      {"uniform-50", UniformTrace(50, 4000, 11)},   {"uniform-200", UniformTrace(200, 4000, 12)},
      {"zipf-1.0", ZipfTrace(300, 6000, 1.0, 13)},  {"zipf-1.3", ZipfTrace(300, 6000, 1.3, 14)},
      {"zipf-0.7", ZipfTrace(1000, 6000, 0.7, 15)},
  };
  for (const Case& c : cases) {
    for (size_t capacity : {2, 10, 40, 120}) {
      // Record the trace through the cache, as the engine would, and replay it with Belady.
      Sim lru = Sim::Make("lru", capacity, {}, 1, /*record=*/true);
      const uint64_t lru_hits = lru.Replay(c.trace);
      std::vector<UnitId> recorded = lru.cache->TakeTrace();
      ASSERT_EQ(recorded, c.trace);
      Sim lfu = Sim::Make("lfu", capacity);
      const uint64_t lfu_hits = lfu.Replay(c.trace);
      auto oracle = std::make_unique<BeladyPolicy>(recorded);
      BeladyPolicy* raw = oracle.get();
      Sim belady = Sim::Make(std::move(oracle), capacity);
      const uint64_t belady_hits = belady.Replay(c.trace);
      EXPECT_EQ(raw->mismatches(), 0u);
      EXPECT_GE(belady_hits, lru_hits) << c.label << " capacity " << capacity;
      EXPECT_GE(belady_hits, lfu_hits) << c.label << " capacity " << capacity;
    }
  }
}

TEST(EvictionPolicyTest, BeladyCountsTraceMismatches) {
  auto oracle = std::make_unique<BeladyPolicy>(std::vector<UnitId>{1, 2, 3});
  BeladyPolicy* raw = oracle.get();
  Sim s = Sim::Make(std::move(oracle), 2);
  s.Access(1);
  s.Access(5);  // the trace said 2
  s.Access(3);
  s.Access(4);  // past the end
  EXPECT_EQ(raw->mismatches(), 2u);
  EXPECT_GT(raw->metadata_bytes(), 0u);
}

}  // namespace
}  // namespace weir::storage
