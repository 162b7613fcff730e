#include "base/anon_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace weir {

AnonRegion::~AnonRegion() {
  if (mapping_) ::munmap(mapping_, reserved_);
}

AnonRegion& AnonRegion::operator=(AnonRegion&& o) noexcept {
  if (this != &o) {
    if (mapping_) ::munmap(mapping_, reserved_);
    mapping_ = std::exchange(o.mapping_, nullptr);
    reserved_ = std::exchange(o.reserved_, 0);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Result<AnonRegion> AnonRegion::Create(size_t bytes, bool huge_pages) {
  if (bytes == 0) return Status::InvalidArgument("anonymous region of 0 bytes");
  // Whole huge pages, plus one of slack so that the base can be moved up to a 2 MiB boundary.
  if (bytes > SIZE_MAX - 2 * kHugePage) {
    return Status::OutOfMemory(StrFormat("cannot map %zu bytes: too large", bytes));
  }
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  const size_t reserve = rounded + kHugePage;
  // MAP_NORESERVE: only address space is reserved here; pages are committed as they are written
  // (a streaming cache's slabs span whole packs of which the budget holds a part).
  void* raw = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    return Status::OutOfMemory(
        StrFormat("cannot reserve %zu bytes of address space: %s", bytes, std::strerror(errno)));
  }
  AnonRegion r;
  r.mapping_ = raw;
  r.reserved_ = reserve;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(raw);
  r.base_ = static_cast<std::byte*>(raw) + (kHugePage - addr % kHugePage) % kHugePage;
  r.size_ = bytes;
  // Best effort: THP may be off, or on for every mapping (then NOHUGEPAGE keeps small ones small).
  // Only the requested pages are advised: a last, partial 2 MiB stays on small pages, so that
  // touching it commits what is touched, not a whole huge page past `bytes` (a streaming cache
  // has one such tail per slab; measured: peak RSS of a llama-1b Q4_0 pack run 616 MiB with the
  // tails on small pages, 669 MiB with them advised).
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  (void)::madvise(r.base_, (bytes + page - 1) / page * page,
                  huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return r;
}

}  // namespace weir
