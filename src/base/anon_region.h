// AnonRegion: an owning anonymous memory mapping for large, long-lived arrays (a model's
// weights copied out of its file, a streaming cache's slabs). The base is 2 MiB aligned and the
// kernel is asked for transparent huge pages, or for none (madvise, best effort). A decode step
// streams every weight byte once: on 4 KiB pages llama-1b Q4_0 decoded about a sixth slower
// (docs/performance.md, "Weights in memory").
//
// Thread safety: none for the object; the bytes may be read from any thread once written.
#pragma once

#include <cstddef>
#include <utility>

#include "base/status.h"

namespace weir {

class AnonRegion {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  AnonRegion() = default;
  ~AnonRegion();
  AnonRegion(AnonRegion&& o) noexcept
      : mapping_(std::exchange(o.mapping_, nullptr)),
        reserved_(std::exchange(o.reserved_, 0)),
        base_(std::exchange(o.base_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  AnonRegion& operator=(AnonRegion&& o) noexcept;
  AnonRegion(const AnonRegion&) = delete;
  AnonRegion& operator=(const AnonRegion&) = delete;

  // Reserves `bytes` (> 0) of zero-filled memory. Pages are committed when first written; with
  // huge_pages, whole 2 MiB pages where they lie wholly inside `bytes`.
  static Result<AnonRegion> Create(size_t bytes, bool huge_pages = true);

  std::byte* data() { return base_; }
  const std::byte* data() const { return base_; }
  size_t size() const { return size_; }

 private:
  void* mapping_ = nullptr;  // what mmap returned (base_ is inside it, aligned)
  size_t reserved_ = 0;
  std::byte* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace weir
