#include "common/token_list.h"

#include <cerrno>
#include <cstdlib>

namespace weir::tools {

Result<std::vector<int32_t>> ParseTokenList(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find_first_of(", ", i);
    if (j == std::string::npos) j = text.size();
    if (j > i) {
      std::string item = text.substr(i, j - i);
      char* end = nullptr;
      errno = 0;
      long v = std::strtol(item.c_str(), &end, 10);
      if (*end != '\0' || errno != 0 || v < 0 || v > INT32_MAX) {
        return Status::InvalidArgument(StrFormat("bad token id '%s' in --tokens", item.c_str()));
      }
      ids.push_back(static_cast<int32_t>(v));
    }
    i = j + 1;
  }
  if (ids.empty()) return Status::InvalidArgument("--tokens is empty");
  return ids;
}

}  // namespace weir::tools
