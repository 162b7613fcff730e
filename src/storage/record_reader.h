// RecordReader: reads a chosen subset of a region's equal-size records into one compact buffer,
// record k of the subset at data() + k * record_bytes, with few large reads and no cache.
//
// This is how a span selection (ActiveFlow's cross-layer channel groups, paper 002 §3.2) reads
// the kept input channels of a grouped column pack: each record is a channel's rows for several
// layers (tens of KiB), a selection keeps a few hundred of them scattered over the region, and
// the selection changes every token. Going through the block cache cost more than the bytes:
// every 4 KiB block is a cache entry (lookup, pin, admission) and every page read into a fresh
// slab place is faulted in, zeroed by the kernel, then given back on eviction (a profile of the
// 1.1B at dip:0.5 span=4 had ~30 % of its cycles in page faults, zeroing and unmapping). Here
// the buffer is allocated and touched once, and reused for every Read.
//
// A Read plans its device reads from the slots: consecutive slots form runs; each run's byte
// range is widened to the device's preferred alignment (so O_DIRECT reads go straight into the
// buffer); ranges closer than `merge_gap` bytes become one read (the gap is read and dropped:
// a second small read costs more than a few pages; when the merged reads would not fit the
// buffer, the runs are read unmerged). The reads land one after another in the
// buffer, all in flight at once (BlockDevice::Read), and the records are then moved down to
// their compact places in ascending order (each record's place is at or below where it landed,
// so the moves never overwrite a record not yet moved).
//
// Thread safety: one thread calls Read; stats() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "storage/block_device.h"

namespace weir::storage {

class RecordReader {
 public:
  struct Stats {
    uint64_t bytes_read = 0;  // bytes asked of the device (records, alignment and gaps)
    uint64_t reads = 0;       // device reads
    uint64_t records = 0;     // records delivered
    double seconds = 0;       // wall time of the reads (the caller waits for them)
  };

  // `capacity`: bytes of the buffer (rounded up to 4096); a Read whose reads need more is
  // refused with OutOfMemory before anything is read. InvalidArgument for a null device or a
  // zero capacity; OutOfMemory when the buffer cannot be allocated.
  static Result<std::unique_ptr<RecordReader>> Create(BlockDevice* device, uint64_t capacity,
                                                      uint64_t merge_gap = kDefaultMergeGap);
  // 0: only records that touch (or share a page) are read together. Earlier runs had a 64 KiB
  // gap faster than 16 KiB (while the records shared the disk with the reads ahead); since the
  // reads ahead pause for the records (storage/prefetcher.h Pause), gaps only add bytes: 1.1B
  // Q4_0, dip:0.5 span=4 (25 KiB records, a quarter kept), 296 MiB cgroup, quiet, two rounds:
  // gap 0 read 216 MB a token at 4.88 / 5.18 tok/s, 16 KiB 217 MB 3.75 / 5.01, 32 KiB 231 MB
  // 3.87 / 5.08, 64 KiB 255 MB 3.33 / 4.51 (docs/streaming.md 3.7).
  static constexpr uint64_t kDefaultMergeGap = 0;

  // slots: ascending, distinct; record s lies at device offset base + s * record_bytes.
  // Reads the n records into data() (record k at data() + k * record_bytes). InvalidArgument for
  // slots out of order or a record outside the device, OutOfMemory (nothing read) when even the
  // unmerged reads exceed the buffer, the device's error otherwise (the buffer then holds
  // unspecified bytes).
  Status Read(uint64_t base, uint64_t record_bytes, const int64_t* slots, int64_t n);

  const std::byte* data() const { return buffer_.data<std::byte>(); }
  std::byte* mutable_data() { return buffer_.data<std::byte>(); }
  uint64_t capacity() const { return buffer_.size(); }
  Stats stats() const;

 private:
  struct Span {
    uint64_t begin = 0, end = 0;  // device bytes read
  };
  RecordReader() = default;
  // Appends the reads of the slots to *reads; returns their total bytes.
  uint64_t Plan(uint64_t base, uint64_t record_bytes, const int64_t* slots, int64_t n,
                uint64_t merge_gap, std::vector<Span>* reads) const;

  BlockDevice* device_ = nullptr;
  uint64_t merge_gap_ = 0;
  uint64_t align_ = 1;
  AlignedBuffer buffer_;
  std::vector<Span> reads_;
  std::vector<ReadRequest> requests_;
  mutable std::mutex mu_;
  Stats stats_;
};

}  // namespace weir::storage
