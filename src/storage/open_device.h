// OpenDevice: the one place that turns a device choice (a flag such as `--device io_uring
// --queue-depth 64 --profile ufs4`) into a BlockDevice. Tools call this; the engine only ever
// sees the BlockDevice interface.
//
// Kinds:  "pread"            pread(2) through the page cache            (FileDevice)
//         "direct"           pread(2) with O_DIRECT, aligned bounce     (FileDevice)
//         "io_uring"         io_uring batches through the page cache    (UringDevice)
//         "io_uring+direct"  io_uring batches with O_DIRECT             (UringDevice)
//         "mmap"             read-only mapping + memcpy, for comparison (MmapDevice)
// With a non-empty `profile`, the device is wrapped in a ThrottledDevice of that profile.
//
// Thread safety: a free function; the devices it returns are thread-safe (block_device.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "storage/block_device.h"

namespace weir::storage {

struct DeviceOptions {
  // pread, direct, io_uring, io_uring+direct, mmap; or auto: the first of io_uring+direct,
  // direct, pread that opens (the device's name() says which).
  std::string kind = "pread";
  uint32_t queue_depth = 32;              // io_uring: operations in flight per batch
  uint32_t max_rings = 4;                 // io_uring: rings shared by concurrent callers
  size_t direct_alignment = 0;            // O_DIRECT: 0 asks the kernel, else a power of two
  size_t bounce_bytes = size_t{1} << 20;  // O_DIRECT: largest bounce buffer per operation
  bool allow_unaligned = true;            // O_DIRECT: false refuses unaligned reads instead
  size_t piece_bytes = size_t{1} << 20;   // io_uring: largest operation a read is cut into
  std::string profile;                    // "" or a storage profile name (storage_profile.h)
};

Result<std::unique_ptr<BlockDevice>> OpenDevice(const std::string& path,
                                                const DeviceOptions& options);

// The kinds OpenDevice accepts, for --help texts.
std::vector<std::string> DeviceKinds();

}  // namespace weir::storage
