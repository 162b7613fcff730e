#include "storage/fault_injecting_device.h"

#include <cinttypes>
#include <thread>
#include <vector>

namespace weir::storage {

FaultInjectingDevice::FaultInjectingDevice(std::unique_ptr<BlockDevice> inner,
                                           const FaultOptions& options)
    : inner_(std::move(inner)),
      options_(options),
      name_("faulty:" + inner_->name()),
      rng_(options.seed) {}

uint64_t FaultInjectingDevice::reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}

uint64_t FaultInjectingDevice::injected_faults() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_;
}

FaultInjectingDevice::Fault FaultInjectingDevice::Next(size_t length, size_t* short_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t n = reads_++;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  // Draw both numbers for every read so a seed gives the same fault sequence whatever the mix.
  const double u_fail = uniform(rng_);
  const double u_short = uniform(rng_);
  const uint64_t cut = rng_();
  Fault f = Fault::kNone;
  if (n >= options_.fail_after_reads || u_fail < options_.fail_probability) {
    f = Fault::kError;
  } else if (length > 0 && u_short < options_.short_read_probability) {
    f = Fault::kShort;
    *short_bytes = static_cast<size_t>(cut % length);
  }
  if (f != Fault::kNone) ++faults_;
  return f;
}

Status FaultInjectingDevice::Apply(Fault fault, size_t short_bytes, uint64_t offset, size_t length,
                                   void* dst) {
  switch (fault) {
    case Fault::kNone:
      return Status::Ok();
    case Fault::kError:
      return Status::IoError(StrFormat("%s: read of %zu bytes at offset %" PRIu64
                                       ": Input/output error (injected)",
                                       name_.c_str(), length, offset));
    case Fault::kShort: {
      if (short_bytes > 0) {
        Status st = inner_->ReadAt(offset, short_bytes, dst);
        if (!st.ok()) return st;
      }
      return Status::IoError(StrFormat("%s: short read at offset %" PRIu64
                                       ": %zu of %zu bytes (injected)",
                                       name_.c_str(), offset, short_bytes, length));
    }
  }
  return Status::Internal("unreachable");
}

Status FaultInjectingDevice::ReadAt(uint64_t offset, size_t length, void* dst) {
  WEIR_RETURN_IF_ERROR(CheckRead(offset, length, dst));
  if (options_.delay.count() > 0) std::this_thread::sleep_for(options_.delay);
  size_t short_bytes = 0;
  Fault f = Next(length, &short_bytes);
  if (f != Fault::kNone) return Apply(f, short_bytes, offset, length, dst);
  return inner_->ReadAt(offset, length, dst);
}

Status FaultInjectingDevice::Read(std::span<ReadRequest> requests) {
  if (options_.delay.count() > 0) std::this_thread::sleep_for(options_.delay);
  std::vector<ReadRequest> healthy;
  std::vector<size_t> healthy_index;
  for (size_t i = 0; i < requests.size(); ++i) {
    ReadRequest& r = requests[i];
    r.status = CheckRead(r.offset, r.length, r.dst);
    if (!r.status.ok()) continue;
    size_t short_bytes = 0;
    Fault f = Next(r.length, &short_bytes);
    if (f != Fault::kNone) {
      r.status = Apply(f, short_bytes, r.offset, r.length, r.dst);
    } else {
      healthy.push_back({r.offset, r.length, r.dst, Status::Ok()});
      healthy_index.push_back(i);
    }
  }
  if (!healthy.empty()) {
    (void)inner_->Read(std::span<ReadRequest>(healthy));
    for (size_t k = 0; k < healthy.size(); ++k)
      requests[healthy_index[k]].status = healthy[k].status;
  }
  return FirstError(requests);
}

}  // namespace weir::storage
