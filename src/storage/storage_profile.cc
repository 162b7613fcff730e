#include "storage/storage_profile.h"

#include <algorithm>
#include <cmath>

namespace weir::storage {

namespace {

// See docs/storage.md for where these numbers come from. GB = 1e9 bytes (spec sheets' unit).
// Peak bandwidth and command overhead are chosen so that, with many reads in flight, the model
// reproduces the read-vs-request-size curves of the simulator's profiles/*.json (which are shaped
// like ActiveFlow Fig. 7); the access latency adds what one read at a time costs.
std::vector<StorageProfile> BuiltInProfiles() {
  return {
      // name, peak B/s, access latency, command overhead, queue depth, min transfer
      {"ufs4", 4.0e9, 60e-6, 10.7e-6, 32, 4096},
      {"ufs3.1", 1.9e9, 80e-6, 14.2e-6, 32, 4096},
      {"ufs2.2", 0.9e9, 120e-6, 29.6e-6, 32, 4096},
      {"nvme-pcie3", 3.4e9, 80e-6, 7.0e-6, 64, 4096},
      // DIP's simulator (Federici et al., App. A): a flat 1 GB/s whatever the read size.
      {"a18-flash", 1.0e9, 0.0, 0.0, 32, 0},
  };
}

}  // namespace

Result<StorageProfile> FindStorageProfile(std::string_view name) {
  for (StorageProfile& p : BuiltInProfiles()) {
    if (p.name == name) return p;
  }
  std::string known;
  for (const std::string& n : StorageProfileNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::NotFound(StrFormat("unknown storage profile '%.*s' (known: %s)",
                                    static_cast<int>(name.size()), name.data(), known.c_str()));
}

std::vector<std::string> StorageProfileNames() {
  std::vector<std::string> names;
  for (const StorageProfile& p : BuiltInProfiles()) names.push_back(p.name);
  return names;
}

Status ValidateProfile(const StorageProfile& p) {
  auto bad = [&](const char* field, double v) {
    return Status::InvalidArgument(
        StrFormat("storage profile '%s': %s = %g is out of range", p.name.c_str(), field, v));
  };
  if (!std::isfinite(p.peak_bytes_per_s) || p.peak_bytes_per_s <= 0) {
    return bad("peak_bytes_per_s", p.peak_bytes_per_s);
  }
  if (!std::isfinite(p.access_latency_s) || p.access_latency_s < 0 || p.access_latency_s > 1) {
    return bad("access_latency_s", p.access_latency_s);
  }
  if (!std::isfinite(p.command_overhead_s) || p.command_overhead_s < 0 ||
      p.command_overhead_s > 1) {
    return bad("command_overhead_s", p.command_overhead_s);
  }
  if (p.queue_depth < 1 || p.queue_depth > 4096) return bad("queue_depth", p.queue_depth);
  return Status::Ok();
}

ServiceModel::ServiceModel(const StorageProfile& profile)
    : profile_(profile), slot_free_s_(std::max<uint32_t>(1, profile.queue_depth), 0.0) {}

double ServiceModel::Schedule(double arrival_s, size_t bytes) {
  auto slot = std::min_element(slot_free_s_.begin(), slot_free_s_.end());
  const double issue = std::max(arrival_s, *slot);
  const double in_flash_done = issue + profile_.access_latency_s;
  const double bus_start = std::max(in_flash_done, bus_free_s_);
  const double billed = static_cast<double>(std::max(bytes, profile_.min_transfer_bytes));
  const double done = bus_start + profile_.command_overhead_s + billed / profile_.peak_bytes_per_s;
  bus_free_s_ = done;
  *slot = done;
  return done;
}

double ModelThroughput(const StorageProfile& profile, size_t request_bytes, uint32_t in_flight) {
  ServiceModel model(profile);
  in_flight = std::max<uint32_t>(1, in_flight);
  // Closed loop: `in_flight` clients, each issuing its next read when the previous completes.
  constexpr int kRounds = 64;
  std::vector<double> client_ready(in_flight, 0.0);
  double last = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (uint32_t c = 0; c < in_flight; ++c) {
      client_ready[c] = model.Schedule(client_ready[c], request_bytes);
      last = std::max(last, client_ready[c]);
    }
  }
  const double total = static_cast<double>(request_bytes) * kRounds * in_flight;
  return last > 0 ? total / last : 0.0;
}

}  // namespace weir::storage
