// RecordBuffers: span mode's compact record reads (record_reader.h) with a read-ahead.
//
// A span selection (ActiveFlow's cross-layer channel groups, paper 002 §3.2) reads its group's
// kept records when the group starts, and the compute waits for them: the disk is idle while the
// group computes and the compute is idle while the records arrive. ActiveFlow hides that wait by
// preloading what the next layers will probably need from the current activations, since
// consecutive layers see similar hidden states (§3). Here the caller guesses the next group's
// selection and ReadAhead reads it, on a thread of its own, into a second buffer while the
// compute works from the first. When the group starts, Read takes the records the guess got
// right from that buffer, reads only the others (the misses), and moves each miss into the place
// of a guessed record the group does not use; the roles of the two buffers then swap. The
// compute sees one buffer with every kept record at a place Read reports, so its products are
// the same whatever was guessed.
//
// Memory: one buffer of the size given, or two with read-ahead, made at the first Read (the
// memory plan counts both: StreamPlan::record_buffer_bytes and record_ahead_bytes).
//
// Thread safety: one thread calls everything but stats(), which any thread may call.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "storage/block_device.h"
#include "storage/record_reader.h"

namespace weir::storage {

class RecordBuffers {
 public:
  struct Stats {
    RecordReader::Stats reads;        // both buffers' reads (read-ahead included)
    uint64_t ahead_bytes = 0;         // of reads.bytes_read: read ahead
    uint64_t ahead_records = 0;       // records read ahead
    uint64_t ahead_records_used = 0;  // ... that a Read then took
  };

  // `buffer_bytes`: each buffer's size (rounded up to 4096); `read_ahead`: a second buffer
  // for ReadAhead. InvalidArgument for a null device or a zero size.
  static Result<std::unique_ptr<RecordBuffers>> Create(BlockDevice* device, uint64_t buffer_bytes,
                                                       bool read_ahead);
  ~RecordBuffers();  // waits for a read-ahead in flight
  RecordBuffers(const RecordBuffers&) = delete;
  RecordBuffers& operator=(const RecordBuffers&) = delete;

  // Reads the records `slots` (ascending, distinct) of the region at device offset `base`
  // (record s at base + s * record_bytes): places[k] is where slots[k]'s record lies, at
  // data() + places[k] * record_bytes. A finished read-ahead of the same region and record size
  // supplies what it holds. False, reading nothing, when the records do not fit the buffer; the
  // device's error when a read fails (the buffer then holds unspecified bytes).
  Result<bool> Read(uint64_t base, uint64_t record_bytes, const int64_t* slots, int64_t n,
                    int32_t* places);
  // Starts reading `slots` (ascending, distinct) of a region into the buffer Read does not
  // use, for a later Read of the same region; a read-ahead still in flight is waited for and
  // dropped first. False when read-ahead is off or nothing is asked. Its failures are
  // not errors: the later Read reads what it needs itself.
  bool ReadAhead(uint64_t base, uint64_t record_bytes, std::vector<int64_t> slots);
  // Waits for a read-ahead in flight and forgets it.
  void DropAhead();

  const std::byte* data() const { return current_->data(); }
  Stats stats() const;

 private:
  RecordBuffers() = default;
  // Makes the buffer(s) and the read-ahead thread, at the first Read.
  Status Allocate();
  // Waits for the read-ahead thread to finish its job; true when it read what it was asked.
  bool WaitAhead();
  void Worker();

  BlockDevice* device_ = nullptr;
  uint64_t buffer_bytes_ = 0;
  bool read_ahead_ = false;
  std::unique_ptr<RecordReader> current_;  // what the compute reads from
  std::unique_ptr<RecordReader> spare_;    // read-ahead's, or none (owned by the thread
                                           // while a job runs)
  // The read-ahead job (guarded by mu_ while the thread may run it).
  struct Job {
    uint64_t base = 0, record_bytes = 0;
    std::vector<int64_t> slots;
  };
  Job job_;
  enum class JobState { kNone, kQueued, kRunning, kDone };
  JobState job_state_ = JobState::kNone;
  Status job_status_;  // kDone: how the read went
  bool stop_ = false;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Read's scratch.
  std::vector<int64_t> miss_slots_;
  std::vector<int64_t> misses_;  // indices into Read's slots
  std::vector<int32_t> free_places_;
  uint64_t ahead_bytes_ = 0, ahead_records_ = 0, ahead_used_ = 0;  // under mu_
};

}  // namespace weir::storage
