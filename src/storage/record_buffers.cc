#include "storage/record_buffers.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace weir::storage {

Result<std::unique_ptr<RecordBuffers>> RecordBuffers::Create(BlockDevice* device,
                                                             uint64_t buffer_bytes,
                                                             bool read_ahead) {
  if (device == nullptr) return Status::InvalidArgument("record buffers: no device");
  if (buffer_bytes == 0) return Status::InvalidArgument("record buffers: capacity 0");
  std::unique_ptr<RecordBuffers> b(new RecordBuffers());
  b->device_ = device;
  b->buffer_bytes_ = buffer_bytes;
  b->read_ahead_ = read_ahead;
  return b;
}

RecordBuffers::~RecordBuffers() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // a read in flight finishes first
}

Status RecordBuffers::Allocate() {
  std::unique_ptr<RecordReader> a, b;
  WEIR_ASSIGN_OR_RETURN(a, RecordReader::Create(device_, buffer_bytes_));
  if (read_ahead_) {
    WEIR_ASSIGN_OR_RETURN(b, RecordReader::Create(device_, buffer_bytes_));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);  // stats() reads the readers
    current_ = std::move(a);
    spare_ = std::move(b);
  }
  if (spare_ != nullptr) thread_ = std::thread([this] { Worker(); });
  return Status::Ok();
}

void RecordBuffers::Worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_state_ == JobState::kQueued; });
    if (stop_) return;
    job_state_ = JobState::kRunning;
    RecordReader* reader = spare_.get();  // not swapped while a job is queued or running
    const uint64_t before = reader->stats().bytes_read;
    lock.unlock();
    const Status st = reader->Read(job_.base, job_.record_bytes, job_.slots.data(),
                                   static_cast<int64_t>(job_.slots.size()));
    const uint64_t after = reader->stats().bytes_read;
    lock.lock();
    job_status_ = st;
    ahead_bytes_ += after - before;
    if (st.ok()) ahead_records_ += job_.slots.size();
    job_state_ = JobState::kDone;
    cv_.notify_all();
  }
}

bool RecordBuffers::WaitAhead() {
  std::unique_lock<std::mutex> lock(mu_);
  if (job_state_ == JobState::kNone) return false;
  cv_.wait(lock, [&] { return job_state_ == JobState::kDone; });
  job_state_ = JobState::kNone;
  return job_status_.ok();
}

void RecordBuffers::DropAhead() { WaitAhead(); }

bool RecordBuffers::ReadAhead(uint64_t base, uint64_t record_bytes, std::vector<int64_t> slots) {
  if (spare_ == nullptr || slots.empty()) return false;
  WaitAhead();
  std::lock_guard<std::mutex> lock(mu_);
  job_.base = base;
  job_.record_bytes = record_bytes;
  job_.slots = std::move(slots);
  job_status_ = Status::Ok();
  job_state_ = JobState::kQueued;
  cv_.notify_all();
  return true;
}

Result<bool> RecordBuffers::Read(uint64_t base, uint64_t record_bytes, const int64_t* slots,
                                 int64_t n, int32_t* places) {
  if (current_ == nullptr) WEIR_RETURN_IF_ERROR(Allocate());
  // What a finished read-ahead of this region holds (job_ is this thread's once waited for).
  const bool ahead = WaitAhead() && job_.base == base && job_.record_bytes == record_bytes;
  if (ahead) {
    // Merge the ascending slots with the ascending guessed ones: a hit takes the guess's place,
    // a guessed record not asked for frees its place for a miss.
    const std::vector<int64_t>& guess = job_.slots;
    const int64_t m = static_cast<int64_t>(guess.size());
    misses_.clear();
    free_places_.clear();
    int64_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && slots[i] == guess[static_cast<size_t>(j)]) {
        places[i++] = static_cast<int32_t>(j++);
      } else if (i < n && (j == m || slots[i] < guess[static_cast<size_t>(j)])) {
        misses_.push_back(i++);
      } else {
        free_places_.push_back(static_cast<int32_t>(j++));
      }
    }
    // Places past the guessed records, as far as the buffer goes, when the guess had fewer.
    const int64_t room = static_cast<int64_t>(spare_->capacity() / record_bytes);
    for (int64_t p = m; p < room && free_places_.size() < misses_.size(); ++p)
      free_places_.push_back(static_cast<int32_t>(p));
    if (misses_.size() <= free_places_.size()) {
      if (!misses_.empty()) {
        // The misses go through the buffer the compute no longer uses, then into free places.
        miss_slots_.clear();
        for (int64_t k : misses_) miss_slots_.push_back(slots[k]);
        const Status st = current_->Read(base, record_bytes, miss_slots_.data(),
                                         static_cast<int64_t>(miss_slots_.size()));
        if (st.code() == Status::Code::kOutOfMemory) return false;
        WEIR_RETURN_IF_ERROR(st);
        std::byte* dst = spare_->mutable_data();
        const std::byte* src = current_->data();
        for (size_t t = 0; t < misses_.size(); ++t) {
          std::memcpy(dst + static_cast<uint64_t>(free_places_[t]) * record_bytes,
                      src + t * record_bytes, static_cast<size_t>(record_bytes));
          places[misses_[t]] = free_places_[t];
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      ahead_used_ += static_cast<uint64_t>(n) - misses_.size();
      std::swap(current_, spare_);
      return true;
    }
  }
  const Status st = current_->Read(base, record_bytes, slots, n);
  if (st.code() == Status::Code::kOutOfMemory) return false;
  WEIR_RETURN_IF_ERROR(st);
  for (int64_t k = 0; k < n; ++k) places[k] = static_cast<int32_t>(k);
  return true;
}

RecordBuffers::Stats RecordBuffers::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  for (const RecordReader* r : {current_.get(), spare_.get()}) {
    if (r == nullptr) continue;
    const RecordReader::Stats t = r->stats();
    s.reads.bytes_read += t.bytes_read;
    s.reads.reads += t.reads;
    s.reads.records += t.records;
    s.reads.seconds += t.seconds;
  }
  s.ahead_bytes = ahead_bytes_;
  s.ahead_records = ahead_records_;
  s.ahead_records_used = ahead_used_;
  return s;
}

}  // namespace weir::storage
