// GPT-2 style byte-level BPE support: the reversible byte <-> printable-character mapping (the
// pre-tokenizers that split text into words before BPE are in pre_split.h).
//
// Byte mapping (as in GPT-2's bytes_to_unicode): the 188 bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF
// stand for the code point of the same value; the other 68 bytes, in increasing order, stand for
// U+0100, U+0101, ... U+0143 (so ' ' = 0x20 becomes U+0120 "Ġ", '\n' becomes U+010A "Ċ").
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

}  // namespace weir::tokenizer
