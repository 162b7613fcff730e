#include "storage/io_plan.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>

namespace weir::storage {

namespace {
uint64_t RoundDown(uint64_t x, uint64_t a) { return x / a * a; }
uint64_t RoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
}  // namespace

IoPlan::IoPlan(size_t alignment, size_t bounce_bytes, size_t max_op_bytes)
    : alignment_(alignment <= 1 ? 1 : alignment),
      bounce_bytes_(std::max<size_t>(alignment_, RoundUp(bounce_bytes, alignment_))),
      max_op_bytes_(std::max<size_t>(
          alignment_, RoundDown(std::min(std::max<size_t>(max_op_bytes, 1), kMaxOpBytes),
                                alignment_))) {}

Status IoPlan::Add(size_t request_index, uint64_t offset, size_t length, void* dst) {
  auto* out = static_cast<std::byte*>(dst);
  if (alignment_ == 1) {
    for (size_t pos = 0; pos < length; pos += max_op_bytes_) {
      IoOp op;
      op.request = request_index;
      op.file_offset = offset + pos;
      op.buf = out + pos;
      op.length = std::min(max_op_bytes_, length - pos);
      op.needed = op.length;
      ops_.push_back(op);
    }
    return Status::Ok();
  }
  const uint64_t a = alignment_;
  size_t pos = 0;  // bytes of the request covered so far
  // Zero-copy part: aligned offset and buffer, whole aligned blocks.
  if (offset % a == 0 && reinterpret_cast<uintptr_t>(out) % a == 0) {
    const size_t direct = static_cast<size_t>(RoundDown(length, a));
    const size_t max_op = max_op_bytes_;
    for (; pos < direct;) {
      IoOp op;
      op.request = request_index;
      op.file_offset = offset + pos;
      op.buf = out + pos;
      op.length = std::min(max_op, direct - pos);
      op.needed = op.length;
      ops_.push_back(op);
      pos += op.length;
    }
  }
  // Bounce part: the aligned file range around the rest, in chunks of bounce_bytes_.
  while (pos < length) {
    const uint64_t want_begin = offset + pos;
    const uint64_t file_begin = RoundDown(want_begin, a);
    const uint64_t want_end = offset + length;
    const uint64_t file_end = std::min<uint64_t>(file_begin + bounce_bytes_, RoundUp(want_end, a));
    const uint64_t take_end = std::min(file_end, want_end);
    AlignedBuffer buffer;
    const size_t span = static_cast<size_t>(file_end - file_begin);
    if (!buffer.Reset(span, a)) {
      return Status::OutOfMemory(
          StrFormat("cannot allocate a %zu-byte O_DIRECT bounce buffer", span));
    }
    IoOp op;
    op.request = request_index;
    op.file_offset = file_begin;
    op.buf = buffer.data();
    op.length = span;
    op.copy_to = out + pos;
    op.copy_from = static_cast<size_t>(want_begin - file_begin);
    op.copy_len = static_cast<size_t>(take_end - want_begin);
    op.needed = op.copy_from + op.copy_len;
    ops_.push_back(op);
    bounce_.push_back(std::move(buffer));
    pos += op.copy_len;
  }
  return Status::Ok();
}

Result<bool> IoPlan::Progress(IoOp& op, size_t n, const std::string& device) const {
  if (n == 0) {
    if (op.done >= op.needed) return true;
    return Status::IoError(StrFormat("%s: unexpected end of file at offset %" PRIu64
                                     ": %zu of %zu bytes arrived (was the "
                                     "file truncated?)",
                                     device.c_str(), op.file_offset + op.done, op.done, op.needed));
  }
  op.done += n;
  if (op.done >= op.needed) return true;
  if (alignment_ > 1 && op.done % alignment_ != 0) {
    return Status::IoError(StrFormat("%s: O_DIRECT read at offset %" PRIu64
                                     " stopped after %zu of %zu bytes, not on a %zu-byte "
                                     "boundary",
                                     device.c_str(), op.file_offset, op.done, op.needed,
                                     alignment_));
  }
  return false;
}

void IoPlan::CopyOut(const IoOp& op) {
  if (op.copy_to != nullptr && op.copy_len > 0) {
    std::memcpy(op.copy_to, op.buf + op.copy_from, op.copy_len);
  }
}

}  // namespace weir::storage
