#include "storage/slab_placement.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/check.h"
#include "base/checked_math.h"

namespace weir::storage {

namespace {
constexpr uint64_t kHugePage = AnonRegion::kHugePage;

// Where unit `index`'s huge pages end: its last whole huge page of payload (0 in a slab of small
// pages). Its payload: payload_bytes (or the whole unit), cut at the slab's end.
uint64_t HugeEnd(const SlabPlacement::Slab& s, uint64_t index) {
  if (s.unit_bytes % kHugePage != 0) return 0;
  uint64_t payload = s.payload_bytes > 0 ? std::min<uint64_t>(s.payload_bytes, s.unit_bytes)
                                         : s.unit_bytes;
  const uint64_t start = index * s.unit_bytes;
  payload = start < s.bytes ? std::min(payload, s.bytes - start) : 0;
  return payload / kHugePage * kHugePage;
}
}  // namespace

size_t SlabPlacement::PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

Result<std::unique_ptr<SlabPlacement>> SlabPlacement::Create(const std::vector<Slab>& slabs,
                                                             size_t deferred_release_bytes) {
  if (slabs.empty()) return Status::InvalidArgument("slab placement: no slabs");
  const size_t page = PageSize();
  std::unique_ptr<SlabPlacement> p(new SlabPlacement());
  p->deferred_release_bytes_ = std::min(deferred_release_bytes, kDeferredReleaseBytes);
  for (size_t s = 0; s < slabs.size(); ++s) {
    const Slab& in = slabs[s];
    if (in.unit_bytes == 0 || in.unit_bytes % page != 0) {
      return Status::InvalidArgument(StrFormat(
          "slab placement: slab %zu: unit size %zu is not a positive multiple of the page size %zu",
          s, in.unit_bytes, page));
    }
    uint64_t mapped = 0;
    if (in.bytes == 0 || !CheckedAdd(in.bytes, page - 1, &mapped)) {
      return Status::InvalidArgument(StrFormat("slab placement: slab %zu has %llu bytes", s,
                                               static_cast<unsigned long long>(in.bytes)));
    }
    mapped = mapped / page * page;
    // Units of whole huge pages get huge pages (one fault and one zeroing per 2 MiB instead of
    // 512: reading into freshly released memory is otherwise limited by page faults); smaller
    // units get none, so that a unit commits only its own pages.
    const bool huge = in.unit_bytes % kHugePage == 0;
    if (huge) mapped = (mapped + in.unit_bytes - 1) / in.unit_bytes * in.unit_bytes;  // whole units
    auto memory = AnonRegion::Create(static_cast<size_t>(mapped), huge);
    if (!memory.ok()) return memory.status().WithContext(StrFormat("slab placement: slab %zu", s));
    if (huge) {
      // Past each unit's last whole huge page of payload: small pages (best effort, as
      // MADV_HUGEPAGE), so that the unit commits its payload and no more.
      for (uint64_t u = 0; u * in.unit_bytes < mapped; ++u) {
        const uint64_t end = HugeEnd(in, u);
        if (end == in.unit_bytes) continue;
        (void)madvise(memory->data() + u * in.unit_bytes + end,
                      static_cast<size_t>(in.unit_bytes - end), MADV_NOHUGEPAGE);
      }
    }
    p->slabs_.push_back(Region{std::move(memory).value(), in.unit_bytes, in});
  }
  return p;
}

SlabPlacement::~SlabPlacement() = default;  // the regions unmap everything, queued or not

std::byte* SlabPlacement::Place(UnitId id, size_t capacity) {
  const uint32_t s = UnitLayer(id);
  if (s >= slabs_.size()) return nullptr;
  Region& r = slabs_[s];
  uint64_t offset = 0;
  if (!CheckedMul(UnitIndex(id), r.unit_bytes, &offset) || capacity > r.unit_bytes ||
      !RangeInside(offset, capacity, r.memory.size())) {
    return nullptr;
  }
  std::byte* p = r.memory.data() + offset;
  {
    // A queued release of this place is cancelled: the unit's new bytes go into those pages.
    std::lock_guard<std::mutex> lock(release_mu_);
    if (!queued_.empty()) {
      auto it = queued_.find(p);
      if (it != queued_.end()) {
        queued_bytes_ -= it->second;
        queued_.erase(it);
      }
    }
  }
  return p;
}

uint64_t SlabPlacement::FootprintIn(const Slab& s, uint64_t index, uint64_t capacity) {
  const uint64_t page = PageSize();
  const uint64_t huge_end = HugeEnd(s, index);
  if (capacity > huge_end) return huge_end + (capacity - huge_end + page - 1) / page * page;
  return (capacity + kHugePage - 1) / kHugePage * kHugePage;
}

size_t SlabPlacement::Footprint(UnitId id, size_t capacity) const {
  const uint32_t s = UnitLayer(id);
  if (s >= slabs_.size()) return capacity;
  return static_cast<size_t>(FootprintIn(slabs_[s].spec, UnitIndex(id), capacity));
}

void SlabPlacement::Release(UnitId id, std::byte* data, size_t capacity) {
  (void)id;
  const size_t page = PageSize();
  const size_t rounded = (capacity + page - 1) / page * page;
  if (rounded >= kHugePage || deferred_release_bytes_ == 0) {  // one madvise anyway
    Discard(data, capacity);
    return;
  }
  std::lock_guard<std::mutex> lock(release_mu_);
  auto [it, added] = queued_.emplace(data, rounded);
  if (!added) return;  // already queued
  queued_bytes_ += rounded;
  if (queued_bytes_ >= deferred_release_bytes_) FlushLocked();
}

void SlabPlacement::Reclaim(std::byte* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(release_mu_);
  for (auto it = queued_.begin(); it != queued_.end();) {
    if (it->first < p + bytes && p < it->first + it->second) {
      queued_bytes_ -= it->second;
      it = queued_.erase(it);
    } else {
      ++it;
    }
  }
}

void SlabPlacement::FlushReleases() {
  std::lock_guard<std::mutex> lock(release_mu_);
  FlushLocked();
}

void SlabPlacement::FlushLocked() {
  if (queued_.empty()) return;
  std::vector<std::pair<std::byte*, size_t>> runs(queued_.begin(), queued_.end());
  queued_.clear();
  queued_bytes_ = 0;
  std::sort(runs.begin(), runs.end());
  std::byte* start = runs[0].first;
  size_t len = runs[0].second;
  for (size_t i = 1; i <= runs.size(); ++i) {
    if (i < runs.size() && runs[i].first == start + len) {
      len += runs[i].second;
      continue;
    }
    WEIR_CHECK(madvise(start, len, MADV_DONTNEED) == 0);
    if (i < runs.size()) {
      start = runs[i].first;
      len = runs[i].second;
    }
  }
}

void SlabPlacement::Discard(std::byte* p, size_t bytes) {
  const size_t page = PageSize();
  WEIR_CHECK(reinterpret_cast<uintptr_t>(p) % page == 0);
  const size_t rounded = (bytes + page - 1) / page * page;
  // MADV_DONTNEED on a private anonymous mapping frees the pages at once; it cannot fail on a
  // valid range of our own mapping.
  WEIR_CHECK(madvise(p, rounded, MADV_DONTNEED) == 0);
}

}  // namespace weir::storage
