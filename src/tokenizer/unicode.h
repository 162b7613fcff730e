// Unicode character properties the pre-tokenizers need, read from tables generated from the
// Unicode Character Database (scripts/gen-unicode-tables writes unicode_tables.inc from Debian's
// unicode-data package; nothing here is typed by hand): the major general category of a code point
// (L letter, M mark, N number, P punctuation, S symbol, Z separator, C other/unassigned) and the
// White_Space property (what a regex's \s matches).
//
// Thread safety: pure functions over constant tables.
#pragma once

#include <cstdint>

namespace weir::tokenizer {

enum class MajorCategory : uint8_t { kNone = 0, kL = 1, kM, kN, kP, kS, kZ, kC };

// Category and white space in one byte: bits 0-2 the MajorCategory, bit 3 White_Space.
// kBadByteCodePoint (utf8.h) and code points beyond U+10FFFF are kC without white space.
uint8_t UnicodeFlags(uint32_t cp);

inline constexpr uint8_t kUnicodeWhiteSpaceBit = 8;
inline MajorCategory CategoryOf(uint8_t flags) { return static_cast<MajorCategory>(flags & 7); }
inline bool IsWhiteSpace(uint8_t flags) { return (flags & kUnicodeWhiteSpaceBit) != 0; }

// The Unicode version the tables were generated from (e.g. "Unicode 15.0.0").
const char* UnicodeTablesVersion();

}  // namespace weir::tokenizer
