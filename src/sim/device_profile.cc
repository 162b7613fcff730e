#include "sim/device_profile.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

namespace weir::sim {
namespace {

using nlohmann::json;

// Reads a number field; absent -> `fallback` when optional, else an error.
Result<double> Number(const json& obj, const char* key, const std::string& where, bool required,
                      double fallback = 0) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (!required) return fallback;
    return Status::InvalidArgument(StrFormat("%s: missing field '%s'", where.c_str(), key));
  }
  if (!it->is_number()) {
    return Status::InvalidArgument(StrFormat("%s: field '%s' must be a number, got %s",
                                             where.c_str(), key, it->dump().c_str()));
  }
  double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) {
    return Status::InvalidArgument(
        StrFormat("%s: field '%s' = %g must be finite and >= 0", where.c_str(), key, v));
  }
  return v;
}

std::string String(const json& obj, const char* key, const std::string& fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

Result<const json*> Object(const json& obj, const char* key, const std::string& where,
                           bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) {
      return Status::InvalidArgument(StrFormat("%s: missing object '%s'", where.c_str(), key));
    }
    return static_cast<const json*>(nullptr);
  }
  if (!it->is_object()) {
    return Status::InvalidArgument(StrFormat("%s: '%s' must be an object", where.c_str(), key));
  }
  return &*it;
}

}  // namespace

double BandwidthCurve::At(double request_bytes) const {
  if (points.empty()) return 0;
  // Below the smallest measured size a request costs as long as the smallest one: block
  // devices read whole blocks, and small reads are latency bound (constant IOPS).
  if (request_bytes < points.front().request_bytes) {
    return points.front().bytes_per_s * request_bytes / points.front().request_bytes;
  }
  if (request_bytes >= points.back().request_bytes) return points.back().bytes_per_s;
  auto hi = std::upper_bound(points.begin(), points.end(), request_bytes,
                             [](double r, const BandwidthPoint& p) { return r < p.request_bytes; });
  auto lo = hi - 1;
  double f = (std::log(request_bytes) - std::log(lo->request_bytes)) /
             (std::log(hi->request_bytes) - std::log(lo->request_bytes));
  return lo->bytes_per_s + f * (hi->bytes_per_s - lo->bytes_per_s);
}

double BandwidthCurve::Peak() const {
  double m = 0;
  for (const BandwidthPoint& p : points) m = std::max(m, p.bytes_per_s);
  return m;
}

void BandwidthCurve::ScaleToPeak(double peak) {
  double cur = Peak();
  if (cur <= 0) return;
  for (BandwidthPoint& p : points) p.bytes_per_s *= peak / cur;
}

BandwidthCurve BandwidthCurve::Flat(double bytes_per_s) {
  BandwidthCurve c;
  c.points.push_back({1, bytes_per_s});
  return c;
}

Status ValidateDeviceProfile(const DeviceProfile& p, const std::string& where) {
  if (p.name.empty()) return Status::InvalidArgument(StrFormat("%s: empty name", where.c_str()));
  if (!(p.memory_bandwidth > 0)) {
    return Status::InvalidArgument(
        StrFormat("%s: memory bandwidth %g must be > 0", where.c_str(), p.memory_bandwidth));
  }
  if (p.storage_read.points.empty()) {
    return Status::InvalidArgument(
        StrFormat("%s: storage has no read throughput points", where.c_str()));
  }
  for (size_t i = 0; i < p.storage_read.points.size(); ++i) {
    const BandwidthPoint& b = p.storage_read.points[i];
    if (!(b.request_bytes > 0) || !(b.bytes_per_s > 0)) {
      return Status::InvalidArgument(
          StrFormat("%s: storage read point %zu (%g bytes, %g B/s) "
                    "must be positive",
                    where.c_str(), i, b.request_bytes, b.bytes_per_s));
    }
    if (i > 0 && !(b.request_bytes > p.storage_read.points[i - 1].request_bytes)) {
      return Status::InvalidArgument(
          StrFormat("%s: storage read points must have increasing "
                    "request_bytes (point %zu: %g after %g)",
                    where.c_str(), i, b.request_bytes, p.storage_read.points[i - 1].request_bytes));
    }
  }
  if (p.has_host && !(p.host_link_bandwidth > 0)) {
    return Status::InvalidArgument(
        StrFormat("%s: host link bandwidth %g must be > 0", where.c_str(), p.host_link_bandwidth));
  }
  return Status::Ok();
}

Result<DeviceProfile> ParseDeviceProfile(const std::string& text, const std::string& where) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::InvalidArgument(StrFormat("%s: not a JSON object", where.c_str()));
  }
  DeviceProfile p;
  p.name = String(doc, "name", "");
  p.description = String(doc, "description", "");
  p.source = String(doc, "source", "");
  WEIR_ASSIGN_OR_RETURN(const json* mem, Object(doc, "memory", where, true));
  p.memory_name = String(*mem, "name", "DRAM");
  WEIR_ASSIGN_OR_RETURN(double cap, Number(*mem, "capacity_GB", where + ": memory", false));
  WEIR_ASSIGN_OR_RETURN(double bw, Number(*mem, "bandwidth_GBps", where + ": memory", true));
  p.memory_capacity_bytes = cap * kGB;
  p.memory_bandwidth = bw * kGB;

  WEIR_ASSIGN_OR_RETURN(const json* host, Object(doc, "host", where, false));
  if (host) {
    p.has_host = true;
    p.host_name = String(*host, "name", "host DRAM");
    WEIR_ASSIGN_OR_RETURN(double hc, Number(*host, "capacity_GB", where + ": host", true));
    WEIR_ASSIGN_OR_RETURN(double hl, Number(*host, "link_GBps", where + ": host", true));
    p.host_capacity_bytes = hc * kGB;
    p.host_link_bandwidth = hl * kGB;
  }

  WEIR_ASSIGN_OR_RETURN(const json* st, Object(doc, "storage", where, true));
  p.storage_name = String(*st, "name", "flash");
  auto read = st->find("read");
  if (read == st->end() || !read->is_array() || read->empty() || read->size() > 64) {
    return Status::InvalidArgument(
        StrFormat("%s: storage.read must be an array of 1..64 "
                  "{request_bytes, GBps} points",
                  where.c_str()));
  }
  for (size_t i = 0; i < read->size(); ++i) {
    const json& pt = (*read)[i];
    std::string w = StrFormat("%s: storage.read[%zu]", where.c_str(), i);
    if (!pt.is_object()) return Status::InvalidArgument(w + " must be an object");
    WEIR_ASSIGN_OR_RETURN(double rb, Number(pt, "request_bytes", w, true));
    WEIR_ASSIGN_OR_RETURN(double g, Number(pt, "GBps", w, true));
    p.storage_read.points.push_back({rb, g * kGB});
  }
  WEIR_ASSIGN_OR_RETURN(const json* comp, Object(doc, "compute", where, false));
  if (comp) {
    WEIR_ASSIGN_OR_RETURN(double gf, Number(*comp, "GFLOPS", where + ": compute", true));
    p.flops_per_s = gf * 1e9;
  }
  auto cio = doc.find("concurrent_io");
  if (cio != doc.end()) {
    if (!cio->is_boolean()) {
      return Status::InvalidArgument(
          StrFormat("%s: concurrent_io must be true or false", where.c_str()));
    }
    p.concurrent_io = cio->get<bool>();
  }
  WEIR_RETURN_IF_ERROR(ValidateDeviceProfile(p, where));
  return p;
}

Result<DeviceProfile> LoadDeviceProfile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    return Status::NotFound(
        StrFormat("%s: cannot open device profile: %s", path.c_str(), std::strerror(errno)));
  }
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    text.append(buf, n);
    if (text.size() > (1u << 20)) {
      std::fclose(f);
      return Status::InvalidArgument(
          StrFormat("%s: device profile larger than 1 MiB", path.c_str()));
    }
  }
  std::fclose(f);
  return ParseDeviceProfile(text, path);
}

std::string DeviceProfileToJson(const DeviceProfile& p) {
  using ojson = nlohmann::ordered_json;  // keeps the schema's field order in the file
  ojson doc;
  doc["name"] = p.name;
  doc["description"] = p.description;
  doc["source"] = p.source;
  doc["memory"] = ojson{{"name", p.memory_name},
                        {"capacity_GB", p.memory_capacity_bytes / kGB},
                        {"bandwidth_GBps", p.memory_bandwidth / kGB}};
  if (p.has_host) {
    doc["host"] = ojson{{"name", p.host_name},
                        {"capacity_GB", p.host_capacity_bytes / kGB},
                        {"link_GBps", p.host_link_bandwidth / kGB}};
  }
  ojson read = ojson::array();
  for (const BandwidthPoint& b : p.storage_read.points) {
    read.push_back(ojson{{"request_bytes", b.request_bytes}, {"GBps", b.bytes_per_s / kGB}});
  }
  doc["storage"] = ojson{{"name", p.storage_name}, {"read", read}};
  if (p.flops_per_s > 0) doc["compute"] = ojson{{"GFLOPS", p.flops_per_s / 1e9}};
  doc["concurrent_io"] = p.concurrent_io;
  return doc.dump(2) + "\n";
}

}  // namespace weir::sim
