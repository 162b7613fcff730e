// IoPlan: turns a batch of reads into the operations a kernel interface (pread or io_uring)
// executes, so both file devices share one set of rules:
//   * buffered: ops read straight into the caller's buffer, at most kMaxOpBytes each;
//   * O_DIRECT (alignment > 1): a read whose offset and buffer are aligned goes straight into
//     the caller's buffer for its aligned part; everything else (unaligned head, unaligned
//     buffer, the unaligned tail of a read or of the file) goes through aligned bounce buffers
//     of at most bounce_bytes each and is copied out afterwards.
// Progress() applies the short-read rules to one op after the kernel answered.
//
// Thread safety: a plan belongs to one Read call on one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"

namespace weir::storage {

// Largest read handed to the kernel at once (pread and io_uring cap a single read near 2 GiB).
inline constexpr size_t kMaxOpBytes = size_t{1} << 30;

struct IoOp {
  size_t request = 0;        // index of the ReadRequest this op serves
  uint64_t file_offset = 0;  // where the kernel reads (aligned for O_DIRECT)
  std::byte* buf = nullptr;  // where the kernel writes: the caller's buffer or a bounce buffer
  size_t length = 0;         // bytes asked of the kernel (aligned for O_DIRECT)
  size_t needed = 0;         // complete once this many arrived (< length only past end of file)
  size_t done = 0;           // bytes arrived so far
  // Bounce ops: once complete, buf[copy_from, copy_from + copy_len) goes to copy_to.
  std::byte* copy_to = nullptr;
  size_t copy_from = 0;
  size_t copy_len = 0;
};

class IoPlan {
 public:
  // alignment <= 1: buffered I/O. Otherwise a power of two; bounce_bytes is rounded up to it.
  // max_op_bytes caps each op (rounded down to the alignment, at most kMaxOpBytes): a large read
  // cut into pieces that a queue keeps in flight together.
  IoPlan(size_t alignment, size_t bounce_bytes, size_t max_op_bytes = kMaxOpBytes);

  // Adds the ops of one request (already checked to lie inside the file).
  Status Add(size_t request_index, uint64_t offset, size_t length, void* dst);

  std::vector<IoOp>& ops() { return ops_; }

  // Applies `n` bytes returned by the kernel (0 = end of file) to `op`. Returns true when the op
  // is complete, false when the remainder must be read again, or an IoError naming `device`.
  Result<bool> Progress(IoOp& op, size_t n, const std::string& device) const;

  // Copies a completed bounce op to the caller's buffer (no-op for direct ops).
  static void CopyOut(const IoOp& op);

 private:
  size_t alignment_;
  size_t bounce_bytes_;
  size_t max_op_bytes_;
  std::vector<IoOp> ops_;
  std::vector<AlignedBuffer> bounce_;
};

}  // namespace weir::storage
