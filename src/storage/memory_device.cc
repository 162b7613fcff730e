#include "storage/memory_device.h"

#include <cstring>

#include "base/check.h"

namespace weir::storage {

MemoryDevice::MemoryDevice(std::string label, std::vector<std::byte> bytes,
                           size_t required_alignment)
    : name_("memory:" + label), bytes_(std::move(bytes)), alignment_(required_alignment) {
  WEIR_CHECK(alignment_ >= 1 && (alignment_ & (alignment_ - 1)) == 0);
}

MemoryDevice::MemoryDevice(std::string label, const std::string& bytes, size_t required_alignment)
    : MemoryDevice(
          std::move(label),
          std::vector<std::byte>(reinterpret_cast<const std::byte*>(bytes.data()),
                                 reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size()),
          required_alignment) {}

Status MemoryDevice::ReadAt(uint64_t offset, size_t length, void* dst) {
  WEIR_RETURN_IF_ERROR(CheckRead(offset, length, dst));
  if (length > 0) std::memcpy(dst, bytes_.data() + offset, length);
  return Status::Ok();
}

}  // namespace weir::storage
