// UnitCache: the DRAM weight cache of one mask stream, in units, under an eviction policy.
//
// Model (the "set" model of DIP appendix A): at token t the active set A_t is requested at
// once. Hits are A_t ∩ C_t (C_t = cached units before t); the misses are read from storage
// for this token whatever happens next. Then the cache may keep any K units of C_t ∪ A_t; each
// policy ranks candidates by a score and keeps the best, with incumbents winning ties (a miss
// is admitted only if it beats the worst cached unit, which it then evicts; otherwise it goes
// straight to compute and is not cached). Scores:
//   lru     last use (most recent kept)
//   lfu     (use count over the whole run, last use): counts are kept for uncached units too,
//           and a newcomer evicts only a unit used less often (ActiveFlow's rule, §4.2)
//   belady  next use (nearest kept; needs the future, from an OccurrenceMatrix); keeping the
//           K units of C_t ∪ A_t used soonest maximizes hits, so it bounds every policy above
//   static  admit while there is room, never evict ("none": a fixed preloaded set)
// With dense masks every cached unit is active every token, so no policy evicts and the hit
// rate equals the cached fraction K / n.
//
// Thread safety: none; one cache per stream, one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace weir::sim {

enum class CachePolicy { kLru, kLfu, kBelady, kStatic };
Result<CachePolicy> ParseCachePolicy(const std::string& text);  // lru|lfu|belady|static|none
// A comma-separated list of them ("lfu,lru"), in order; an empty list is an error.
Result<std::vector<CachePolicy>> ParseCachePolicyList(const std::string& text);
const char* CachePolicyName(CachePolicy policy);

// For each unit, the tokens it is active in (a unit-major bitset), answering "next use after t".
class OccurrenceMatrix {
 public:
  static constexpr int64_t kNever = INT64_MAX;
  OccurrenceMatrix(uint32_t n_units, int64_t n_tokens);
  static uint64_t BytesFor(uint32_t n_units, int64_t n_tokens) {
    return static_cast<uint64_t>(n_units) * static_cast<uint64_t>((n_tokens + 63) / 64) * 8;
  }
  int64_t n_tokens() const { return n_tokens_; }
  void Set(uint32_t unit, int64_t token) {
    bits_[unit * words_ + static_cast<size_t>(token / 64)] |= 1ull << (token % 64);
  }
  // The first token after `token` in which `unit` is active, or kNever.
  int64_t NextUse(uint32_t unit, int64_t token) const;

 private:
  int64_t n_tokens_;
  size_t words_;
  std::vector<uint64_t> bits_;
};

struct AccessResult {
  uint32_t hits = 0;
  uint32_t evictions = 0;
  uint32_t admitted = 0;
  std::vector<uint32_t> missed;  // ascending
};

class UnitCache {
 public:
  // capacity <= n_units units.
  static std::unique_ptr<UnitCache> Create(CachePolicy policy, uint32_t n_units, uint32_t capacity);
  virtual ~UnitCache() = default;
  // Serves token t (increasing across calls): `active` ascending and distinct. `future` is
  // required by belady and ignored by the others.
  virtual void Access(int64_t t, const std::vector<uint32_t>& active,
                      const OccurrenceMatrix* future, AccessResult* out) = 0;
  virtual bool Contains(uint32_t unit) const = 0;
  virtual uint32_t size() const = 0;
  uint32_t capacity() const { return capacity_; }
  uint32_t n_units() const { return n_units_; }

 protected:
  UnitCache(uint32_t n_units, uint32_t capacity) : n_units_(n_units), capacity_(capacity) {}
  uint32_t n_units_;
  uint32_t capacity_;
};

}  // namespace weir::sim
