// AvailableMemoryBytes: how much memory this process could still take without pushing the
// machine (or its memory cgroup) into reclaim: the kernel's MemAvailable, lowered to the
// cgroup's limit minus its usage when one applies (v1 and v2).
//
// Thread safety: reads /proc and /sys; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>

namespace weir {

// nullopt when /proc/meminfo cannot be read (not Linux, or a restricted sandbox).
std::optional<uint64_t> AvailableMemoryBytes();

// The memory limit of the process's memory cgroup (the smallest, v1 or v2; page cache counts
// against it), or nullopt when it is in none with a limit.
std::optional<uint64_t> CgroupMemoryLimit();

// The calling process's resident set now (/proc/self/statm), or nullopt where it cannot be read.
std::optional<uint64_t> ResidentBytes();

// Gives the heap's free pages back to the OS (glibc's malloc_trim; nothing elsewhere), so that
// what a load freed is not counted as resident afterwards.
void ReturnFreeHeap();

}  // namespace weir
