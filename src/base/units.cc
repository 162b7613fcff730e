#include "base/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace weir {

Result<uint64_t> ParseBytes(const std::string& text) {
  const char* s = text.c_str();
  char* end = nullptr;
  if (text.empty() || text[0] == '-') {
    return Status::InvalidArgument(StrFormat("bad byte size '%s'", text.c_str()));
  }
  double v = std::strtod(s, &end);
  if (end == s || !std::isfinite(v) || v < 0) {
    return Status::InvalidArgument(StrFormat("bad byte size '%s'", text.c_str()));
  }
  std::string suf(end);
  for (auto& c : suf) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 1;
  if (suf.empty() || suf == "b") mult = 1;
  else if (suf == "k" || suf == "kb" || suf == "kib") mult = 1024.0;
  else if (suf == "m" || suf == "mb" || suf == "mib") mult = 1024.0 * 1024;
  else if (suf == "g" || suf == "gb" || suf == "gib") mult = 1024.0 * 1024 * 1024;
  else if (suf == "t" || suf == "tb" || suf == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else return Status::InvalidArgument(StrFormat("bad byte size suffix in '%s'", text.c_str()));
  double bytes = v * mult;
  if (bytes >= 1.8e19) return Status::InvalidArgument(StrFormat("byte size '%s' too large", text.c_str()));
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return StrFormat("%llu B", static_cast<unsigned long long>(bytes));
  return StrFormat("%.2f %s", v, units[u]);
}

}  // namespace weir
