// ThrottledDevice: makes a real device behave like a slower storage profile (ufs4, a18-flash,
// ...). Every read is really performed by the wrapped device (the bytes are real); the wrapper
// only adds waiting: when a request arrives it is booked on the profile's ServiceModel (a
// virtual clock shared by all callers, so concurrent requests share the emulated bandwidth),
// then the real read runs, then the caller sleeps until the emulated completion time. If the
// real read is already slower than the profile, nothing is added (the profile is a ceiling on
// speed, never a replacement for the read); late_reads() counts those.
//
// A batch (Read) is booked as requests all arriving at once and completes when its last
// request would.
//
// Thread safety: ReadAt/Read may be called concurrently; the model is guarded by a mutex.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "storage/block_device.h"
#include "storage/storage_profile.h"

namespace weir::storage {

class ThrottledDevice : public BlockDevice {
 public:
  // InvalidArgument when the profile's numbers are out of range.
  static Result<std::unique_ptr<ThrottledDevice>> Create(std::unique_ptr<BlockDevice> inner,
                                                         const StorageProfile& profile);

  Status ReadAt(uint64_t offset, size_t length, void* dst) override;
  Status Read(std::span<ReadRequest> requests) override;
  uint64_t size() const override { return inner_->size(); }
  const std::string& name() const override { return name_; }
  size_t required_alignment() const override { return inner_->required_alignment(); }
  size_t preferred_alignment() const override { return inner_->preferred_alignment(); }

  const StorageProfile& profile() const { return profile_; }

  struct Stats {
    uint64_t requests = 0;
    uint64_t bytes = 0;
    double slept_s = 0;       // total time callers were held back to match the profile
    uint64_t late_reads = 0;  // reads whose real I/O already exceeded the emulated time
  };
  Stats stats() const;

 private:
  ThrottledDevice(std::unique_ptr<BlockDevice> inner, const StorageProfile& profile);
  double Now() const;
  // Books `n` requests arriving now; returns the latest completion time.
  double Book(std::span<const ReadRequest> requests);
  void WaitUntil(double done_s, size_t n_requests, uint64_t bytes);

  std::unique_ptr<BlockDevice> inner_;
  StorageProfile profile_;
  std::string name_;
  std::chrono::steady_clock::time_point epoch_;
  mutable std::mutex mu_;
  ServiceModel model_;
  Stats stats_;
};

}  // namespace weir::storage
