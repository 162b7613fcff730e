// BlockDevice: the seam between weir and whatever holds the weights (a file read with pread,
// io_uring or O_DIRECT, a mapping, bytes in memory, or a wrapper that throttles or injects
// faults). Everything above this seam (cache, prefetcher, engine) reads through it, so the
// storage can be swapped, emulated or broken on purpose without touching the engine.
//
// Contract of every implementation:
//   * A read of `length` bytes at `offset` must lie inside [0, size()); otherwise the device
//     returns InvalidArgument naming the device, the offset, the length and the size. length 0
//     is a no-op. Devices never write to the underlying storage (files are opened O_RDONLY).
//   * Ok means all `length` bytes were delivered into dst; any other Status means dst holds
//     unspecified bytes that must not be used (a short read is an IoError, never a silent Ok).
//   * required_alignment() (1 = none): offset, length and the dst address must be multiples of
//     it, except that a read may end exactly at size() with an unaligned length. Every device in
//     this module accepts unaligned reads unless configured otherwise (the O_DIRECT devices bounce
//     them through aligned buffers); preferred_alignment() says what avoids that copy.
//   * The file behind a device is assumed not to change while the device is open.
//
// Thread safety: every implementation in src/storage/ accepts concurrent ReadAt/Read calls from
// any number of threads (the cache's I/O thread and the compute thread read at the same time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace weir::storage {

// One read of a batch. `status` is an output: Read() sets it for every request.
struct ReadRequest {
  uint64_t offset = 0;
  size_t length = 0;
  void* dst = nullptr;
  Status status;
};

class BlockDevice {
 public:
  virtual ~BlockDevice() = default;

  // Reads [offset, offset + length) into dst (see the contract above).
  virtual Status ReadAt(uint64_t offset, size_t length, void* dst) = 0;

  // Reads every request; implementations may have all of them in flight at once (io_uring).
  // Sets each request's status and returns Ok when all succeeded, else the first failure in
  // request order. Requests fail independently: one bad request does not spoil the others.
  // The default issues ReadAt one request at a time.
  virtual Status Read(std::span<ReadRequest> requests);

  // Bytes readable from the device.
  virtual uint64_t size() const = 0;
  // "pread:/path/model.weir", "memory:test", "throttled(ufs4):direct:/path": for messages.
  virtual const std::string& name() const = 0;

  virtual size_t required_alignment() const { return 1; }
  virtual size_t preferred_alignment() const { return 1; }

 protected:
  // Checks a read against the contract: in range (overflow-safe), dst set, alignment honoured.
  Status CheckRead(uint64_t offset, size_t length, const void* dst) const;
};

// Status of the first failed request in order, or Ok.
Status FirstError(std::span<const ReadRequest> requests);

}  // namespace weir::storage
