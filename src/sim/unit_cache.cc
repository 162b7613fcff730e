#include "sim/unit_cache.h"

#include <algorithm>
#include <bit>

#include "base/check.h"

namespace weir::sim {
namespace {

// LRU as an intrusive recency list over unit ids: O(1) per access.
class LruCache : public UnitCache {
 public:
  LruCache(uint32_t n, uint32_t k)
      : UnitCache(n, k), prev_(n, -1), next_(n, -1), in_(n, 0), last_(n, -1) {}

  void Access(int64_t t, const std::vector<uint32_t>& active, const OccurrenceMatrix*,
              AccessResult* out) override {
    out->hits = out->evictions = out->admitted = 0;
    out->missed.clear();
    for (uint32_t u : active) {
      if (in_[u]) {
        ++out->hits;
        Unlink(u);
        PushFront(u);
        last_[u] = t;
      } else {
        out->missed.push_back(u);
      }
    }
    for (uint32_t u : out->missed) {
      if (size_ < capacity_) {
        Insert(u, t);
        ++out->admitted;
        continue;
      }
      // The least recent unit, unless it was used by this very token (then all are: bypass).
      if (tail_ < 0 || last_[static_cast<uint32_t>(tail_)] >= t) break;
      uint32_t victim = static_cast<uint32_t>(tail_);
      Unlink(victim);
      in_[victim] = 0;
      --size_;
      ++out->evictions;
      Insert(u, t);
      ++out->admitted;
    }
  }
  bool Contains(uint32_t u) const override { return in_[u] != 0; }
  uint32_t size() const override { return size_; }

 private:
  void Insert(uint32_t u, int64_t t) {
    in_[u] = 1;
    last_[u] = t;
    ++size_;
    PushFront(u);
  }
  void PushFront(uint32_t u) {
    prev_[u] = -1;
    next_[u] = head_;
    if (head_ >= 0) prev_[static_cast<uint32_t>(head_)] = static_cast<int32_t>(u);
    head_ = static_cast<int32_t>(u);
    if (tail_ < 0) tail_ = head_;
  }
  void Unlink(uint32_t u) {
    int32_t p = prev_[u], n = next_[u];
    if (p >= 0)
      next_[static_cast<uint32_t>(p)] = n;
    else
      head_ = n;
    if (n >= 0)
      prev_[static_cast<uint32_t>(n)] = p;
    else
      tail_ = p;
    prev_[u] = next_[u] = -1;
  }

  std::vector<int32_t> prev_, next_;
  std::vector<uint8_t> in_;
  std::vector<int64_t> last_;
  int32_t head_ = -1, tail_ = -1;
  uint32_t size_ = 0;
};

class StaticCache : public UnitCache {
 public:
  StaticCache(uint32_t n, uint32_t k) : UnitCache(n, k), in_(n, 0) {}
  void Access(int64_t, const std::vector<uint32_t>& active, const OccurrenceMatrix*,
              AccessResult* out) override {
    out->hits = out->evictions = out->admitted = 0;
    out->missed.clear();
    for (uint32_t u : active) {
      if (in_[u]) {
        ++out->hits;
      } else {
        out->missed.push_back(u);
      }
    }
    for (uint32_t u : out->missed) {
      if (size_ >= capacity_) break;
      in_[u] = 1;
      ++size_;
      ++out->admitted;
    }
  }
  bool Contains(uint32_t u) const override { return in_[u] != 0; }
  uint32_t size() const override { return size_; }

 private:
  std::vector<uint8_t> in_;
  uint32_t size_ = 0;
};

// LFU and Belady: cached units ordered by score in a set; the worst is begin().
class ScoredCache : public UnitCache {
 public:
  ScoredCache(CachePolicy p, uint32_t n, uint32_t k)
      : UnitCache(n, k),
        policy_(p),
        in_(n, 0),
        score_(n, 0),
        count_(p == CachePolicy::kLfu ? n : 0, 0) {}

  void Access(int64_t t, const std::vector<uint32_t>& active, const OccurrenceMatrix* future,
              AccessResult* out) override {
    WEIR_CHECK(policy_ != CachePolicy::kBelady || future != nullptr);
    out->hits = out->evictions = out->admitted = 0;
    out->missed.clear();
    cand_.clear();
    for (uint32_t u : active) {
      int64_t s = Score(u, t, future);
      if (in_[u]) {
        ++out->hits;
        set_.erase({score_[u], u});
        score_[u] = s;
        set_.insert({s, u});
      } else {
        out->missed.push_back(u);
        cand_.push_back({s, u});
      }
    }
    // Best candidates first; equal scores by ascending id.
    std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (const auto& [s, u] : cand_) {
      if (set_.size() < capacity_) {
        Admit(u, s);
        ++out->admitted;
        continue;
      }
      if (set_.empty() || !(s > set_.begin()->first)) break;
      uint32_t victim = set_.begin()->second;
      set_.erase(set_.begin());
      in_[victim] = 0;
      ++out->evictions;
      Admit(u, s);
      ++out->admitted;
    }
  }
  bool Contains(uint32_t u) const override { return in_[u] != 0; }
  uint32_t size() const override { return static_cast<uint32_t>(set_.size()); }

 private:
  int64_t Score(uint32_t u, int64_t t, const OccurrenceMatrix* future) {
    if (policy_ == CachePolicy::kLfu) {
      ++count_[u];
      return (static_cast<int64_t>(count_[u]) << 32) | (t & 0xFFFFFFFF);
    }
    int64_t next = future->NextUse(u, t);
    return next == OccurrenceMatrix::kNever ? INT64_MIN : -next;
  }
  void Admit(uint32_t u, int64_t s) {
    in_[u] = 1;
    score_[u] = s;
    set_.insert({s, u});
  }

  CachePolicy policy_;
  std::vector<uint8_t> in_;
  std::vector<int64_t> score_;
  std::vector<uint32_t> count_;
  std::set<std::pair<int64_t, uint32_t>> set_;
  std::vector<std::pair<int64_t, uint32_t>> cand_;
};

}  // namespace

Result<CachePolicy> ParseCachePolicy(const std::string& text) {
  if (text == "lru") return CachePolicy::kLru;
  if (text == "lfu") return CachePolicy::kLfu;
  if (text == "belady") return CachePolicy::kBelady;
  if (text == "static" || text == "none") return CachePolicy::kStatic;
  return Status::InvalidArgument(
      StrFormat("--policy '%s': expected lru, lfu, belady or static "
                "(none)",
                text.c_str()));
}

Result<std::vector<CachePolicy>> ParseCachePolicyList(const std::string& text) {
  std::vector<CachePolicy> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) {
      WEIR_ASSIGN_OR_RETURN(CachePolicy p, ParseCachePolicy(text.substr(start, comma - start)));
      out.push_back(p);
    }
    start = comma + 1;
  }
  if (out.empty()) return Status::InvalidArgument("--policy is empty");
  return out;
}

const char* CachePolicyName(CachePolicy p) {
  switch (p) {
    case CachePolicy::kLru:
      return "lru";
    case CachePolicy::kLfu:
      return "lfu";
    case CachePolicy::kBelady:
      return "belady";
    case CachePolicy::kStatic:
      return "static";
  }
  return "?";
}

OccurrenceMatrix::OccurrenceMatrix(uint32_t n_units, int64_t n_tokens)
    : n_tokens_(n_tokens),
      words_(static_cast<size_t>((n_tokens + 63) / 64)),
      bits_(static_cast<size_t>(n_units) * words_, 0) {}

int64_t OccurrenceMatrix::NextUse(uint32_t unit, int64_t token) const {
  int64_t from = token + 1;
  if (from >= n_tokens_) return kNever;
  const uint64_t* row = bits_.data() + static_cast<size_t>(unit) * words_;
  size_t w = static_cast<size_t>(from / 64);
  uint64_t bits = row[w] & (~0ull << (from % 64));
  while (true) {
    if (bits) return static_cast<int64_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits)));
    if (++w >= words_) return kNever;
    bits = row[w];
  }
}

std::unique_ptr<UnitCache> UnitCache::Create(CachePolicy policy, uint32_t n_units,
                                             uint32_t capacity) {
  WEIR_CHECK(capacity <= n_units);
  switch (policy) {
    case CachePolicy::kLru:
      return std::make_unique<LruCache>(n_units, capacity);
    case CachePolicy::kStatic:
      return std::make_unique<StaticCache>(n_units, capacity);
    case CachePolicy::kLfu:
    case CachePolicy::kBelady:
      return std::make_unique<ScoredCache>(policy, n_units, capacity);
  }
  return nullptr;
}

}  // namespace weir::sim
