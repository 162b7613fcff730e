// IndexList: the result of one selection: which of the n inputs of a site (or which of the d_ff
// units) a token uses. Storage is owned by the caller and reserved once, so selecting per token
// never allocates. "All" is a flag, not a list: the engine then takes its dense path, which keeps
// density-1.0 runs bit-identical to dense ones.
//
// CacheStateView: a non-owning bitset over the columns of one (layer, site), bit i set when
// column i is resident in the DRAM weight cache. DIP-CA reads it; the cache owns it.
//
// Thread safety: values with no internal synchronisation; one writer at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/check.h"

namespace weir::sparsity {

class IndexList {
 public:
  IndexList() = default;
  explicit IndexList(int64_t capacity) { Reserve(capacity); }

  // Allocates room for `capacity` indices (the widest universe this list will see). Call once.
  void Reserve(int64_t capacity);
  int64_t capacity() const { return static_cast<int64_t>(idx_.size()); }

  // Every index of [0, universe) is active; nothing is written.
  void SetAll(int64_t universe);

  bool all() const { return all_; }
  int64_t universe() const { return universe_; }
  // Number of active indices (universe() when all()).
  int64_t size() const { return all_ ? universe_ : size_; }
  // size() / universe(); 1 for an empty universe.
  double density() const;

  // The active indices, strictly ascending. Only for an explicit list (!all()).
  std::span<const int32_t> indices() const {
    WEIR_CHECK(!all_);
    return {idx_.data(), static_cast<size_t>(size_)};
  }
  // The i-th active index (i when all()).
  int32_t operator[](int64_t i) const { return all_ ? static_cast<int32_t>(i) : idx_[i]; }
  // Whether `index` is active (binary search on an explicit list).
  bool Contains(int64_t index) const;

  // Writes 0..universe-1 explicitly (for a consumer that always wants a list); no-op otherwise.
  void Materialize();
  // Copies another selection; needs capacity() >= other.size() (no allocation).
  void CopyFrom(const IndexList& other);

  // Writer protocol for selection code: BeginWrite returns a buffer of capacity() entries for a
  // universe of `universe` (<= capacity()); EndWrite(count) publishes the first `count` entries,
  // which must be strictly ascending. count == universe turns the list into all().
  int32_t* BeginWrite(int64_t universe);
  void EndWrite(int64_t count);

 private:
  std::vector<int32_t> idx_;
  int64_t universe_ = 0;
  int64_t size_ = 0;
  bool all_ = false;
};

class CacheStateView {
 public:
  CacheStateView() = default;
  // Bit i of words[i / 64] (least significant bit first) says whether column i is cached.
  CacheStateView(std::span<const uint64_t> words, int64_t n_columns)
      : words_(words.data()), n_(n_columns) {
    WEIR_CHECK(n_columns >= 0 && static_cast<int64_t>(words.size()) * 64 >= n_columns);
  }
  bool test(int64_t column) const { return (words_[column >> 6] >> (column & 63)) & 1u; }
  int64_t size() const { return n_; }
  const uint64_t* words() const { return words_; }

 private:
  const uint64_t* words_ = nullptr;
  int64_t n_ = 0;
};

// Number of 64-bit words a CacheStateView over n columns needs.
inline int64_t CacheWords(int64_t n_columns) { return (n_columns + 63) / 64; }

}  // namespace weir::sparsity
