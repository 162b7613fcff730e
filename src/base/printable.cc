// Printable (printable.h): a small UTF-8 decoder that escapes what it cannot pass through.
#include "base/printable.h"

#include <cstdint>
#include <cstdio>

namespace weir {
namespace {

// Length of the valid UTF-8 sequence at s[i] and its code point, or 0 when the bytes there are not
// one (RFC 3629: shortest form, no surrogates, at most U+10FFFF).
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  size_t n = 0;
  uint32_t v = 0;
  uint32_t min = 0;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xe0) == 0xc0) {
    n = 2, v = c & 0x1f, min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3, v = c & 0x0f, min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return n;
}

bool ChangesTheDisplay(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029 || cp == 0xfeff;
}

}  // namespace

std::string Printable(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  char buf[24];  // the longest size_t in decimal is 20 digits
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    size_t n = DecodeUtf8(text, i, &cp);
    if (i + (n == 0 ? 1 : n) > max_bytes) break;
    if (n == 0) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<uint8_t>(text[i]));
      out += buf;
      i += 1;
      continue;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7f) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (ChangesTheDisplay(cp)) {
      std::snprintf(buf, sizeof(buf), "\\u{%04x}", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  if (i < text.size()) {
    std::snprintf(buf, sizeof(buf), "%zu", text.size());
    out += "... (";
    out += buf;
    out += " bytes)";
  }
  return out;
}

}  // namespace weir
