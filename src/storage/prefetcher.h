// Prefetcher: a dedicated I/O thread that loads weight units into the WeightCache ahead of the
// compute thread (M2Cache's layer-wise preloading: the whole next layers; ActiveFlow's
// cross-layer preloading: the predicted active units of the next layers).
//
// The compute thread Enqueue()s reads (device, offset, length -> unit id, partition). Enqueue
// reserves the unit's cache entry at once (so memory is committed up front, and a unit already
// present or queued is not read twice) and returns without doing I/O. The I/O thread takes the
// queue in order, in batches of consecutive jobs on the same device, and issues each batch with
// one BlockDevice::Read (all in flight at once on io_uring); jobs that continue each other on
// the device and in memory are merged into one read (up to 8 MiB), since storage is much
// faster in large reads. A completed unit stays pinned by
// the prefetcher until the compute thread claims it with Wait()/Get() or drops it with
// Cancel(), so a prefetched unit cannot be evicted before its use.
//
//   Wait(id)  the future: blocks until the unit's read completes; the read's error, if any,
//             comes back as the Status (also when the read failed before Wait was called: a
//             failure is kept until claimed or cancelled). NotFound when the unit is neither
//             cached nor queued (never enqueued, cancelled, or evicted after an earlier claim).
//   Get(read) the on-demand path: a cached unit is returned, a queued one is taken off the
//             queue and read on the calling thread, an in-flight one is waited for, and a
//             missing one (or one whose prefetch failed: one retry) is read on the calling
//             thread. One cache access either way, except when the cache has no room because
//             cancelled reads still in flight pin the partition: Get then waits for those
//             reads to end (their entries unpinned) and tries again, a second access, rather
//             than fail with OutOfMemory while the I/O thread lags behind the compute thread.
//   Cancel    stale jobs (mispredicted units, a layer that is done): a queued job is dropped and
//             its reservation released; an in-flight read completes but is not held (its entry
//             stays pinned until its batch ends: the device is writing into it); a held unit
//             is released (it stays cached, evictable).
//   Shutdown  cancels the queue, lets the in-flight batch finish, joins the thread (also done by
//             the destructor). The cache must outlive the prefetcher.
//
// Thread safety: every method may be called from any thread. Lock order: the prefetcher's
// mutex, then the cache's; the cache never calls back. Get and Wait may block until the I/O
// thread's batch in flight ends (for an in-flight unit, or for the room of cancelled reads);
// they hold no lock while blocked, and a batch ends without any call from the compute thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "base/status.h"
#include "storage/block_device.h"
#include "storage/weight_cache.h"

namespace weir::storage {

// Where a unit lives on storage and where it goes in the cache.
struct UnitRead {
  UnitId id = 0;
  uint32_t partition = 0;
  BlockDevice* device = nullptr;  // not owned; must outlive the read
  uint64_t offset = 0;
  size_t length = 0;
};

class Prefetcher {
 public:
  struct Options {
    size_t max_batch = 64;  // jobs per BlockDevice::Read
    // Bytes per BlockDevice::Read: a batch ends before the job that would pass this (a batch
    // has at least one job). 0 = no limit. Small units (4 KiB column blocks) need many jobs per
    // batch to keep enough reads in flight; large ones (2 MiB bundle blocks) few.
    uint64_t max_batch_bytes = 0;
  };
  struct Stats {
    uint64_t enqueued = 0;    // jobs queued
    uint64_t completed = 0;   // jobs whose read succeeded (on the I/O thread or stolen by Get)
    uint64_t failed = 0;      // jobs whose read failed
    uint64_t cancelled = 0;   // queued jobs dropped by Cancel/CancelAll/Shutdown
    uint64_t stolen = 0;      // queued jobs Get read on the calling thread
    uint64_t on_demand = 0;   // units Get read because they were neither cached nor queued
    uint64_t batches = 0;     // BlockDevice::Read calls by the I/O thread
    uint64_t bytes_read = 0;  // bytes asked of devices (after rounding up to their alignment)
    uint64_t reads = 0;       // device reads those bytes took (merged neighbours count once)
    uint64_t bytes_prefetched = 0;  // of bytes_read: by the I/O thread, ahead of use
    uint64_t bytes_on_demand = 0;   // of bytes_read: by Get on the calling thread
    double read_seconds = 0;        // wall time inside device reads, I/O thread and Get together
  };

  // Starts the I/O thread. InvalidArgument for a null cache or max_batch == 0.
  static Result<std::unique_ptr<Prefetcher>> Create(WeightCache* cache, const Options& options);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Queues a read unless the unit is present or queued already (then Ok, nothing to do).
  // InvalidArgument for a read outside the device; OutOfMemory when the cache cannot reserve
  // it (the unit can still be read on demand into a transient buffer); an error after Shutdown.
  Status Enqueue(const UnitRead& read);

  Result<CacheHandle> Wait(UnitId id);
  Result<CacheHandle> Get(const UnitRead& read);

  // True when something was cancelled or released for `id`.
  bool Cancel(UnitId id);
  // Cancels every queued job and releases every held unit; returns how many.
  size_t CancelAll();
  // Waits until no read is in flight (after CancelAll: their units are then released, so
  // nothing the I/O thread pinned is left).
  void WaitIdle();
  void Shutdown();

  // While paused (Pause() calls outnumber Resume() calls) the I/O thread starts no new batch: a
  // read that must have the device to itself (a span's records, which the compute is waiting
  // for) does not share it with reads ahead. The batch in flight finishes; Get() still reads a
  // queued unit on the caller; Wait() for a queued unit waits for Resume().
  void Pause();
  void Resume();

  Stats stats() const;

 private:
  struct Job {
    UnitRead read;
    CacheHandle handle;  // the loader handle of the reservation
    bool claimed = false;
  };
  struct InFlight {
    uint32_t partition = 0;
    bool drop = false;  // do not hold when done (claimed or cancelled)
  };

  Prefetcher(WeightCache* cache, const Options& options);
  void Loop();
  // Reads `read` into the loader handle `h` (rounding the length up to the device's preferred
  // alignment when the entry has room) and publishes or aborts it. Returns the read's Status.
  Status Load(const UnitRead& read, CacheHandle& h, bool count_bytes);
  static Status CheckRead(const UnitRead& read);
  // After an OutOfMemory from the cache: when reads in flight that will not be held (cancelled
  // or claimed) pin entries of `partition`, waits until their batch has ended and returns true
  // (their room is back unless someone else pins them); false at once when there are none, so
  // that a full cache is still reported promptly. Takes mu_; call without it.
  bool WaitForDroppedReads(uint32_t partition);

  WeightCache* cache_;
  Options options_;
  std::mutex shutdown_mu_;  // serializes Shutdown calls (the join)
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;  // signalled when a batch ends (in_flight_ becomes empty)
  std::list<Job> queue_;
  std::unordered_map<UnitId, std::list<Job>::iterator> queued_;
  std::unordered_map<UnitId, InFlight> in_flight_;  // the I/O thread's batch
  std::unordered_map<UnitId, CacheHandle> held_;    // completed, not yet claimed
  std::unordered_map<UnitId, Status> failed_;       // failed, not yet claimed
  bool stop_ = false;
  int paused_ = 0;  // Pause() calls not yet resumed
  Stats stats_;
  std::thread thread_;
};

// The read length Load uses: `length` rounded up to the device's preferred alignment when the
// offset and buffer are aligned, the rounded range lies inside the device and fits `capacity`;
// otherwise `length`. Lets O_DIRECT read straight into cache entries.
size_t RoundedReadLength(const BlockDevice& device, uint64_t offset, size_t length, const void* dst,
                         size_t capacity);

}  // namespace weir::storage
