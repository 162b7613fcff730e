#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <iterator>

#include "tokenizer/utf8.h"

namespace weir::tokenizer {
namespace {

struct Range {
  uint32_t first, last;
  uint8_t flags;
};

constexpr Range kRanges[] = {
#include "tokenizer/unicode_tables.inc"
};

constexpr uint8_t kUnassigned = static_cast<uint8_t>(MajorCategory::kC);

constexpr uint8_t Lookup(uint32_t cp) {
  // Last range starting at or before cp.
  const Range* it = std::upper_bound(std::begin(kRanges), std::end(kRanges), cp,
                                     [](uint32_t c, const Range& r) { return c < r.first; });
  if (it == std::begin(kRanges)) return kUnassigned;
  --it;
  return cp <= it->last ? it->flags : kUnassigned;
}

// Latin-1 answers without a search: most text is mostly ASCII.
constexpr std::array<uint8_t, 256> MakeLatin1() {
  std::array<uint8_t, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = Lookup(c);
  return t;
}
constexpr std::array<uint8_t, 256> kLatin1 = MakeLatin1();

static_assert(std::is_sorted(std::begin(kRanges), std::end(kRanges),
                             [](const Range& a, const Range& b) { return a.last < b.first; }));

}  // namespace

uint8_t UnicodeFlags(uint32_t cp) {
  if (cp < 256) return kLatin1[cp];
  if (cp > 0x10FFFF) return kUnassigned;  // includes kBadByteCodePoint
  return Lookup(cp);
}

const char* UnicodeTablesVersion() { return WEIR_UNICODE_TABLES_VERSION; }

}  // namespace weir::tokenizer
