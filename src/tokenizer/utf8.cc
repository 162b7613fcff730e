#include "tokenizer/utf8.h"

namespace weir::tokenizer {

size_t Utf8UnitLength(std::string_view text, size_t pos) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  size_t want;
  if (lead < 0x80) return 1;
  if (lead >= 0xC0 && lead <= 0xDF) {
    want = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    want = 3;
  } else if (lead >= 0xF0 && lead <= 0xF7) {
    want = 4;
  } else {
    return 1;  // continuation byte or 0xF8-0xFF: a unit on its own
  }
  if (text.size() - pos < want) return 1;
  for (size_t i = 1; i < want; ++i) {
    if ((static_cast<uint8_t>(text[pos + i]) & 0xC0) != 0x80) return 1;
  }
  return want;
}

uint32_t Utf8Decode(std::string_view text, size_t pos, size_t len) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (len == 1) return b0 < 0x80 ? b0 : kBadByteCodePoint;
  uint32_t cp = len == 2 ? (b0 & 0x1Fu) : len == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3Fu);
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace weir::tokenizer
