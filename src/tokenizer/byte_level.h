// GPT-2 style byte-level BPE support: the reversible byte <-> printable-character mapping and the
// pre-tokenizer that splits text into words before BPE.
//
// Byte mapping (as in GPT-2's bytes_to_unicode): the 188 bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF
// stand for the code point of the same value; the other 68 bytes, in increasing order, stand for
// U+0100, U+0101, ... U+0143 (so ' ' = 0x20 becomes U+0120 "Ġ", '\n' becomes U+010A "Ċ").
//
// Pre-split: an approximation of GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// implemented by hand over UTF-8 units with these character classes (the regex alternatives and
// their order are exact; only the classes are simplified):
//   whitespace: U+0009-U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029,
//               U+202F, U+205F, U+3000 (the Unicode White_Space set);
//   number:     ASCII '0'-'9' only;
//   letter:     ASCII letters, and every other non-ASCII code point except whitespace and these
//               symbol/punctuation ranges: U+0080-U+00BF (but ª µ º are letters), U+00D7, U+00F7,
//               U+2000-U+2BFF, U+3000-U+303F, U+FF00-U+FF20, U+1F000-U+1FAFF;
//   other:      everything else, including bytes that are not valid UTF-8.
// Differences from the real regex therefore only concern non-ASCII digits (e.g. '½' counts as a
// letter here, a number there) and the rarer non-ASCII symbols outside the listed ranges.
//
// Thread safety: pure functions over constant tables.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace weir::tokenizer {

// The code point that stands for byte b.
uint32_t ByteToCodePoint(uint8_t b);
// The byte that code point cp stands for, or -1 when cp is not in the mapping.
int CodePointToByte(uint32_t cp);

// Splits text into GPT-2 pre-tokenizer words; the words are views into text and cover it
// exactly, in order.
std::vector<std::string_view> Gpt2PreSplit(std::string_view text);

}  // namespace weir::tokenizer
