#include "storage/block_device.h"

#include <cinttypes>

#include "base/checked_math.h"

namespace weir::storage {

Status BlockDevice::Read(std::span<ReadRequest> requests) {
  for (ReadRequest& r : requests) r.status = ReadAt(r.offset, r.length, r.dst);
  return FirstError(requests);
}

Status BlockDevice::CheckRead(uint64_t offset, size_t length, const void* dst) const {
  if (!RangeInside(offset, length, size())) {
    return Status::InvalidArgument(StrFormat("%s: read of %zu bytes at offset %" PRIu64
                                             " exceeds the device size %" PRIu64,
                                             name().c_str(), length, offset, size()));
  }
  if (length > 0 && dst == nullptr) {
    return Status::InvalidArgument(StrFormat("%s: read of %zu bytes at offset %" PRIu64
                                             " into a null buffer",
                                             name().c_str(), length, offset));
  }
  const size_t align = required_alignment();
  if (align > 1 && length > 0) {
    const bool ends_at_size = offset + length == size();
    const uintptr_t addr = reinterpret_cast<uintptr_t>(dst);
    if (offset % align != 0 || addr % align != 0 || (length % align != 0 && !ends_at_size)) {
      return Status::InvalidArgument(
          StrFormat("%s: read of %zu bytes at offset %" PRIu64
                    " into %p is not aligned to %zu bytes "
                    "(this device requires aligned offset, length and buffer)",
                    name().c_str(), length, offset, dst, align));
    }
  }
  return Status::Ok();
}

Status FirstError(std::span<const ReadRequest> requests) {
  for (const ReadRequest& r : requests) {
    if (!r.status.ok()) return r.status;
  }
  return Status::Ok();
}

}  // namespace weir::storage
