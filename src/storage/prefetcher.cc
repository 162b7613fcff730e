#include "storage/prefetcher.h"

#include <chrono>
#include <cinttypes>
#include <optional>
#include <vector>

#include "base/checked_math.h"

namespace weir::storage {

namespace {
std::string UnitName(UnitId id) { return StrFormat("unit 0x%016" PRIx64, id); }
using Clock = std::chrono::steady_clock;
constexpr size_t kMaxMergedRead = size_t{8} << 20;  // one device read of merged jobs
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}
}  // namespace

size_t RoundedReadLength(const BlockDevice& device, uint64_t offset, size_t length, const void* dst,
                         size_t capacity) {
  const size_t a = device.preferred_alignment();
  if (a <= 1 || offset % a != 0 || reinterpret_cast<uintptr_t>(dst) % a != 0) return length;
  const uint64_t rounded = (static_cast<uint64_t>(length) + a - 1) / a * a;
  if (rounded > capacity || !RangeInside(offset, rounded, device.size())) return length;
  return static_cast<size_t>(rounded);
}

Result<std::unique_ptr<Prefetcher>> Prefetcher::Create(WeightCache* cache, const Options& options) {
  if (cache == nullptr) return Status::InvalidArgument("prefetcher: no cache given");
  if (options.max_batch == 0) return Status::InvalidArgument("prefetcher: max_batch must be >= 1");
  return std::unique_ptr<Prefetcher>(new Prefetcher(cache, options));
}

Prefetcher::Prefetcher(WeightCache* cache, const Options& options)
    : cache_(cache), options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

Prefetcher::~Prefetcher() { Shutdown(); }

Status Prefetcher::CheckRead(const UnitRead& read) {
  if (read.device == nullptr) {
    return Status::InvalidArgument(
        StrFormat("prefetcher: %s has no device", UnitName(read.id).c_str()));
  }
  if (read.length == 0 || !RangeInside(read.offset, read.length, read.device->size())) {
    return Status::InvalidArgument(StrFormat("prefetcher: %s: %zu bytes at offset %" PRIu64
                                             " do not lie inside %s (%" PRIu64 " bytes)",
                                             UnitName(read.id).c_str(), read.length, read.offset,
                                             read.device->name().c_str(), read.device->size()));
  }
  return Status::Ok();
}

Status Prefetcher::Enqueue(const UnitRead& read) {
  WEIR_RETURN_IF_ERROR(CheckRead(read));
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) {
    return Status::InvalidArgument(
        StrFormat("prefetcher: %s enqueued after shutdown", UnitName(read.id).c_str()));
  }
  if (queued_.count(read.id) || in_flight_.count(read.id) || held_.count(read.id)) {
    return Status::Ok();
  }
  WEIR_ASSIGN_OR_RETURN(CacheHandle h, cache_->Reserve(read.id, read.length, read.partition));
  if (!h.valid()) return Status::Ok();  // already cached (or being loaded on demand)
  queue_.push_back(Job{read, std::move(h), false});
  queued_[read.id] = std::prev(queue_.end());
  ++stats_.enqueued;
  work_cv_.notify_one();
  return Status::Ok();
}

Status Prefetcher::Load(const UnitRead& read, CacheHandle& h, bool count_bytes) {
  const size_t n =
      RoundedReadLength(*read.device, read.offset, read.length, h.mutable_data(), h.capacity());
  const Clock::time_point t0 = Clock::now();
  Status st = read.device->ReadAt(read.offset, n, h.mutable_data());
  const double seconds = Seconds(t0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.read_seconds += seconds;
    if (count_bytes) {
      stats_.bytes_read += n;
      ++stats_.reads;
      stats_.bytes_on_demand += n;
    }
  }
  if (st.ok()) {
    h.Publish();
    return st;
  }
  Status failed = st.WithContext(StrFormat("loading %s", UnitName(read.id).c_str()));
  h.Abort(failed);
  return failed;
}

void Prefetcher::Pause() {
  std::lock_guard<std::mutex> lock(mu_);
  ++paused_;
}

void Prefetcher::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (paused_ > 0) --paused_;
  }
  work_cv_.notify_all();
}

void Prefetcher::Loop() {
  for (;;) {
    std::vector<Job> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stop_ || (!queue_.empty() && paused_ == 0); });
      if (queue_.empty()) return;  // stop_ and nothing left
      BlockDevice* device = queue_.front().read.device;
      uint64_t batch_bytes = 0;
      while (!queue_.empty() && batch.size() < options_.max_batch &&
             queue_.front().read.device == device &&
             (batch.empty() || options_.max_batch_bytes == 0 ||
              batch_bytes + queue_.front().read.length <= options_.max_batch_bytes)) {
        batch_bytes += queue_.front().read.length;
        Job job = std::move(queue_.front());
        queue_.pop_front();
        queued_.erase(job.read.id);
        in_flight_[job.read.id] = InFlight{job.read.partition, job.claimed};
        batch.push_back(std::move(job));
      }
      ++stats_.batches;
    }
    BlockDevice* device = batch.front().read.device;
    std::vector<ReadRequest> requests(batch.size());
    uint64_t bytes = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      CacheHandle& h = batch[i].handle;
      const UnitRead& r = batch[i].read;
      requests[i].offset = r.offset;
      requests[i].length =
          RoundedReadLength(*device, r.offset, r.length, h.mutable_data(), h.capacity());
      requests[i].dst = h.mutable_data();
      bytes += requests[i].length;
    }
    // Jobs that continue each other both on the device and in memory (consecutive blocks of a
    // tensor placed at consecutive addresses) become one read: storage is much faster in large
    // reads (ActiveFlow Fig. 7; here 64 KiB O_DIRECT reads run at half the speed of 1 MiB ones).
    std::vector<ReadRequest> merged;
    std::vector<size_t> first_of;  // merged request -> its first job
    for (size_t i = 0; i < requests.size(); ++i) {
      ReadRequest& m = merged.empty() ? requests[i] : merged.back();
      if (!merged.empty() && m.offset + m.length == requests[i].offset &&
          static_cast<std::byte*>(m.dst) + m.length == requests[i].dst &&
          m.length + requests[i].length <= kMaxMergedRead) {
        m.length += requests[i].length;
        continue;
      }
      merged.push_back(requests[i]);
      first_of.push_back(i);
    }
    const Clock::time_point t0 = Clock::now();
    (void)device->Read(std::span<ReadRequest>(merged));
    const double seconds = Seconds(t0);
    for (size_t m = 0; m < merged.size(); ++m) {
      const size_t end = m + 1 < merged.size() ? first_of[m + 1] : requests.size();
      for (size_t i = first_of[m]; i < end; ++i) requests[i].status = merged[m].status;
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_read += bytes;
    stats_.reads += merged.size();
    stats_.bytes_prefetched += bytes;
    stats_.read_seconds += seconds;
    for (size_t i = 0; i < batch.size(); ++i) {
      Job& job = batch[i];
      const UnitId id = job.read.id;
      const bool drop = in_flight_[id].drop;
      in_flight_.erase(id);
      if (requests[i].status.ok()) {
        job.handle.Publish();
        ++stats_.completed;
        if (!drop && !stop_)
          held_.emplace(id, std::move(job.handle));
        else
          job.handle.Reset();
      } else {
        Status failed =
            requests[i].status.WithContext(StrFormat("prefetching %s", UnitName(id).c_str()));
        job.handle.Abort(failed);
        ++stats_.failed;
        if (!drop && !stop_) failed_[id] = std::move(failed);
      }
    }
    if (in_flight_.empty()) idle_cv_.notify_all();
  }
}

Result<CacheHandle> Prefetcher::Wait(UnitId id) {
  CacheHandle held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto e = failed_.find(id); e != failed_.end()) {
      Status st = std::move(e->second);
      failed_.erase(e);
      return st;
    }
    if (auto it = held_.find(id); it != held_.end()) {
      held = std::move(it->second);
      held_.erase(it);
    } else if (auto q = queued_.find(id); q != queued_.end()) {
      q->second->claimed = true;
    } else if (auto f = in_flight_.find(id); f != in_flight_.end()) {
      f->second.drop = true;
    }
  }
  CacheHandle h = cache_->Lookup(id);  // the access; pins before the held pin goes
  held.Reset();
  if (!h.valid()) {
    return Status::NotFound(StrFormat(
        "prefetcher: %s is neither cached nor queued (never enqueued, cancelled, or evicted)",
        UnitName(id).c_str()));
  }
  WEIR_RETURN_IF_ERROR(h.Wait());
  return h;
}

Result<CacheHandle> Prefetcher::Get(const UnitRead& read) {
  WEIR_RETURN_IF_ERROR(CheckRead(read));
  CacheHandle held;
  std::optional<Job> stolen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_.erase(read.id);  // a failed prefetch is retried on demand
    if (auto it = held_.find(read.id); it != held_.end()) {
      held = std::move(it->second);
      held_.erase(it);
    } else if (auto q = queued_.find(read.id); q != queued_.end()) {
      stolen.emplace(std::move(*q->second));
      queue_.erase(q->second);
      queued_.erase(q);
      ++stats_.stolen;
    } else if (auto f = in_flight_.find(read.id); f != in_flight_.end()) {
      f->second.drop = true;
    }
  }
  if (stolen) {
    Status st = Load(stolen->read, stolen->handle, /*count_bytes=*/true);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++(st.ok() ? stats_.completed : stats_.failed);
    }
    if (!st.ok()) return st;
    held = std::move(stolen->handle);  // now a reader pin, dropped after the access below
  }
  Result<CacheHandle> acquired = cache_->Acquire(read.id, read.length, read.partition);
  // A cancelled read in flight keeps its entry pinned until its batch ends (the device writes
  // into it until then), so a compute thread that runs ahead of a descheduled I/O thread can
  // find its partition pinned by reads nobody wants. That room is only late, not taken: wait
  // for it rather than report OutOfMemory. Each round waits for a batch to end, and rounds
  // continue only while new cancelled reads pin the partition.
  while (!acquired.ok() && acquired.status().code() == Status::Code::kOutOfMemory &&
         WaitForDroppedReads(read.partition)) {
    acquired = cache_->Acquire(read.id, read.length, read.partition);
  }
  WEIR_ASSIGN_OR_RETURN(CacheHandle h, std::move(acquired));
  held.Reset();
  if (h.is_loader()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.on_demand;
    }
    WEIR_RETURN_IF_ERROR(Load(read, h, /*count_bytes=*/true));
    return h;
  }
  WEIR_RETURN_IF_ERROR(h.Wait());
  return h;
}

bool Prefetcher::Cancel(UnitId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto q = queued_.find(id); q != queued_.end()) {
    q->second->handle.Abort(
        Status::NotFound(StrFormat("prefetch of %s was cancelled", UnitName(id).c_str())));
    queue_.erase(q->second);
    queued_.erase(q);
    ++stats_.cancelled;
    return true;
  }
  if (auto f = in_flight_.find(id); f != in_flight_.end()) {
    f->second.drop = true;  // released when its batch ends; Get waits for that if it must
    return true;
  }
  const bool dropped_failure = failed_.erase(id) != 0;
  return held_.erase(id) != 0 || dropped_failure;
}

size_t Prefetcher::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = queue_.size() + held_.size() + failed_.size();
  failed_.clear();
  for (Job& job : queue_) {
    job.handle.Abort(
        Status::NotFound(StrFormat("prefetch of %s was cancelled", UnitName(job.read.id).c_str())));
  }
  stats_.cancelled += queue_.size();
  queue_.clear();
  queued_.clear();
  for (auto& [id, f] : in_flight_) {
    if (!f.drop) ++n;
    f.drop = true;
  }
  held_.clear();
  return n;
}

bool Prefetcher::WaitForDroppedReads(uint32_t partition) {
  std::unique_lock<std::mutex> lock(mu_);
  auto pinned_by_dropped = [&] {
    for (const auto& [id, f] : in_flight_) {
      if (f.drop && f.partition == partition) return true;
    }
    return false;
  };
  if (!pinned_by_dropped()) return false;
  // The batch ends (and its dropped entries are unpinned) under mu_, before idle_cv_ fires.
  idle_cv_.wait(lock, [&] { return !pinned_by_dropped(); });
  return true;
}

void Prefetcher::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return in_flight_.empty(); });
}

void Prefetcher::Shutdown() {
  std::lock_guard<std::mutex> once(shutdown_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (Job& job : queue_) {
      job.handle.Abort(
          Status::NotFound(StrFormat("prefetch of %s was cancelled: the prefetcher shut down",
                                     UnitName(job.read.id).c_str())));
    }
    stats_.cancelled += queue_.size();
    queue_.clear();
    queued_.clear();
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  held_.clear();
  failed_.clear();
}

Prefetcher::Stats Prefetcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace weir::storage
