// SlabPlacement: a UnitPlacement (weight_cache.h) that gives every unit a fixed address inside
// reserved address ranges ("slabs"), so that the cached units of one slab form a single view of
// the bytes they hold on storage: the streaming engine reserves one slab per layer group of a
// weir pack, and the kernels read a group's resident neuron bundles in place, at the offsets
// they have in the file, without a copy.
//
//   unit (slab s, index i)  lives at  base(s) + i * unit_bytes(s)
//   where s = UnitLayer(id) and i = UnitIndex(id) (unit_id.h; the kind is not used).
//
// Each slab is an anonymous private mapping reserved up front with MAP_NORESERVE: it costs
// address space, not memory, until a unit's bytes are written. When units are whole 2 MiB huge
// pages, the slab is 2 MiB-aligned and asks for transparent huge pages (MADV_HUGEPAGE): filling
// a unit then costs one page fault instead of 512, which otherwise limits how fast storage can
// be read into freshly released memory. Otherwise huge pages are turned off for it
// (MADV_NOHUGEPAGE), so that writing one unit commits only that unit's pages.
// Release (and Discard, for bytes read outside the cache) returns a unit's pages to the OS with
// MADV_DONTNEED, after which they read as zeros; so resident memory follows what is cached. The
// page tables of committed pages (8 bytes per 4 KiB) are the only cost outside the cache budget.
//
// Released units smaller than a huge page are returned in batches: Release queues the range,
// and once deferred_release_bytes (at most kDeferredReleaseBytes) are queued they are sorted, neighbours merged, and each merged
// run given back by one madvise. Each madvise costs a TLB shootdown on every core; one per
// 4 KiB unit made a column pack spend more time there than reading (docs/streaming.md, 3.2).
// A unit placed again while its range is queued leaves the queue (its pages are reused as
// they are). So at most deferred_release_bytes of released units stay resident: the streaming
// plan counts them (StreamingWeights::fixed_bytes).
//
// Thread safety: Place/Release/Discard may be called from any thread; the release queue has its
// own mutex; bases are immutable after Create.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/anon_region.h"
#include "base/status.h"
#include "storage/weight_cache.h"

namespace weir::storage {

class SlabPlacement : public UnitPlacement {
 public:
  struct Slab {
    uint64_t bytes = 0;     // bytes the slab must hold (rounded up to whole pages)
    size_t unit_bytes = 0;  // distance between units; a multiple of the page size
    // Bytes of each unit that are ever written (0: unit_bytes). In a slab of huge pages, a
    // unit's bytes past its last whole huge page get small pages (MADV_NOHUGEPAGE), so a unit
    // rounded up to whole huge pages for its alignment commits no more than its payload.
    uint64_t payload_bytes = 0;
  };
  // The memory unit `index` of slab `s` takes with `capacity` bytes written: whole huge pages up
  // to the last whole one of its payload (payload_bytes, or less for the slab's last unit, which
  // ends at `bytes`), small pages past it, or small pages everywhere in a slab of small pages.
  static uint64_t FootprintIn(const Slab& s, uint64_t index, uint64_t capacity);
  // InvalidArgument for a unit size that is not whole pages or an empty list; OutOfMemory when
  // the address space cannot be reserved.
  // deferred_release_bytes: how much released memory may wait to be given back in one batch
  // (0: every release at once).
  static Result<std::unique_ptr<SlabPlacement>> Create(
      const std::vector<Slab>& slabs, size_t deferred_release_bytes = kDeferredReleaseBytes);
  ~SlabPlacement() override;
  SlabPlacement(const SlabPlacement&) = delete;
  SlabPlacement& operator=(const SlabPlacement&) = delete;

  size_t slab_count() const { return slabs_.size(); }
  std::byte* base(uint32_t slab) { return slabs_[slab].memory.data(); }
  uint64_t slab_bytes(uint32_t slab) const { return slabs_[slab].memory.size(); }
  size_t unit_bytes(uint32_t slab) const { return slabs_[slab].unit_bytes; }
  static size_t PageSize();

  // The unit's address when it fits inside its slab, else nullptr.
  std::byte* Place(UnitId id, size_t capacity) override;
  void Release(UnitId id, std::byte* data, size_t capacity) override;
  // FootprintIn of the unit's slab: the cache charges and gives back this much. (A huge page is
  // faulted in whole by the first byte written to it, and giving back part of it splits it and
  // keeps the rest resident.)
  size_t Footprint(UnitId id, size_t capacity) const override;
  // Returns the pages of [p, p + bytes) (page-aligned) to the OS.
  void Discard(std::byte* p, size_t bytes);
  // Gives back every queued release now.
  void FlushReleases();
  // Takes [p, p + bytes) out of the release queue before bytes are written there without Place
  // (a transient read): a later batch must not give those pages back under their reader.
  void Reclaim(std::byte* p, size_t bytes);

  // The default and largest release batch.
  static constexpr size_t kDeferredReleaseBytes = size_t{1} << 20;
  size_t deferred_release_bytes() const { return deferred_release_bytes_; }

 private:
  struct Region {
    AnonRegion memory;  // the slab's reserved range (page-rounded size)
    size_t unit_bytes = 0;
    Slab spec;
  };
  SlabPlacement() = default;
  void FlushLocked();

  std::mutex release_mu_;
  std::unordered_map<std::byte*, size_t> queued_;  // start -> bytes (page-rounded)
  size_t queued_bytes_ = 0;
  size_t deferred_release_bytes_ = kDeferredReleaseBytes;
  std::vector<Region> slabs_;
};

}  // namespace weir::storage
