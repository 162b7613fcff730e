// Parsing and printing of byte sizes ("512MiB", "1.5GiB", "4096") for flags like --memory.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace weir {

// Accepts a number with an optional suffix: B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (KB and
// KiB both mean 1024, as memory budgets are always binary here). Rejects negatives and overflow.
Result<uint64_t> ParseBytes(const std::string& text);

// "1.50 GiB", "512.0 MiB", "980 B".
std::string FormatBytes(uint64_t bytes);

}  // namespace weir
