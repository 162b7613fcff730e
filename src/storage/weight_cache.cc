#include "storage/weight_cache.h"

#include <algorithm>
#include <cinttypes>

#include "base/checked_math.h"
#include "base/units.h"

namespace weir::storage {

namespace {

// glibc malloc: a chunk is the request plus an 8-byte size field, rounded up to 16, at least 32.
uint64_t MallocChunk(uint64_t n) { return std::max<uint64_t>(32, (n + 8 + 15) / 16 * 16); }
// The hash index keeps its load at or above 1/8 (unit_map.h): at most 8 slots per entry.
constexpr uint64_t kIndexBytesPerEntry = 8 * sizeof(UnitMap<detail::CacheEntry>::Slot);

std::string UnitName(UnitId id) {
  return StrFormat("unit 0x%016" PRIx64 " (layer %u kind %u index %" PRIu64 ")", id, UnitLayer(id),
                   UnitKind(id), UnitIndex(id));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CacheHandle

CacheHandle::CacheHandle(CacheHandle&& o) noexcept
    : cache_(std::exchange(o.cache_, nullptr)),
      entry_(std::exchange(o.entry_, nullptr)),
      loader_(std::exchange(o.loader_, false)) {}

CacheHandle& CacheHandle::operator=(CacheHandle&& o) noexcept {
  if (this != &o) {
    Reset();
    cache_ = std::exchange(o.cache_, nullptr);
    entry_ = std::exchange(o.entry_, nullptr);
    loader_ = std::exchange(o.loader_, false);
  }
  return *this;
}

void CacheHandle::Publish() {
  WEIR_CHECK(valid() && loader_);
  cache_->PublishEntry(entry_);
  loader_ = false;
}

void CacheHandle::Abort(Status why) {
  WEIR_CHECK(valid() && loader_);
  cache_->AbortEntry(entry_, std::move(why));
  loader_ = false;
  Reset();
}

Status CacheHandle::Wait() {
  WEIR_CHECK(valid() && !loader_);
  if (ready()) return Status::Ok();
  return cache_->WaitEntry(entry_);
}

void CacheHandle::Reset() {
  if (entry_ == nullptr) return;
  if (loader_) {
    loader_ = false;
    cache_->AbortEntry(entry_, Status::Internal(StrFormat(
                                   "%s: its loader released the reservation without Publish or "
                                   "Abort",
                                   UnitName(entry_->hook.id).c_str())));
  }
  cache_->Unpin(entry_);
  entry_ = nullptr;
  cache_ = nullptr;
}

// ---------------------------------------------------------------------------------------------
// WeightCache: creation and accounting

Result<std::unique_ptr<WeightCache>> WeightCache::Create(const CacheOptions& options,
                                                         std::unique_ptr<EvictionPolicy> policy) {
  if (policy == nullptr) return Status::InvalidArgument("weight cache: no eviction policy given");
  const size_t a = options.alignment;
  if (a < 16 || a > (size_t{1} << 20) || (a & (a - 1)) != 0) {
    return Status::InvalidArgument(
        StrFormat("weight cache: alignment %zu must be a power of two between 16 and 1048576", a));
  }
  std::vector<uint64_t> weights = options.partition_weights;
  if (weights.empty()) weights.push_back(1);
  if (weights.size() > kUnitLayerLimit) {
    return Status::InvalidArgument(
        StrFormat("weight cache: %zu partitions (at most %u)", weights.size(), kUnitLayerLimit));
  }
  uint64_t total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] == 0) {
      return Status::InvalidArgument(
          StrFormat("weight cache: partition %zu has weight 0 (every partition needs a share)", i));
    }
    if (!CheckedAdd(total, weights[i], &total)) {
      return Status::InvalidArgument("weight cache: partition weights overflow 64 bits");
    }
  }
  std::unique_ptr<WeightCache> cache(new WeightCache());
  cache->policy_ = std::move(policy);
  cache->policy_->Init(static_cast<uint32_t>(weights.size()));
  cache->weights_ = std::move(weights);
  cache->alignment_ = a;
  cache->record_trace_ = options.record_trace;
  cache->placement_ = options.placement;
  cache->parts_.resize(cache->weights_.size());
  cache->budget_ = options.budget_bytes;
  std::vector<uint64_t> split = cache->SplitBudget(options.budget_bytes);
  for (size_t p = 0; p < split.size(); ++p) cache->parts_[p].budget = split[p];
  return cache;
}

WeightCache::~WeightCache() {
  // A handle outliving its cache would dangle: that is a bug in the caller.
  for (const Partition& p : parts_) WEIR_CHECK(p.pinned == 0);
  index_.ForEach([this](UnitId, Entry* e) { FreeEntry(e); });
}

void WeightCache::FreeEntry(Entry* e) {
  if (placement_ != nullptr && e->data != nullptr)
    placement_->Release(e->hook.id, e->data, e->capacity);
  delete e;
}

std::vector<uint64_t> WeightCache::SplitBudget(uint64_t budget) const {
  unsigned __int128 total = 0;
  for (uint64_t w : weights_) total += w;
  std::vector<uint64_t> out(weights_.size());
  for (size_t p = 0; p < weights_.size(); ++p) {
    out[p] = static_cast<uint64_t>(static_cast<unsigned __int128>(budget) * weights_[p] / total);
  }
  return out;
}

uint64_t WeightCache::EntryCharge(size_t bytes) const {
  const uint64_t payload =
      (static_cast<uint64_t>(bytes) + alignment_ - 1) / alignment_ * alignment_;
  return payload + 16 /* allocator header of the data block */ + MallocChunk(sizeof(Entry)) +
         kIndexBytesPerEntry + policy_->per_entry_bytes();
}

uint64_t WeightCache::UnitCharge(UnitId id, size_t bytes) const {
  const size_t capacity = (bytes + alignment_ - 1) / alignment_ * alignment_;
  return EntryCharge(placement_ != nullptr ? placement_->Footprint(id, capacity) : bytes);
}

void WeightCache::PinLocked(Entry* e) {
  if (e->pins++ == 0) {
    parts_[e->hook.partition].pinned += e->charge;
    if (e->indexed) policy_->MakeUnevictable(&e->hook);
  }
}

void WeightCache::UnpinLocked(Entry* e) {
  WEIR_CHECK(e->pins > 0);
  if (--e->pins > 0) return;
  Partition& part = parts_[e->hook.partition];
  part.pinned -= e->charge;
  if (e->indexed) {
    policy_->MakeEvictable(&e->hook);
    return;
  }
  // An aborted entry: its memory goes now.
  part.used -= e->charge;
  part.entries -= 1;
  payload_ -= e->bytes;
  auto it = aborted_.find(e);
  WEIR_CHECK(it != aborted_.end());
  it->second.release();
  aborted_.erase(it);
  FreeEntry(e);
}

void WeightCache::RecordLocked(UnitId id) {
  if (record_trace_) trace_.push_back(id);
}

Status WeightCache::CheckUnit(UnitId id, size_t bytes, uint32_t partition,
                              const Entry* present) const {
  if (partition >= parts_.size()) {
    return Status::InvalidArgument(
        StrFormat("weight cache: %s: partition %u, but the cache has %zu", UnitName(id).c_str(),
                  partition, parts_.size()));
  }
  if (bytes == 0) {
    return Status::InvalidArgument(StrFormat("weight cache: %s has size 0", UnitName(id).c_str()));
  }
  if (present != nullptr && present->bytes != bytes) {
    return Status::InvalidArgument(
        StrFormat("weight cache: %s is cached with %zu bytes but was asked with %zu bytes",
                  UnitName(id).c_str(), present->bytes, bytes));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Accesses and reservations

CacheHandle WeightCache::HitLocked(Entry* e) {
  PinLocked(e);
  policy_->OnAccess(e->hook.id, &e->hook);
  if (e->prefetched) {
    e->prefetched = false;
    ++counters_.prefetch_hits;
  } else if (e->state.load(std::memory_order_relaxed) == Entry::kReady) {
    ++counters_.hits;
    counters_.hit_bytes += e->bytes;
  } else {
    ++counters_.joins;
  }
  return CacheHandle(this, e, /*loader=*/false);
}

CacheHandle WeightCache::Lookup(UnitId id) {
  std::lock_guard<std::mutex> lock(mu_);
  RecordLocked(id);
  Entry* e = index_.Find(id);
  if (e == nullptr) {
    ++counters_.misses;
    policy_->OnAccess(id, nullptr);
    return CacheHandle();
  }
  return HitLocked(e);
}

Result<CacheHandle> WeightCache::Acquire(UnitId id, size_t bytes, uint32_t partition) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = index_.Find(id);
  WEIR_RETURN_IF_ERROR(CheckUnit(id, bytes, partition, e));
  RecordLocked(id);
  if (e != nullptr) return HitLocked(e);
  ++counters_.misses;
  policy_->OnAccess(id, nullptr);
  return ReserveLocked(id, bytes, partition, /*prefetched=*/false);
}

Result<CacheHandle> WeightCache::Reserve(UnitId id, size_t bytes, uint32_t partition) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = index_.Find(id);
  WEIR_RETURN_IF_ERROR(CheckUnit(id, bytes, partition, e));
  if (e != nullptr) return CacheHandle();
  return ReserveLocked(id, bytes, partition, /*prefetched=*/true);
}

Result<CacheHandle> WeightCache::ReserveLocked(UnitId id, size_t bytes, uint32_t partition,
                                               bool prefetched) {
  Partition& part = parts_[partition];
  const uint64_t charge = UnitCharge(id, bytes);
  if (charge > part.budget) {
    ++counters_.reserve_failures;
    return Status::OutOfMemory(StrFormat(
        "weight cache: %s needs %" PRIu64 " bytes (%zu payload) but partition %u's budget is %s",
        UnitName(id).c_str(), charge, bytes, partition, FormatBytes(part.budget).c_str()));
  }
  if (part.pinned + charge > part.budget) {
    ++counters_.reserve_failures;
    return Status::OutOfMemory(StrFormat("weight cache: no room for %s (%" PRIu64
                                         " bytes) in partition %u: %s of its %s budget "
                                         "is pinned by units in use",
                                         UnitName(id).c_str(), charge, partition,
                                         FormatBytes(part.pinned).c_str(),
                                         FormatBytes(part.budget).c_str()));
  }
  while (part.used + charge > part.budget) {
    PolicyHook* victim = policy_->PickVictim(partition, /*force=*/false);
    if (victim == nullptr) {
      ++counters_.reserve_failures;
      return Status::OutOfMemory(StrFormat("weight cache: no room for %s (%" PRIu64
                                           " bytes) in partition %u: policy '%.*s' keeps "
                                           "every remaining unit (%s used of %s)",
                                           UnitName(id).c_str(), charge, partition,
                                           static_cast<int>(policy_->name().size()),
                                           policy_->name().data(), FormatBytes(part.used).c_str(),
                                           FormatBytes(part.budget).c_str()));
    }
    EvictLocked(victim);
  }
  if (placement_ != nullptr) {
    // Its place is fixed: an aborted load of the same unit that is still pinned owns it until
    // its last pin goes (releasing it then would discard the new bytes).
    for (const auto& [old, owner] : aborted_) {
      if (old->hook.id == id) {
        ++counters_.reserve_failures;
        return Status::OutOfMemory(
            StrFormat("weight cache: %s: the bytes of its aborted load are still pinned",
                      UnitName(id).c_str()));
      }
    }
  }
  auto e = std::make_unique<Entry>();
  size_t capacity = (bytes + alignment_ - 1) / alignment_ * alignment_;
  if (placement_ != nullptr) {
    capacity = placement_->Footprint(id, capacity);  // what it takes: released whole
    e->data = placement_->Place(id, capacity);
    if (e->data == nullptr) {
      return Status::InvalidArgument(
          StrFormat("weight cache: %s (%zu bytes) has no place", UnitName(id).c_str(), bytes));
    }
  } else {
    if (!e->owned.Reset(capacity, alignment_)) {
      return Status::OutOfMemory(
          StrFormat("weight cache: cannot allocate %zu bytes for %s", bytes, UnitName(id).c_str()));
    }
    e->data = e->owned.data();
  }
  e->capacity = capacity;
  e->hook.id = id;
  e->hook.partition = partition;
  e->bytes = bytes;
  e->charge = charge;
  e->pins = 1;
  e->prefetched = prefetched;
  Entry* raw = e.release();
  index_.Insert(id, raw);
  part.used += charge;
  part.pinned += charge;
  part.entries += 1;
  payload_ += bytes;
  policy_->OnInsert(&raw->hook);
  return CacheHandle(this, raw, /*loader=*/true);
}

Status WeightCache::Move(const CacheHandle& h, uint32_t partition) {
  WEIR_CHECK(h.valid() && !h.is_loader() && h.cache_ == this);
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = h.entry_;
  if (partition >= parts_.size()) {
    return Status::InvalidArgument(
        StrFormat("weight cache: move of %s to partition %u, but the cache has %zu",
                  UnitName(e->hook.id).c_str(), partition, parts_.size()));
  }
  if (!e->indexed || e->state.load(std::memory_order_relaxed) != Entry::kReady) {
    return Status::InvalidArgument(
        StrFormat("weight cache: move of %s, which is not ready", UnitName(e->hook.id).c_str()));
  }
  const uint32_t from = e->hook.partition;
  if (from == partition) return Status::Ok();
  Partition& to = parts_[partition];
  if (to.pinned + e->charge > to.budget) {
    return Status::OutOfMemory(
        StrFormat("weight cache: no room to move %s into partition %u: %s of its %s is pinned",
                  UnitName(e->hook.id).c_str(), partition, FormatBytes(to.pinned).c_str(),
                  FormatBytes(to.budget).c_str()));
  }
  while (to.used + e->charge > to.budget) {
    PolicyHook* victim = policy_->PickVictim(partition, /*force=*/false);
    if (victim == nullptr || !policy_->Admit(e->hook, *victim)) {
      return Status::OutOfMemory(
          StrFormat("weight cache: no room to move %s into partition %u: the policy keeps the rest",
                    UnitName(e->hook.id).c_str(), partition));
    }
    EvictLocked(victim);
  }
  // The entry is pinned, so it is in no eviction list: re-file it under its new partition.
  Partition& src = parts_[from];
  src.used -= e->charge;
  src.pinned -= e->charge;
  src.entries -= 1;
  to.used += e->charge;
  to.pinned += e->charge;
  to.entries += 1;
  policy_->OnRemove(&e->hook);
  e->hook.partition = partition;
  policy_->OnInsert(&e->hook);
  return Status::Ok();
}

void WeightCache::EvictLocked(PolicyHook* victim) {
  Entry* e = index_.Erase(victim->id);
  WEIR_CHECK(e != nullptr && e->pins == 0 && &e->hook == victim);
  policy_->OnRemove(victim);
  Partition& part = parts_[victim->partition];
  part.used -= e->charge;
  part.entries -= 1;
  payload_ -= e->bytes;
  ++counters_.evicted_entries;
  counters_.evicted_bytes += e->bytes;
  FreeEntry(e);
  index_.Compact();
}

// ---------------------------------------------------------------------------------------------
// Loads

void WeightCache::PublishEntry(Entry* e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    WEIR_CHECK(e->state.load(std::memory_order_relaxed) == Entry::kLoading);
    e->state.store(Entry::kReady, std::memory_order_release);
    ++counters_.inserted_entries;
    counters_.inserted_bytes += e->bytes;
  }
  loaded_cv_.notify_all();
}

void WeightCache::AbortEntry(Entry* e, Status why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    WEIR_CHECK(e->state.load(std::memory_order_relaxed) == Entry::kLoading && e->indexed);
    e->abort_status = std::move(why);
    e->state.store(Entry::kAborted, std::memory_order_release);
    ++counters_.aborted_loads;
    policy_->OnRemove(&e->hook);
    e->indexed = false;
    Entry* erased = index_.Erase(e->hook.id);
    WEIR_CHECK(erased == e);
    // Its place goes back now, not at the last unpin: nobody reads an aborted entry's bytes,
    // and a new entry of the same unit may take the same place (UnitPlacement) before the
    // last pin of this one goes; releasing then would wipe the new entry's bytes.
    if (placement_ != nullptr && e->data != nullptr) {
      placement_->Release(e->hook.id, e->data, e->capacity);
      e->data = nullptr;
    }
    aborted_.emplace(e, std::unique_ptr<Entry>(e));
    index_.Compact();
  }
  loaded_cv_.notify_all();
}

Status WeightCache::WaitEntry(Entry* e) {
  std::unique_lock<std::mutex> lock(mu_);
  loaded_cv_.wait(lock,
                  [e] { return e->state.load(std::memory_order_acquire) != Entry::kLoading; });
  if (e->state.load(std::memory_order_acquire) == Entry::kReady) return Status::Ok();
  return e->abort_status;
}

void WeightCache::Unpin(Entry* e) {
  std::lock_guard<std::mutex> lock(mu_);
  UnpinLocked(e);
}

// ---------------------------------------------------------------------------------------------
// Budget, boundaries, stats

bool WeightCache::Contains(UnitId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.Find(id) != nullptr;
}

void WeightCache::ResidentMask(UnitId first, size_t count, uint64_t* words,
                               uint32_t except) const {
  const size_t n_words = (count + 63) / 64;
  for (size_t w = 0; w < n_words; ++w) words[w] = 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.size() == 0) return;
  for (size_t i = 0; i < count; ++i) {
    const Entry* e = index_.Find(first + i);
    if (e != nullptr && e->hook.partition != except) words[i / 64] |= uint64_t{1} << (i % 64);
  }
}

Status WeightCache::SetBudget(uint64_t budget_bytes) {
  std::vector<uint64_t> weights;
  {
    std::lock_guard<std::mutex> lock(mu_);
    weights = weights_;
  }
  return SetBudget(budget_bytes, weights);
}

Status WeightCache::SetBudget(uint64_t budget_bytes,
                              const std::vector<uint64_t>& partition_weights) {
  std::lock_guard<std::mutex> lock(mu_);
  if (partition_weights.size() != parts_.size()) {
    return Status::InvalidArgument(
        StrFormat("weight cache: %zu partition weights for %zu partitions",
                  partition_weights.size(), parts_.size()));
  }
  for (size_t i = 0; i < partition_weights.size(); ++i) {
    if (partition_weights[i] == 0) {
      return Status::InvalidArgument(StrFormat("weight cache: partition %zu has weight 0", i));
    }
  }
  const std::vector<uint64_t> old_weights = weights_;
  weights_ = partition_weights;
  std::vector<uint64_t> split = SplitBudget(budget_bytes);
  weights_ = old_weights;
  for (size_t p = 0; p < parts_.size(); ++p) {
    if (parts_[p].pinned > split[p]) {
      return Status::OutOfMemory(StrFormat(
          "weight cache: cannot shrink the budget to %s: partition %zu would get %s but %s of it "
          "is pinned by units in use",
          FormatBytes(budget_bytes).c_str(), p, FormatBytes(split[p]).c_str(),
          FormatBytes(parts_[p].pinned).c_str()));
    }
  }
  budget_ = budget_bytes;
  weights_ = partition_weights;
  for (size_t p = 0; p < parts_.size(); ++p) {
    Partition& part = parts_[p];
    part.budget = split[p];
    while (part.used > part.budget) {
      PolicyHook* victim = policy_->PickVictim(static_cast<uint32_t>(p), /*force=*/true);
      WEIR_CHECK(victim != nullptr);  // used > budget >= pinned, so something is evictable
      EvictLocked(victim);
    }
  }
  return Status::Ok();
}

void WeightCache::EvictAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t p = 0; p < parts_.size(); ++p) {
    while (PolicyHook* victim = policy_->PickVictim(static_cast<uint32_t>(p), /*force=*/true)) {
      EvictLocked(victim);
    }
  }
}

void WeightCache::BeginToken() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PolicyHook*> expired;
  policy_->BeginToken(&expired);
  for (PolicyHook* h : expired) EvictLocked(h);
}

void WeightCache::ResetSequence() {
  std::lock_guard<std::mutex> lock(mu_);
  policy_->ResetSequence();
}

CacheStats WeightCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats s = counters_;
  s.entries = s.current_bytes = s.pinned_bytes = 0;
  s.payload_bytes = payload_;
  for (const Partition& p : parts_) {
    s.entries += p.entries;
    s.current_bytes += p.used;
    s.pinned_bytes += p.pinned;
  }
  s.budget_bytes = budget_;
  s.policy_metadata_bytes = policy_->metadata_bytes();
  return s;
}

PartitionStats WeightCache::partition_stats(uint32_t partition) const {
  std::lock_guard<std::mutex> lock(mu_);
  WEIR_CHECK(partition < parts_.size());
  const Partition& p = parts_[partition];
  return PartitionStats{p.budget, p.used, p.pinned, p.entries};
}

std::vector<UnitId> WeightCache::TakeTrace() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(trace_, {});
}

}  // namespace weir::storage
