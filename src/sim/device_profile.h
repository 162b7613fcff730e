// DeviceProfile: the memory hierarchy the simulator and planner model, loaded from a JSON data
// file (profiles/*.json at the repository root; `weir probe` writes this-machine.json).
//
//   memory   the tier compute reads weights from (phone DRAM, or GPU memory): capacity and
//            bandwidth. Static tensors and the weight cache live here.
//   host     optional middle tier (host DRAM behind PCIe for a GPU): capacity for cached
//            weights and the link bandwidth to `memory`.
//   storage  flash / NVMe: read throughput as a function of request size, measured or taken
//            from the literature, interpolated log-linearly in the request size; above the
//            largest point it stays at that point's throughput; below the smallest point a
//            request takes as long as one of the smallest size (constant IOPS: block devices
//            read whole blocks and tiny reads are latency bound). A curve with one point at
//            1 byte is flat for every size.
//   compute  optional FLOP rate; 0 leaves compute out of the time model.
//   concurrent_io  whether storage reads overlap memory reads and compute within a stage.
//
// JSON schema (GB = 1e9 bytes, decimal, everywhere in profiles):
//   { "name": "a18", "description": "...", "source": "...",
//     "memory":  { "name": "LPDDR5X", "capacity_GB": 8, "bandwidth_GBps": 60 },
//     "host":    { "name": "DDR4", "capacity_GB": 64, "link_GBps": 12 },          (optional)
//     "storage": { "name": "NVMe", "read": [ {"request_bytes": 4096, "GBps": 0.3}, ... ] },
//     "compute": { "GFLOPS": 1000 },                                                (optional)
//     "concurrent_io": false }
//
// Thread safety: plain values.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace weir::sim {

constexpr double kGB = 1e9;

struct BandwidthPoint {
  double request_bytes = 0;
  double bytes_per_s = 0;
};

// Read throughput vs request size.
struct BandwidthCurve {
  std::vector<BandwidthPoint> points;  // ascending request_bytes, all positive

  // Throughput for requests of `request_bytes` (see above for both ends).
  double At(double request_bytes) const;
  double Peak() const;
  // Seconds to read `request_bytes` as one request.
  double Seconds(double request_bytes) const {
    return request_bytes > 0 ? request_bytes / At(request_bytes) : 0;
  }
  // Multiplies every point so that Peak() == peak_bytes_per_s (flash-speed sweeps).
  void ScaleToPeak(double peak_bytes_per_s);
  // The same throughput for every request size.
  static BandwidthCurve Flat(double bytes_per_s);
};

struct DeviceProfile {
  std::string name;
  std::string description;
  std::string source;
  std::string memory_name = "DRAM";
  double memory_capacity_bytes = 0;
  double memory_bandwidth = 0;  // bytes/s
  bool has_host = false;
  std::string host_name = "host DRAM";
  double host_capacity_bytes = 0;
  double host_link_bandwidth = 0;  // bytes/s
  std::string storage_name = "flash";
  BandwidthCurve storage_read;
  double flops_per_s = 0;
  bool concurrent_io = false;
};

Status ValidateDeviceProfile(const DeviceProfile& p, const std::string& where);
Result<DeviceProfile> ParseDeviceProfile(const std::string& json_text, const std::string& where);
Result<DeviceProfile> LoadDeviceProfile(const std::string& path);
// JSON text in the schema above (pretty-printed, trailing newline).
std::string DeviceProfileToJson(const DeviceProfile& p);

}  // namespace weir::sim
