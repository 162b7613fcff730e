// UringDevice: reads a file through io_uring (liburing). A batch (Read) is split into kernel
// operations (see io_plan.h) that are kept in flight up to queue_depth at a time on one ring:
// submitted together, reaped as they complete, and resubmitted for the remainder after a short
// read or an -EAGAIN/-EINTR completion. Any other completion error becomes an IoError for that
// request only. With `direct`, the file is opened O_DIRECT with the same bounce rules as
// FileDevice. This is what ActiveFlow (§6) uses to read many small active-weight extents at once.
//
// Rings are not thread-safe, so the device keeps a small pool: a call takes a free ring (or
// creates one, up to max_rings) for the whole batch and gives it back afterwards; callers beyond
// max_rings wait for a ring.
//
// Thread safety: ReadAt/Read may be called concurrently from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "storage/block_device.h"
#include "storage/unique_fd.h"

namespace weir::storage {

class UringDevice : public BlockDevice {
 public:
  struct Options {
    uint32_t queue_depth = 32;  // operations in flight per batch (and ring size), 1..4096
    uint32_t max_rings = 4;     // rings shared by concurrent callers
    bool direct = false;        // open with O_DIRECT
    size_t alignment = 0;       // O_DIRECT alignment; 0 asks the kernel, falls back to 4096
    size_t bounce_bytes = size_t{1} << 20;
    bool allow_unaligned = true;
    // Largest operation a read is cut into (rounded down to the alignment): one large read (a
    // 99 MB expert) becomes pieces kept in flight together, up to queue_depth. A Mixtral 8x7B
    // expert read whole in a 1.6 GiB cgroup went from 1.5 to 1.7-1.8 GB/s with 1 MiB pieces
    // (docs/storage.md).
    size_t piece_bytes = size_t{1} << 20;
    // Tests only (null in production): sees the result of every completion, numbered from 0 in
    // the order this device reaps them, and returns the result to act on instead: a -errno, or
    // a byte count no larger than the real one (a short read). This is how the fault tests make
    // the kernel's completions fail (docs/reliability.md).
    std::function<int(uint64_t completion, int res)> completion_fault;
  };

  // Unsupported when the kernel refuses io_uring (old kernel, seccomp, io_uring_disabled).
  static Result<std::unique_ptr<UringDevice>> Open(const std::string& path, const Options& options);
  ~UringDevice() override;

  Status ReadAt(uint64_t offset, size_t length, void* dst) override;
  Status Read(std::span<ReadRequest> requests) override;
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  size_t required_alignment() const override;
  size_t preferred_alignment() const override { return alignment_; }
  uint32_t queue_depth() const { return queue_depth_; }

 private:
  struct Ring;
  UringDevice() = default;
  Result<Ring*> AcquireRing();
  void ReleaseRing(Ring* ring, bool broken);
  // Runs the plan on `ring`. Sets *broken when the ring must not be reused.
  Status RunPlan(Ring* ring, class IoPlan& plan, std::span<ReadRequest> requests, bool* broken);

  UniqueFd fd_;
  uint64_t size_ = 0;
  std::string name_;
  uint32_t queue_depth_ = 32;
  uint32_t max_rings_ = 4;
  bool direct_ = false;
  size_t alignment_ = 1;
  size_t bounce_bytes_ = 0;
  size_t piece_bytes_ = size_t{1} << 20;
  bool allow_unaligned_ = true;
  std::function<int(uint64_t, int)> completion_fault_;  // Options::completion_fault
  std::atomic<uint64_t> completions_{0};

  std::mutex mu_;
  std::condition_variable ring_free_;
  std::vector<std::unique_ptr<Ring>> rings_;  // all rings (owned)
  std::vector<Ring*> free_rings_;
};

}  // namespace weir::storage
