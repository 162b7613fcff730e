// Parses "1,2,3" token lists given on the command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace weir::tools {
Result<std::vector<int32_t>> ParseTokenList(const std::string& text);
}  // namespace weir::tools
