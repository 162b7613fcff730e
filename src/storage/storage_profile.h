// StorageProfile and ServiceModel: a small, deterministic model of how long a flash or NVMe
// device takes to serve reads, used by ThrottledDevice to make this machine's disk behave like a
// phone's UFS storage (and by the simulator to predict I/O time without doing I/O).
//
// The model, per request of `bytes` arriving at time t (all times in seconds):
//   1. it waits for one of `queue_depth` slots (the device's internal parallelism);
//   2. it spends `access_latency_s` in the flash (overlaps with other requests' latencies);
//   3. it then occupies the shared bus, one request at a time, for
//        command_overhead_s + max(bytes, min_transfer_bytes) / peak_bytes_per_s.
// So one small read at a time costs latency + overhead + transfer (slow: flash is slow for
// small reads, ActiveFlow Fig. 7), many reads in flight hide the latency, and the serialized
// per-command overhead caps IOPS, which is why chunks of ~64 KiB and more are needed to approach
// the peak bandwidth. The profiles' numbers are approximations; docs/storage.md gives their
// sources and the throughput they imply.
//
// Thread safety: StorageProfile is a value; a ServiceModel must be guarded by its user.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace weir::storage {

struct StorageProfile {
  std::string name;
  double peak_bytes_per_s = 1e9;  // sustained sequential read bandwidth of the bus
  double access_latency_s = 0;    // per request, overlapping across in-flight requests
  double command_overhead_s = 0;  // per request, serialized on the bus (caps IOPS)
  uint32_t queue_depth = 32;      // requests the device works on at once (>= 1)
  size_t min_transfer_bytes = 0;  // smaller reads cost as much as this (a flash page)
};

// "ufs4", "ufs3.1", "ufs2.2", "nvme-pcie3", "a18-flash". NotFound lists the known names.
Result<StorageProfile> FindStorageProfile(std::string_view name);
std::vector<std::string> StorageProfileNames();
// InvalidArgument naming the field when a profile's numbers make no sense.
Status ValidateProfile(const StorageProfile& profile);

class ServiceModel {
 public:
  explicit ServiceModel(const StorageProfile& profile);

  // Schedules a request of `bytes` arriving at `arrival_s`; returns when it completes. Requests
  // are served in the order they are scheduled.
  double Schedule(double arrival_s, size_t bytes);

 private:
  StorageProfile profile_;
  std::vector<double> slot_free_s_;  // per queue slot: when it is free again
  double bus_free_s_ = 0;
};

// Throughput the model gives for back-to-back reads of `request_bytes` with `in_flight` requests
// always outstanding (in_flight = 1: one read at a time). Bytes per second. Deterministic.
double ModelThroughput(const StorageProfile& profile, size_t request_bytes, uint32_t in_flight);

}  // namespace weir::storage
