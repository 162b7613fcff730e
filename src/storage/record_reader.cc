#include "storage/record_reader.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace weir::storage {

namespace {
constexpr uint64_t kPage = 4096;
uint64_t RoundDown(uint64_t v, uint64_t a) { return v / a * a; }
uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

Result<std::unique_ptr<RecordReader>> RecordReader::Create(BlockDevice* device, uint64_t capacity,
                                                           uint64_t merge_gap) {
  if (device == nullptr) return Status::InvalidArgument("record reader: no device");
  if (capacity == 0) return Status::InvalidArgument("record reader: capacity 0");
  std::unique_ptr<RecordReader> r(new RecordReader());
  r->device_ = device;
  r->merge_gap_ = merge_gap;
  r->align_ = std::max<uint64_t>({1, device->required_alignment(), device->preferred_alignment()});
  const uint64_t bytes = RoundUp(capacity, kPage);
  if (!r->buffer_.Reset(static_cast<size_t>(bytes), static_cast<size_t>(std::max(r->align_, kPage)))) {
    return Status::OutOfMemory(
        StrFormat("record reader: cannot allocate a buffer of %llu bytes",
                  static_cast<unsigned long long>(bytes)));
  }
  // Touched once here, so that reads into it never fault pages in.
  std::memset(r->buffer_.data<std::byte>(), 0, r->buffer_.size());
  return r;
}

uint64_t RecordReader::Plan(uint64_t base, uint64_t record_bytes, const int64_t* slots, int64_t n,
                            uint64_t merge_gap, std::vector<Span>* reads) const {
  reads->clear();
  const uint64_t size = device_->size();
  uint64_t total = 0;
  for (int64_t k = 0; k < n;) {
    int64_t e = k + 1;  // the run slots[k] .. slots[e - 1]
    while (e < n && slots[e] == slots[e - 1] + 1) ++e;
    const uint64_t first = base + static_cast<uint64_t>(slots[k]) * record_bytes;
    const uint64_t last = base + static_cast<uint64_t>(slots[e - 1] + 1) * record_bytes;
    Span s{RoundDown(first, align_), std::min(RoundUp(last, align_), size)};  // last <= size
    if (!reads->empty() && s.begin <= reads->back().end + merge_gap) {
      total -= reads->back().end - reads->back().begin;
      reads->back().end = std::max(reads->back().end, s.end);
      total += reads->back().end - reads->back().begin;
    } else {
      reads->push_back(s);
      total += s.end - s.begin;
    }
    k = e;
  }
  return total;
}

Status RecordReader::Read(uint64_t base, uint64_t record_bytes, const int64_t* slots, int64_t n) {
  if (n < 0 || record_bytes == 0) {
    return Status::InvalidArgument("record reader: a negative count or empty records");
  }
  for (int64_t k = 0; k < n; ++k) {
    if (slots[k] < 0 || (k > 0 && slots[k] <= slots[k - 1])) {
      return Status::InvalidArgument(StrFormat(
          "record reader: slots must be ascending and distinct (slot %lld at %lld after %lld)",
          static_cast<long long>(slots[k]), static_cast<long long>(k),
          static_cast<long long>(k > 0 ? slots[k - 1] : -1)));
    }
  }
  if (n == 0) return Status::Ok();
  const uint64_t end = base + static_cast<uint64_t>(slots[n - 1] + 1) * record_bytes;
  if (end > device_->size()) {
    return Status::InvalidArgument(StrFormat(
        "record reader: record %lld ends at byte %llu, past the end of %s (%llu bytes)",
        static_cast<long long>(slots[n - 1]), static_cast<unsigned long long>(end),
        device_->name().c_str(), static_cast<unsigned long long>(device_->size())));
  }
  uint64_t total = Plan(base, record_bytes, slots, n, merge_gap_, &reads_);
  if (total > buffer_.size() && merge_gap_ > 0) total = Plan(base, record_bytes, slots, n, 0, &reads_);
  if (total > buffer_.size()) {
    return Status::OutOfMemory(StrFormat(
        "record reader: %lld records need %llu bytes of reads, the buffer holds %zu",
        static_cast<long long>(n), static_cast<unsigned long long>(total), buffer_.size()));
  }
  std::byte* buf = buffer_.data<std::byte>();
  requests_.resize(reads_.size());
  uint64_t pos = 0;
  for (size_t r = 0; r < reads_.size(); ++r) {
    requests_[r].offset = reads_[r].begin;
    requests_[r].length = static_cast<size_t>(reads_[r].end - reads_[r].begin);
    requests_[r].dst = buf + pos;
    requests_[r].status = Status::Ok();
    pos += reads_[r].end - reads_[r].begin;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = device_->Read(std::span<ReadRequest>(requests_));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_read += total;
    stats_.reads += reads_.size();
    stats_.seconds += seconds;
    if (st.ok()) stats_.records += static_cast<uint64_t>(n);
  }
  if (!st.ok()) return st.WithContext("record reader");
  // Move each record down to its compact place, in ascending order.
  size_t r = 0;
  pos = 0;
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t at = base + static_cast<uint64_t>(slots[k]) * record_bytes;
    while (at >= reads_[r].end) {
      pos += reads_[r].end - reads_[r].begin;
      ++r;
    }
    const std::byte* src = buf + pos + (at - reads_[r].begin);
    std::byte* dst = buf + static_cast<uint64_t>(k) * record_bytes;
    if (src != dst) std::memmove(dst, src, static_cast<size_t>(record_bytes));
  }
  return Status::Ok();
}

RecordReader::Stats RecordReader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace weir::storage
