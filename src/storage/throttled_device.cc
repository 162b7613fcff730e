#include "storage/throttled_device.h"

#include <algorithm>
#include <thread>

namespace weir::storage {

Result<std::unique_ptr<ThrottledDevice>> ThrottledDevice::Create(std::unique_ptr<BlockDevice> inner,
                                                                 const StorageProfile& profile) {
  WEIR_RETURN_IF_ERROR(ValidateProfile(profile));
  return std::unique_ptr<ThrottledDevice>(new ThrottledDevice(std::move(inner), profile));
}

ThrottledDevice::ThrottledDevice(std::unique_ptr<BlockDevice> inner, const StorageProfile& profile)
    : inner_(std::move(inner)),
      profile_(profile),
      name_("throttled(" + profile.name + "):" + inner_->name()),
      epoch_(std::chrono::steady_clock::now()),
      model_(profile) {}

double ThrottledDevice::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

double ThrottledDevice::Book(std::span<const ReadRequest> requests) {
  const double now = Now();
  std::lock_guard<std::mutex> lock(mu_);
  double done = now;
  for (const ReadRequest& r : requests) done = std::max(done, model_.Schedule(now, r.length));
  return done;
}

void ThrottledDevice::WaitUntil(double done_s, size_t n_requests, uint64_t bytes) {
  const double remaining = done_s - Now();
  if (remaining > 0) {
    std::this_thread::sleep_until(epoch_ + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::duration<double>(done_s)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.requests += n_requests;
  stats_.bytes += bytes;
  if (remaining > 0)
    stats_.slept_s += remaining;
  else
    ++stats_.late_reads;
}

Status ThrottledDevice::ReadAt(uint64_t offset, size_t length, void* dst) {
  WEIR_RETURN_IF_ERROR(CheckRead(offset, length, dst));
  ReadRequest r{offset, length, dst, Status::Ok()};
  const double done = Book(std::span<const ReadRequest>(&r, 1));
  Status st = inner_->ReadAt(offset, length, dst);
  WaitUntil(done, 1, length);
  return st;
}

Status ThrottledDevice::Read(std::span<ReadRequest> requests) {
  uint64_t bytes = 0;
  for (const ReadRequest& r : requests) bytes += r.length;
  const double done = Book(requests);
  Status st = inner_->Read(requests);
  WaitUntil(done, requests.size(), bytes);
  return st;
}

ThrottledDevice::Stats ThrottledDevice::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace weir::storage
