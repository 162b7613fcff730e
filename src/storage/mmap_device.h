// MmapDevice: maps the whole file read-only (PROT_READ, MAP_PRIVATE) and serves reads with
// memcpy. For comparison with the explicit-I/O devices: this is how llama.cpp reads weights,
// and page faults, readahead and page-cache eviction are the kernel's business, not weir's
// budget's. A file truncated while mapped raises SIGBUS; the other devices report an IoError.
//
// Thread safety: immutable after Open; ReadAt/Read may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "storage/block_device.h"

namespace weir::storage {

class MmapDevice : public BlockDevice {
 public:
  static Result<std::unique_ptr<MmapDevice>> Open(const std::string& path);
  ~MmapDevice() override;
  MmapDevice(const MmapDevice&) = delete;
  MmapDevice& operator=(const MmapDevice&) = delete;

  Status ReadAt(uint64_t offset, size_t length, void* dst) override;
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

 private:
  MmapDevice() = default;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  std::string name_;
};

}  // namespace weir::storage
