// Printable: text that came from a file (a key, a tensor name, a type string) made safe to put in a
// one-line error message or a terminal.
//
// Valid UTF-8 of printable characters passes through unchanged. Escaped:
//   - backslash as \\, newline \n, carriage return \r, tab \t;
//   - other ASCII control bytes and DEL as \xNN;
//   - bytes that are not valid UTF-8 (stray continuation bytes, truncated or overlong sequences,
//     surrogates, code points past U+10FFFF) as \xNN, one per byte;
//   - the code points that change how a terminal shows the text around them: C1 controls
//     (U+0080..U+009F), the bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069),
//     the line and paragraph separators (U+2028, U+2029) and the BOM/ZWNBSP (U+FEFF), as \u{XXXX}.
// Text longer than `max_bytes` input bytes is cut at a character boundary at or before that many
// bytes and followed by "... (N bytes)" with its full length.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace weir {

inline constexpr size_t kPrintableDefaultBytes = 80;

std::string Printable(std::string_view text, size_t max_bytes = kPrintableDefaultBytes);

}  // namespace weir
