#include "storage/open_device.h"

#include "storage/file_device.h"
#include "storage/mmap_device.h"
#include "storage/storage_profile.h"
#include "storage/throttled_device.h"
#include "storage/uring_device.h"

namespace weir::storage {

std::vector<std::string> DeviceKinds() {
  return {"auto", "pread", "direct", "io_uring", "io_uring+direct", "mmap"};
}

Result<std::unique_ptr<BlockDevice>> OpenDevice(const std::string& path,
                                                const DeviceOptions& options) {
  if (options.kind == "auto") {
    // Reads that bypass the page cache first: under a memory limit the page cache is the same
    // memory as the budget. O_DIRECT fails to open on file systems without it (tmpfs), and
    // io_uring where the kernel or a sandbox refuses it.
    Status first;
    for (const char* kind : {"io_uring+direct", "direct", "pread"}) {
      DeviceOptions o = options;
      o.kind = kind;
      Result<std::unique_ptr<BlockDevice>> dev = OpenDevice(path, o);
      if (dev.ok()) return dev;
      if (first.ok()) first = dev.status();
      if (dev.status().code() == Status::Code::kNotFound) break;  // no file: no other kind helps
    }
    return first;
  }
  std::unique_ptr<BlockDevice> dev;
  const std::string& kind = options.kind;
  if (kind == "pread" || kind == "direct") {
    FileDevice::Options o;
    o.direct = kind == "direct";
    o.alignment = options.direct_alignment;
    o.bounce_bytes = options.bounce_bytes;
    o.allow_unaligned = options.allow_unaligned;
    WEIR_ASSIGN_OR_RETURN(dev, FileDevice::Open(path, o));
  } else if (kind == "io_uring" || kind == "io_uring+direct") {
    UringDevice::Options o;
    o.queue_depth = options.queue_depth;
    o.max_rings = options.max_rings;
    o.direct = kind == "io_uring+direct";
    o.alignment = options.direct_alignment;
    o.bounce_bytes = options.bounce_bytes;
    o.allow_unaligned = options.allow_unaligned;
    o.piece_bytes = options.piece_bytes;
    WEIR_ASSIGN_OR_RETURN(dev, UringDevice::Open(path, o));
  } else if (kind == "mmap") {
    WEIR_ASSIGN_OR_RETURN(dev, MmapDevice::Open(path));
  } else {
    std::string known;
    for (const std::string& k : DeviceKinds()) known += (known.empty() ? "" : ", ") + k;
    return Status::InvalidArgument(
        StrFormat("unknown device kind '%s' (known: %s)", kind.c_str(), known.c_str()));
  }
  if (!options.profile.empty()) {
    WEIR_ASSIGN_OR_RETURN(StorageProfile profile, FindStorageProfile(options.profile));
    WEIR_ASSIGN_OR_RETURN(dev, ThrottledDevice::Create(std::move(dev), profile));
  }
  return dev;
}

}  // namespace weir::storage
