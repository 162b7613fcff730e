#include "base/memory_info.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace weir {
namespace {

std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return std::nullopt;
  try {
    return static_cast<uint64_t>(std::stoull(s));
  } catch (...) {
    return std::nullopt;
  }
}

// The memory cgroups this process is in that have a limit: (limit, usage) of each.
std::vector<std::pair<uint64_t, uint64_t>> CgroupLimits() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::vector<std::pair<uint64_t, uint64_t>> out;
  while (std::getline(in, line)) {
    // "ID:CONTROLLERS:PATH"; v2 has ID 0 and no controllers, v1 lists "memory".
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::optional<uint64_t> limit, usage;
    if (controllers.empty()) {
      limit = ReadNumber("/sys/fs/cgroup" + path + "/memory.max");
      usage = ReadNumber("/sys/fs/cgroup" + path + "/memory.current");
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      limit = ReadNumber("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
      usage = ReadNumber("/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes");
    }
    // v1 reports "no limit" as a huge number; anything past 2^60 is treated as none.
    if (!limit || !usage || *limit >= (uint64_t{1} << 60)) continue;
    out.emplace_back(*limit, *usage);
  }
  return out;
}

// Room left under the memory cgroup's limit, when the process is in one with a limit.
std::optional<uint64_t> CgroupRoom() {
  std::optional<uint64_t> room;
  for (const auto& [limit, usage] : CgroupLimits()) {
    const uint64_t r = limit > usage ? limit - usage : 0;
    room = room ? std::min(*room, r) : r;
  }
  return room;
}

}  // namespace

std::optional<uint64_t> AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  std::optional<uint64_t> avail;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    uint64_t kib = 0;
    if (fields >> kib) avail = kib * 1024;
    break;
  }
  if (!avail) return std::nullopt;
  if (auto room = CgroupRoom()) return std::min(*avail, *room);
  return avail;
}

std::optional<uint64_t> ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (!(in >> size_pages >> resident_pages)) return std::nullopt;
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return std::nullopt;
  return resident_pages * static_cast<uint64_t>(page);
}

std::optional<uint64_t> CgroupMemoryLimit() {
  std::optional<uint64_t> smallest;
  for (const auto& lu : CgroupLimits()) smallest = smallest ? std::min(*smallest, lu.first) : lu.first;
  return smallest;
}

void ReturnFreeHeap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace weir
