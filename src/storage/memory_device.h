// MemoryDevice: a BlockDevice over bytes held in memory, for tests and for packing pipelines
// that build a file image before writing it. Optionally demands an alignment so that tests can
// check that callers honour required_alignment().
//
// Thread safety: immutable after construction; ReadAt/Read may be called from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "storage/block_device.h"

namespace weir::storage {

class MemoryDevice : public BlockDevice {
 public:
  // `label` appears in messages as "memory:<label>". required_alignment must be 1 or a power of
  // two (a bug otherwise: this is a test tool).
  MemoryDevice(std::string label, std::vector<std::byte> bytes, size_t required_alignment = 1);
  MemoryDevice(std::string label, const std::string& bytes, size_t required_alignment = 1);

  Status ReadAt(uint64_t offset, size_t length, void* dst) override;
  uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const override { return name_; }
  size_t required_alignment() const override { return alignment_; }
  size_t preferred_alignment() const override { return alignment_; }

  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  std::string name_;
  std::vector<std::byte> bytes_;
  size_t alignment_;
};

}  // namespace weir::storage
