#include "storage/null_device.h"

#include "base/check.h"

namespace weir::storage {

NullDevice::NullDevice(std::string label, uint64_t size, size_t preferred_alignment)
    : name_("null:" + label), size_(size), alignment_(preferred_alignment) {
  WEIR_CHECK(alignment_ >= 1 && (alignment_ & (alignment_ - 1)) == 0);
}

Status NullDevice::ReadAt(uint64_t offset, size_t length, void* dst) {
  return CheckRead(offset, length, dst);
}

}  // namespace weir::storage
