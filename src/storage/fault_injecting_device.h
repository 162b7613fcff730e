// FaultInjectingDevice: wraps a device and breaks some of its reads on purpose, so tests can
// prove that every layer above turns a failed read into a clean Status and never into wrong
// bytes. Faults: EIO on every read from the N-th on, EIO with probability p (seeded, so a test
// is reproducible), short reads (only a prefix of the buffer is filled, then IoError), and an
// added delay per call (to widen race windows in concurrency tests).
//
// Reads are numbered in the order they reach the wrapper; a batch of n requests counts n.
//
// Thread safety: ReadAt/Read may be called concurrently; fault decisions are serialized.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "storage/block_device.h"

namespace weir::storage {

struct FaultOptions {
  // Reads numbered >= fail_after_reads fail with EIO (0 fails every read; max = never).
  uint64_t fail_after_reads = std::numeric_limits<uint64_t>::max();
  double fail_probability = 0.0;        // each read fails with EIO with this probability
  double short_read_probability = 0.0;  // each read delivers only a prefix, then IoError
  std::chrono::microseconds delay{0};   // slept at the start of each ReadAt / Read call
  uint64_t seed = 1;
};

class FaultInjectingDevice : public BlockDevice {
 public:
  FaultInjectingDevice(std::unique_ptr<BlockDevice> inner, const FaultOptions& options);

  Status ReadAt(uint64_t offset, size_t length, void* dst) override;
  Status Read(std::span<ReadRequest> requests) override;
  uint64_t size() const override { return inner_->size(); }
  const std::string& name() const override { return name_; }
  size_t required_alignment() const override { return inner_->required_alignment(); }
  size_t preferred_alignment() const override { return inner_->preferred_alignment(); }

  uint64_t reads() const;            // reads seen so far
  uint64_t injected_faults() const;  // reads broken so far

 private:
  enum class Fault { kNone, kError, kShort };
  // Decides the fate of the next read; for kShort also how many bytes it delivers.
  Fault Next(size_t length, size_t* short_bytes);
  Status Apply(Fault fault, size_t short_bytes, uint64_t offset, size_t length, void* dst);

  std::unique_ptr<BlockDevice> inner_;
  FaultOptions options_;
  std::string name_;
  mutable std::mutex mu_;
  std::mt19937_64 rng_;
  uint64_t reads_ = 0;
  uint64_t faults_ = 0;
};

}  // namespace weir::storage
