// FileDevice: reads a file with pread(2), either through the page cache ("pread") or with
// O_DIRECT ("direct"), which bypasses the page cache so that measured read times are the
// storage's, not DRAM's. The O_DIRECT variant reads aligned requests straight into the caller's
// buffer and bounces everything else (unaligned offsets, lengths, buffers and the unaligned tail
// of the file) through aligned buffers of at most bounce_bytes, allocated per call.
//
// A batch (Read) is executed request by request on the calling thread; use UringDevice to have
// a batch in flight at once.
//
// Thread safety: ReadAt/Read may be called concurrently from any thread (positional reads).
#pragma once

#include <memory>
#include <string>

#include "storage/block_device.h"
#include "storage/unique_fd.h"

namespace weir::storage {

class FileDevice : public BlockDevice {
 public:
  struct Options {
    bool direct = false;
    // O_DIRECT alignment; 0 asks the kernel (statx) and falls back to 4096.
    size_t alignment = 0;
    // Largest bounce buffer one O_DIRECT operation uses.
    size_t bounce_bytes = size_t{1} << 20;
    // O_DIRECT only: when false, unaligned reads are refused (required_alignment() = alignment)
    // instead of being bounced, so a caller can prove it never pays for the copy.
    bool allow_unaligned = true;
  };

  static Result<std::unique_ptr<FileDevice>> Open(const std::string& path, const Options& options);

  Status ReadAt(uint64_t offset, size_t length, void* dst) override;
  Status Read(std::span<ReadRequest> requests) override;
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  size_t required_alignment() const override;
  size_t preferred_alignment() const override { return alignment_; }

 private:
  FileDevice() = default;
  Status RunPlan(class IoPlan& plan, std::span<ReadRequest> requests);

  UniqueFd fd_;
  uint64_t size_ = 0;
  std::string name_;
  bool direct_ = false;
  size_t alignment_ = 1;
  size_t bounce_bytes_ = 0;
  bool allow_unaligned_ = true;
};

// Validates an O_DIRECT alignment (power of two, 512 B to 1 MiB) and resolves 0 through statx.
Result<size_t> ResolveDirectAlignment(const std::string& path, size_t requested);

}  // namespace weir::storage
