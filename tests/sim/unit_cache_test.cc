// Cache policies: dense masks, Belady's optimality (against exhaustive search), Belady >= LRU,
// LFU and static on the same masks, and the O(1) LRU against a naive reference.
#include "sim/unit_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

namespace weir::sim {
namespace {

using Masks = std::vector<std::vector<uint32_t>>;  // [token] -> active units, ascending

Masks RandomMasks(uint32_t n, int tokens, double p, uint32_t seed, double zipf = 0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> U(0, 1);
  Masks m(static_cast<size_t>(tokens));
  for (auto& a : m) {
    for (uint32_t u = 0; u < n; ++u) {
      double pu = zipf > 0 ? std::min(1.0, p * 3 / std::pow(u + 1.0, zipf)) : p;
      if (U(rng) < pu) a.push_back(u);
    }
  }
  return m;
}

OccurrenceMatrix Future(uint32_t n, const Masks& m) {
  OccurrenceMatrix f(n, static_cast<int64_t>(m.size()));
  for (size_t t = 0; t < m.size(); ++t) {
    for (uint32_t u : m[t]) f.Set(u, static_cast<int64_t>(t));
  }
  return f;
}

uint64_t CountHits(CachePolicy p, uint32_t n, uint32_t k, const Masks& m) {
  auto cache = UnitCache::Create(p, n, k);
  OccurrenceMatrix f = Future(n, m);
  AccessResult r;
  uint64_t hits = 0;
  for (size_t t = 0; t < m.size(); ++t) {
    cache->Access(static_cast<int64_t>(t), m[t], &f, &r);
    hits += r.hits;
    EXPECT_EQ(r.hits + r.missed.size(), m[t].size());
    EXPECT_LE(cache->size(), k);
    for (uint32_t u : r.missed) EXPECT_TRUE(std::binary_search(m[t].begin(), m[t].end(), u));
  }
  return hits;
}

// The best possible hit count: after each token the cache may hold any subset of at most k of
// (cache ∪ active). Exhaustive over subsets of n <= 12 units.
uint64_t OptimalHits(uint32_t n, uint32_t k, const Masks& m) {
  std::map<uint32_t, uint64_t> best = {{0u, 0ull}};  // cache set -> hits so far
  for (const auto& a : m) {
    uint32_t amask = 0;
    for (uint32_t u : a) amask |= 1u << u;
    std::map<uint32_t, uint64_t> next;
    for (const auto& [c, h] : best) {
      uint64_t hits = h + static_cast<uint64_t>(__builtin_popcount(c & amask));
      uint32_t pool = c | amask;
      // Every subset of pool with at most k bits (keeping k when possible suffices, but
      // smaller sets are allowed too).
      for (uint32_t s = pool;; s = (s - 1) & pool) {
        if (static_cast<uint32_t>(__builtin_popcount(s)) <= k) {
          auto it = next.find(s);
          if (it == next.end() || it->second < hits) next[s] = hits;
        }
        if (s == 0) break;
      }
    }
    best.swap(next);
  }
  uint64_t b = 0;
  for (const auto& [c, h] : best) b = std::max(b, h);
  return b;
}

TEST(UnitCacheTest, DenseMasksHitTheCachedFraction) {
  const uint32_t n = 1000;
  Masks dense(20);
  for (auto& a : dense) {
    for (uint32_t u = 0; u < n; ++u) a.push_back(u);
  }
  for (CachePolicy p :
       {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kBelady, CachePolicy::kStatic}) {
    for (uint32_t k : {0u, 1u, 333u, 999u, 1000u}) {
      uint64_t hits = CountHits(p, n, k, dense);
      // Cold first token, then k hits per token.
      EXPECT_EQ(hits, 19ull * k) << CachePolicyName(p) << " k=" << k;
    }
  }
}

TEST(UnitCacheTest, BeladyIsOptimalOnSmallCases) {
  for (uint32_t seed = 0; seed < 60; ++seed) {
    uint32_t n = 6 + seed % 5;
    uint32_t k = 1 + seed % 4;
    Masks m = RandomMasks(n, 7 + static_cast<int>(seed % 4), 0.35, seed);
    EXPECT_EQ(CountHits(CachePolicy::kBelady, n, k, m), OptimalHits(n, k, m))
        << "seed " << seed << " n " << n << " k " << k;
  }
}

TEST(UnitCacheTest, BeladyHitsAtLeastEveryOtherPolicy) {
  for (uint32_t seed = 0; seed < 12; ++seed) {
    const uint32_t n = 400;
    Masks m = RandomMasks(n, 60, 0.2, seed, seed % 2 ? 0.8 : 0.0);
    for (uint32_t k : {10u, 50u, 120u, 300u}) {
      uint64_t belady = CountHits(CachePolicy::kBelady, n, k, m);
      for (CachePolicy p : {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kStatic}) {
        EXPECT_GE(belady, CountHits(p, n, k, m))
            << CachePolicyName(p) << " seed " << seed << " k " << k;
      }
    }
  }
}

TEST(UnitCacheTest, SkewedMasksFavorFrequencyOverStatic) {
  // With stable popularity (Zipf) and a cache far smaller than the active set, LFU should beat
  // a first-come static cache and all policies should beat no cache at all.
  const uint32_t n = 500;
  Masks m = RandomMasks(n, 200, 0.1, 3, 1.0);
  uint64_t lfu = CountHits(CachePolicy::kLfu, n, 40, m);
  uint64_t st = CountHits(CachePolicy::kStatic, n, 40, m);
  EXPECT_GT(lfu, st);
  EXPECT_EQ(CountHits(CachePolicy::kLru, n, 0, m), 0u);
}

// A deliberately simple LRU with the same tie rules: every touch gets a new timestamp (hits in
// ascending id, then admitted misses); the victim is the oldest unit not used by this token.
uint64_t NaiveLru(uint32_t n, uint32_t k, const Masks& m) {
  std::vector<int64_t> stamp(n, -1), last(n, -1);
  std::vector<uint8_t> in(n, 0);
  uint32_t size = 0;
  int64_t clock = 0;
  uint64_t hits = 0;
  for (size_t t = 0; t < m.size(); ++t) {
    std::vector<uint32_t> miss;
    for (uint32_t u : m[t]) {
      if (in[u]) {
        ++hits;
        stamp[u] = clock++;
        last[u] = static_cast<int64_t>(t);
      } else {
        miss.push_back(u);
      }
    }
    for (uint32_t u : miss) {
      if (size < k) {
        in[u] = 1;
        ++size;
      } else {
        int64_t victim = -1;
        for (uint32_t v = 0; v < n; ++v) {
          if (in[v] && (victim < 0 || stamp[v] < stamp[static_cast<uint32_t>(victim)])) {
            victim = v;
          }
        }
        if (victim < 0 || last[static_cast<uint32_t>(victim)] == static_cast<int64_t>(t)) break;
        in[static_cast<uint32_t>(victim)] = 0;
        in[u] = 1;
      }
      stamp[u] = clock++;
      last[u] = static_cast<int64_t>(t);
    }
  }
  return hits;
}

TEST(UnitCacheTest, LruMatchesNaiveReference) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const uint32_t n = 64;
    Masks m = RandomMasks(n, 50, 0.15 + 0.02 * seed, seed, seed % 3 ? 0.0 : 0.7);
    for (uint32_t k : {0u, 3u, 16u, 40u, 64u}) {
      EXPECT_EQ(CountHits(CachePolicy::kLru, n, k, m), NaiveLru(n, k, m)) << seed << " " << k;
    }
  }
}

TEST(UnitCacheTest, OccurrenceMatrixNextUse) {
  OccurrenceMatrix f(3, 200);
  f.Set(1, 5);
  f.Set(1, 64);
  f.Set(1, 199);
  EXPECT_EQ(f.NextUse(1, 0), 5);
  EXPECT_EQ(f.NextUse(1, 5), 64);
  EXPECT_EQ(f.NextUse(1, 63), 64);
  EXPECT_EQ(f.NextUse(1, 64), 199);
  EXPECT_EQ(f.NextUse(1, 199), OccurrenceMatrix::kNever);
  EXPECT_EQ(f.NextUse(0, 0), OccurrenceMatrix::kNever);
}

TEST(UnitCacheTest, ParsePolicy) {
  EXPECT_EQ(*ParseCachePolicy("none"), CachePolicy::kStatic);
  EXPECT_EQ(*ParseCachePolicy("belady"), CachePolicy::kBelady);
  EXPECT_FALSE(ParseCachePolicy("fifo").ok());
}

TEST(UnitCacheTest, ParsePolicyList) {
  auto l = ParseCachePolicyList("lfu,lru,belady");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(*l, (std::vector<CachePolicy>{CachePolicy::kLfu, CachePolicy::kLru,
                                          CachePolicy::kBelady}));
  EXPECT_EQ(*ParseCachePolicyList("lru"), std::vector<CachePolicy>{CachePolicy::kLru});
  EXPECT_FALSE(ParseCachePolicyList("lru,fifo").ok());
  EXPECT_FALSE(ParseCachePolicyList("").ok());
  EXPECT_FALSE(ParseCachePolicyList(",").ok());
}

}  // namespace
}  // namespace weir::sim
