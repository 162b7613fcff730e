// WeightCache: the DRAM cache of weight units (neuron bundles, column extents) streamed from a
// BlockDevice, under a hard byte budget.
//
// What it guarantees:
//   * Budget. Every entry is charged the bytes it really costs: its payload rounded up to the
//     cache alignment, the allocator's header, the entry record, its share of the hash index
//     (an upper bound: 8 slots) and the eviction policy's per-entry node (EntryCharge()). The
//     sum of charges never exceeds the budget, per partition and in total, after any operation.
//     What a policy keeps apart from entries (LFU counts, Belady's trace) is reported in
//     CacheStats and is the caller's to budget, as is the index's minimal table (1 KiB).
//   * Pins. Lookup/Acquire return a move-only CacheHandle that pins its entry; a pinned entry
//     is never evicted or freed, so a kernel reading a handle's data() is always safe. The
//     handle's destructor unpins.
//   * Full cache. When room cannot be made because the rest of the partition is pinned (or the
//     policy refuses, see ATU), the reservation fails with OutOfMemory and a message saying what
//     is pinned; nothing is overcommitted. The caller then reads the unit into its own transient
//     buffer (which it budgets as I/O buffer memory) and uses it once. That is the documented
//     choice: the cache never allocates outside its budget.
//   * Loading. A missing unit is reserved (Acquire on a miss, or Reserve for a prefetch): the
//     entry exists, invisible to eviction, and the returned *loader* handle fills mutable_data()
//     and calls Publish() (or Abort(status) when the read failed). Anyone else who asks for the
//     unit meanwhile gets a pinned handle whose Wait() blocks until Publish (Ok) or Abort (the
//     loader's Status). So an entry doubles as the future of its read, and the same unit is
//     never read twice at once.
//   * Partitions. The budget can be split across partitions (e.g. one per streamed layer):
//     partition p gets floor(budget * w_p / sum(w)) and evicts only its own units. All weights
//     equal = DIP's uniform split; weights = streamed bytes per layer = proportional.
//   * Accesses. Lookup and Acquire count as one access each (stats, policy, recorded trace);
//     Reserve (prefetch) and Contains do not.
//   * Run-time budget. SetBudget() shrinks (evicting unpinned units) or grows at any time.
//   * Placement. By default each entry's bytes are allocated (aligned_alloc) and freed with it.
//     With a UnitPlacement the caller says where a unit's bytes live instead (the streaming
//     engine gives every unit a fixed address inside a reserved range, so that the resident
//     units of a layer group form one view the kernels read in place) and is told when they
//     are no longer needed (it returns the pages to the OS). The budget is charged the same.
//
// Thread safety: every method may be called from any thread (the compute thread and the I/O
// thread use it concurrently). One mutex guards the index, the policy and the accounting; a
// condition variable wakes waiters when a load completes. A ready handle's data() is read
// without locking. The cache must outlive every handle (checked in the destructor).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/status.h"
#include "storage/eviction_policy.h"
#include "storage/unit_id.h"
#include "storage/unit_map.h"

namespace weir::storage {

class WeightCache;

// Where cache entries' bytes live (CacheOptions::placement). Called under the cache's mutex, so
// an implementation must not call back into the cache; it must be thread-safe with respect to
// whatever else uses it.
class UnitPlacement {
 public:
  virtual ~UnitPlacement() = default;
  // `capacity` bytes (a multiple of the cache alignment) for unit `id`, aligned to the cache
  // alignment, that nothing else uses while the unit is cached; nullptr when `id` or the size
  // has no place (the reservation then fails with InvalidArgument).
  virtual std::byte* Place(UnitId id, size_t capacity) = 0;
  // The unit left the cache (evicted, aborted and unpinned, or the cache is destroyed).
  virtual void Release(UnitId id, std::byte* data, size_t capacity) = 0;
  // The memory a unit of `capacity` bytes takes once written: capacity, or more where the
  // placement's pages are larger (whole huge pages). The cache charges and releases this much.
  virtual size_t Footprint(UnitId id, size_t capacity) const {
    (void)id;
    return capacity;
  }
};

namespace detail {
// One cached unit. Owned by WeightCache; handles point at it while pinned.
struct CacheEntry {
  enum State : uint8_t { kLoading = 0, kReady = 1, kAborted = 2 };
  PolicyHook hook;
  std::byte* data = nullptr;  // capacity bytes: owned, or given by the cache's UnitPlacement
  size_t capacity = 0;        // payload rounded up to the cache alignment
  AlignedBuffer owned;        // the bytes when the cache has no placement
  size_t bytes = 0;           // payload
  uint64_t charge = 0;        // bytes counted against the budget
  uint32_t pins = 0;
  std::atomic<uint8_t> state{kLoading};
  bool indexed = true;      // false once aborted (then freed at the last unpin)
  bool prefetched = false;  // reserved by Reserve() and not yet accessed
  Status abort_status;
};
}  // namespace detail

// A pin on one cache entry. Move-only; the destructor unpins (and aborts an unfinished load).
class CacheHandle {
 public:
  CacheHandle() = default;
  CacheHandle(CacheHandle&& o) noexcept;
  CacheHandle& operator=(CacheHandle&& o) noexcept;
  CacheHandle(const CacheHandle&) = delete;
  CacheHandle& operator=(const CacheHandle&) = delete;
  ~CacheHandle() { Reset(); }

  bool valid() const { return entry_ != nullptr; }
  explicit operator bool() const { return valid(); }
  UnitId id() const { return entry_->hook.id; }
  uint32_t partition() const { return entry_->hook.partition; }
  size_t size() const { return entry_->bytes; }
  // Writable bytes behind mutable_data(): size() rounded up to the cache alignment, so a loader
  // may read whole aligned blocks (O_DIRECT without a bounce).
  size_t capacity() const { return entry_->capacity; }
  bool ready() const {
    return entry_->state.load(std::memory_order_acquire) == detail::CacheEntry::kReady;
  }
  // The unit's bytes; only once ready() (a bug otherwise).
  const std::byte* data() const {
    WEIR_CHECK(ready());
    return entry_->data;
  }

  // Loader side: true for the handle returned by a reservation until Publish/Abort.
  bool is_loader() const { return loader_; }
  std::byte* mutable_data() {
    WEIR_CHECK(loader_);
    return entry_->data;
  }
  // Marks the bytes complete and wakes waiters; the handle stays a (reader) pin.
  void Publish();
  // The load failed: the entry leaves the cache, waiters get `why`, and this handle is reset.
  void Abort(Status why);

  // Blocks until the entry is ready (Ok) or its load was aborted (the loader's Status). Must
  // not be called on a loader handle (it would wait for itself).
  Status Wait();

  // Unpins now (aborting an unfinished load); the handle becomes invalid.
  void Reset();

 private:
  friend class WeightCache;
  CacheHandle(WeightCache* cache, detail::CacheEntry* entry, bool loader)
      : cache_(cache), entry_(entry), loader_(loader) {}

  WeightCache* cache_ = nullptr;
  detail::CacheEntry* entry_ = nullptr;
  bool loader_ = false;
};

struct CacheOptions {
  uint64_t budget_bytes = 0;
  // Alignment of each entry's data (>= 16, power of two). 4096 lets O_DIRECT read straight into
  // entries; payloads are rounded up to it, and the rounding is charged.
  size_t alignment = 64;
  // Empty: one shared partition. Otherwise one weight (> 0) per partition.
  std::vector<uint64_t> partition_weights;
  // Record every access (Lookup/Acquire) so that a later run can replay it with "belady".
  bool record_trace = false;
  // Where entries' bytes live; nullptr = allocated per entry. Not owned; must outlive the cache.
  UnitPlacement* placement = nullptr;
};

struct CacheStats {
  uint64_t hits = 0;              // accesses served by a ready entry
  uint64_t prefetch_hits = 0;     // first access to a prefetched (Reserve) unit, ready or loading
  uint64_t joins = 0;             // accesses to a unit another thread was loading on demand
  uint64_t misses = 0;            // accesses to an absent unit
  uint64_t hit_bytes = 0;         // payload bytes of `hits`
  uint64_t inserted_entries = 0;  // loads published
  uint64_t inserted_bytes = 0;    // their payload bytes (= bytes read from storage into the cache)
  uint64_t evicted_entries = 0;
  uint64_t evicted_bytes = 0;  // payload bytes evicted
  uint64_t aborted_loads = 0;
  uint64_t reserve_failures = 0;  // reservations refused for lack of room
  uint64_t entries = 0;           // now resident (including loading)
  uint64_t current_bytes = 0;     // charged bytes now (<= budget_bytes)
  uint64_t payload_bytes = 0;     // payload bytes now
  uint64_t pinned_bytes = 0;      // charged bytes of pinned entries now
  uint64_t budget_bytes = 0;
  uint64_t policy_metadata_bytes = 0;  // outside the budget, see above
};

struct PartitionStats {
  uint64_t budget_bytes = 0;
  uint64_t current_bytes = 0;
  uint64_t pinned_bytes = 0;
  uint64_t entries = 0;
};

class WeightCache {
 public:
  // InvalidArgument for a bad alignment, a zero partition weight or a null policy.
  static Result<std::unique_ptr<WeightCache>> Create(const CacheOptions& options,
                                                     std::unique_ptr<EvictionPolicy> policy);
  ~WeightCache();
  WeightCache(const WeightCache&) = delete;
  WeightCache& operator=(const WeightCache&) = delete;

  // One access. A hit returns a pinned handle (ready, or loading: call Wait()); a miss returns
  // an invalid handle. For "use it if cached, else read it elsewhere". When a miss is to be
  // loaded into the cache, call Acquire instead (Lookup then Acquire counts two accesses).
  CacheHandle Lookup(UnitId id);

  // One access. Like Lookup, but a miss reserves an entry of `bytes` in `partition` and returns
  // the loader handle (is_loader()). OutOfMemory when no room can be made (the miss is still
  // counted); InvalidArgument for a bad partition, a zero size, or a unit already cached with
  // another size. A present unit is returned from whichever partition holds it.
  Result<CacheHandle> Acquire(UnitId id, size_t bytes, uint32_t partition);

  // Not an access (prefetch). Reserves `id` and returns its loader handle, or an invalid handle
  // when the unit is already present (ready or loading). Errors as Acquire.
  Result<CacheHandle> Reserve(UnitId id, size_t bytes, uint32_t partition);

  // Not an access: is the unit present (ready or loading)? For cache-aware masking (DIP-CA).
  bool Contains(UnitId id) const;
  // Not an access: for i in [0, count), sets bit i % 64 of words[i / 64] when unit first + i is
  // present and clears it otherwise (the layout of sparsity's CacheStateView). One lock for the
  // whole range; words must hold (count + 63) / 64 entries. Units of partition `except` count as
  // absent (a staging partition that another thread fills: without it the mask is what the
  // caller's own moves and evictions made, so it does not depend on the I/O thread's timing).
  void ResidentMask(UnitId first, size_t count, uint64_t* words,
                    uint32_t except = UINT32_MAX) const;

  // Moves the pinned, ready unit of `h` into `partition`, evicting unpinned units of that
  // partition (policy order) to make room; a staging area promotes what the compute used into
  // the cache proper this way. OutOfMemory (nothing changes) when no room can be made: the
  // target's room is pinned, its policy refuses a victim (ATU) or will not admit the unit in
  // its place (MRU: EvictionPolicy::Admit). Not an access.
  Status Move(const CacheHandle& h, uint32_t partition);

  // Changes the budget. Shrinking evicts unpinned units (policy order, per partition); it fails
  // with OutOfMemory, changing nothing, when a partition's pinned bytes exceed its new share.
  Status SetBudget(uint64_t budget_bytes);
  // The same with new partition weights (as many as the cache has, each > 0): the shares change
  // with the budget; InvalidArgument for a wrong count or a zero weight.
  Status SetBudget(uint64_t budget_bytes, const std::vector<uint64_t>& partition_weights);
  // Evicts every unpinned unit.
  void EvictAll();

  // Token and sequence boundaries, forwarded to the policy (window drops expired units here).
  void BeginToken();
  void ResetSequence();

  // Bytes an entry with `bytes` of payload is charged (see the header comment).
  uint64_t EntryCharge(size_t bytes) const;
  // What unit `id` with `bytes` of payload is charged: EntryCharge of its placement's footprint
  // (UnitPlacement::Footprint; the payload rounded to the alignment without a placement).
  uint64_t UnitCharge(UnitId id, size_t bytes) const;
  uint32_t partition_count() const { return static_cast<uint32_t>(parts_.size()); }
  size_t alignment() const { return alignment_; }
  std::string_view policy_name() const { return policy_->name(); }

  CacheStats stats() const;
  PartitionStats partition_stats(uint32_t partition) const;
  // The recorded accesses so far (record_trace), leaving the record empty.
  std::vector<UnitId> TakeTrace();

 private:
  friend class CacheHandle;
  using Entry = detail::CacheEntry;
  struct Partition {
    uint64_t budget = 0;
    uint64_t used = 0;    // charged bytes, including aborted entries still pinned
    uint64_t pinned = 0;  // charged bytes of pinned entries
    uint64_t entries = 0;
  };

  WeightCache() = default;
  std::vector<uint64_t> SplitBudget(uint64_t budget) const;
  // Checks a request; `present` is the unit's entry or null.
  Status CheckUnit(UnitId id, size_t bytes, uint32_t partition, const Entry* present) const;
  // The access bookkeeping of a present entry; pins it.
  CacheHandle HitLocked(Entry* e);
  Result<CacheHandle> ReserveLocked(UnitId id, size_t bytes, uint32_t partition, bool prefetched);
  void EvictLocked(PolicyHook* victim);
  // Returns the entry's bytes (to the placement, if any) and deletes it.
  void FreeEntry(Entry* e);
  void PinLocked(Entry* e);
  void UnpinLocked(Entry* e);
  void RecordLocked(UnitId id);

  // Called by CacheHandle.
  void PublishEntry(Entry* e);
  void AbortEntry(Entry* e, Status why);
  Status WaitEntry(Entry* e);
  void Unpin(Entry* e);

  mutable std::mutex mu_;
  std::condition_variable loaded_cv_;
  UnitMap<Entry> index_;  // owns its entries (deleted on eviction and in the destructor)
  std::unordered_map<Entry*, std::unique_ptr<Entry>> aborted_;  // out of the index, still pinned
  std::unique_ptr<EvictionPolicy> policy_;
  std::vector<uint64_t> weights_;
  std::vector<Partition> parts_;
  uint64_t budget_ = 0;
  uint64_t payload_ = 0;  // payload bytes of all entries (index and aborted)
  size_t alignment_ = 64;
  UnitPlacement* placement_ = nullptr;
  CacheStats counters_;  // the event counters; the "now" fields are computed in stats()
  bool record_trace_ = false;
  std::vector<UnitId> trace_;
};

}  // namespace weir::storage
