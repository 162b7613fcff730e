#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace weir::tokenizer {
namespace {

constexpr bool StandsForItself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<uint16_t, 256> MakeByteToCodePoint() {
  std::array<uint16_t, 256> table{};
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    table[b] = static_cast<uint16_t>(StandsForItself(b) ? b : 256 + next++);
  }
  return table;
}
constexpr std::array<uint16_t, 256> kByteToCodePoint = MakeByteToCodePoint();
constexpr int kMappedLimit = 256 + 68;  // code points in [0, kMappedLimit) may be in the mapping

constexpr std::array<int16_t, kMappedLimit> MakeCodePointToByte() {
  std::array<int16_t, kMappedLimit> table{};
  for (auto& v : table) v = -1;
  for (int b = 0; b < 256; ++b) table[kByteToCodePoint[b]] = static_cast<int16_t>(b);
  return table;
}
constexpr std::array<int16_t, kMappedLimit> kCodePointToByte = MakeCodePointToByte();

enum class CharClass { kWhitespace, kLetter, kNumber, kOther };

bool IsWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

CharClass Classify(uint32_t cp) {
  if (cp == kBadByteCodePoint) return CharClass::kOther;
  if (IsWhitespace(cp)) return CharClass::kWhitespace;
  if (cp < 0x80) {
    if (cp >= '0' && cp <= '9') return CharClass::kNumber;
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::kLetter;
    return CharClass::kOther;
  }
  if (cp <= 0xBF) {  // Latin-1 controls, punctuation and symbols; ª µ º are letters
    return (cp == 0xAA || cp == 0xB5 || cp == 0xBA) ? CharClass::kLetter : CharClass::kOther;
  }
  if (cp == 0xD7 || cp == 0xF7) return CharClass::kOther;
  if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
      (cp >= 0xFF00 && cp <= 0xFF20) || (cp >= 0x1F000 && cp <= 0x1FAFF)) {
    return CharClass::kOther;
  }
  return CharClass::kLetter;
}

// Walks the units of a text, with one unit of lookahead.
struct Unit {
  size_t len = 0;  // 0 past the end
  CharClass cls = CharClass::kOther;
};
Unit UnitAt(std::string_view text, size_t pos) {
  if (pos >= text.size()) return {};
  size_t len = Utf8UnitLength(text, pos);
  return {len, Classify(Utf8Decode(text, pos, len))};
}

// End of the run of units of class cls starting at pos.
size_t RunEnd(std::string_view text, size_t pos, CharClass cls) {
  for (Unit u = UnitAt(text, pos); u.len && u.cls == cls; u = UnitAt(text, pos)) pos += u.len;
  return pos;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at pos, or 0.
size_t ContractionLength(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  char c1 = text[pos + 1];
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  char c2 = text[pos + 2];
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// Length of the word starting at pos (pos < text.size()).
size_t WordLength(std::string_view text, size_t pos) {
  if (size_t n = ContractionLength(text, pos)) return n;
  Unit first = UnitAt(text, pos);
  // " ?X+" alternatives: an optional leading space, then a run of one class.
  size_t body = pos;
  Unit u = first;
  if (text[pos] == ' ') {
    Unit next = UnitAt(text, pos + 1);
    if (next.len && next.cls != CharClass::kWhitespace) {
      body = pos + 1;
      u = next;
    }
  }
  if (u.cls != CharClass::kWhitespace) return RunEnd(text, body, u.cls) - pos;
  // Whitespace: "\s+(?!\S)" takes the run but leaves its last unit to the word that follows,
  // unless the run ends the text or is a single unit ("\s+").
  size_t end = pos, last_start = pos;
  for (Unit w = first; w.len && w.cls == CharClass::kWhitespace; w = UnitAt(text, end)) {
    last_start = end;
    end += w.len;
  }
  if (end == text.size() || last_start == pos) return end - pos;
  return last_start - pos;
}

}  // namespace

uint32_t ByteToCodePoint(uint8_t b) { return kByteToCodePoint[b]; }

int CodePointToByte(uint32_t cp) {
  return cp < static_cast<uint32_t>(kMappedLimit) ? kCodePointToByte[cp] : -1;
}

std::vector<std::string_view> Gpt2PreSplit(std::string_view text) {
  std::vector<std::string_view> words;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = WordLength(text, pos);
    words.push_back(text.substr(pos, len));
    pos += len;
  }
  return words;
}

}  // namespace weir::tokenizer
