#include "storage/mmap_device.h"

#include <sys/mman.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "storage/unique_fd.h"

namespace weir::storage {

Result<std::unique_ptr<MmapDevice>> MmapDevice::Open(const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(OpenedFile file, OpenReadOnly(path, /*direct=*/false));
  std::unique_ptr<MmapDevice> dev(new MmapDevice());
  dev->name_ = "mmap:" + path;
  dev->size_ = file.size;
  if (file.size > 0) {
    void* p = ::mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, file.fd.get(), 0);
    if (p == MAP_FAILED) {
      return Status::IoError(StrFormat("%s: cannot mmap %" PRIu64 " bytes: %s", path.c_str(),
                                       file.size, std::strerror(errno)));
    }
    dev->data_ = static_cast<const std::byte*>(p);
  }
  return dev;  // the mapping outlives the descriptor
}

MmapDevice::~MmapDevice() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

Status MmapDevice::ReadAt(uint64_t offset, size_t length, void* dst) {
  WEIR_RETURN_IF_ERROR(CheckRead(offset, length, dst));
  if (length > 0) std::memcpy(dst, data_ + offset, length);
  return Status::Ok();
}

}  // namespace weir::storage
