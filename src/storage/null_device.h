// NullDevice: a BlockDevice of a given size whose reads succeed without delivering any bytes
// (dst is left as it was). It stands in for a model's file when only the *traffic* matters:
// `weir sim` replays a trace of a streamed run through the engine's own cache and reads
// (model/stream_replay.h), where no arithmetic uses the bytes. Its preferred alignment is a
// parameter because read lengths are rounded up to it (Prefetcher's RoundedReadLength), so a
// replay must use the alignment of the device the run read from to count the same bytes.
//
// Thread safety: immutable; ReadAt/Read may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "storage/block_device.h"

namespace weir::storage {

class NullDevice : public BlockDevice {
 public:
  // `label` appears in messages as "null:<label>"; preferred_alignment is 1 or a power of two.
  NullDevice(std::string label, uint64_t size, size_t preferred_alignment = 1);

  Status ReadAt(uint64_t offset, size_t length, void* dst) override;
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  size_t preferred_alignment() const override { return alignment_; }

 private:
  std::string name_;
  uint64_t size_;
  size_t alignment_;
};

}  // namespace weir::storage
