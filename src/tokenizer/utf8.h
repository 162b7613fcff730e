// Lenient UTF-8 helpers for the tokenizers: splitting text into characters without ever
// failing on bad input, and encoding code points.
//
// A "unit" is one well-formed UTF-8 sequence (1-4 bytes, lead byte plus the continuation bytes it
// announces). Any byte that does not start a complete sequence (a stray continuation byte, a lead
// byte followed by too few continuation bytes, 0xF8-0xFF) is a unit of its own, so every input
// splits into units that cover it exactly. Overlong forms and surrogates are not rejected: they
// are never in a vocabulary and end up as byte tokens or unk.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weir::tokenizer {

// Length in bytes (>= 1) of the unit starting at text[pos]; pos < text.size().
size_t Utf8UnitLength(std::string_view text, size_t pos);

// Decodes the unit at text[pos] (length `len` from Utf8UnitLength). A single-byte unit that is
// not ASCII (a bad byte) decodes to kBadByteCodePoint.
inline constexpr uint32_t kBadByteCodePoint = 0xFFFFFFFFu;
uint32_t Utf8Decode(std::string_view text, size_t pos, size_t len);

// Appends the UTF-8 encoding of code point cp (cp < 0x110000) to *out.
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace weir::tokenizer
