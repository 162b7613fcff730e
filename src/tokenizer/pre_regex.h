// PreRegex: the subset of regular expressions that pre-tokenizer split patterns use (GPT-2,
// Llama 3, Qwen2, DeepSeek, ... as written in their tokenizer.json files), matched over code
// points with Perl/Oniguruma semantics: leftmost-first alternation, greedy quantifiers with
// backtracking.
//
// Syntax:
//   literals (any UTF-8 character), escapes \r \n \t \f \v \\ and any escaped punctuation;
//   \s \S (White_Space), \d (\p{Nd} is not tabulated: \d means \p{N}), \p{X} \P{X} with X one of
//   L M N P S Z C (major general categories, unicode.h);
//   classes [...] with ranges, negation [^...] and the escapes above inside;
//   groups (...) and (?:...), case-insensitive groups (?i:...) (ASCII letters), negative and
//   positive lookahead (?!...) (?=...);
//   quantifiers ? * + {n} {n,} {n,m} on characters and classes; only ? on groups;
//   anchors ^ and $ (start and end of the text being split).
// Anything else is a compile error naming the pattern and the offset.
//
// Thread safety: immutable after Compile; Match is const.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace weir::tokenizer {

// A text decoded for matching: code points (utf8.h units; a bad byte is kBadByteCodePoint),
// their unicode.h flags, and the byte offset of each unit (offsets has size() + 1 entries).
struct CodePoints {
  std::vector<uint32_t> cps;
  std::vector<uint8_t> flags;
  std::vector<size_t> offsets;
  size_t size() const { return cps.size(); }
};
CodePoints DecodeForMatch(std::string_view text);

class PreRegex {
 public:
  static Result<PreRegex> Compile(std::string_view pattern);

  // Length in code points of the match starting exactly at `pos` within [begin, end) (anchors and
  // lookahead see only that range), or 0 when there is none (no pattern of the registry can match
  // the empty string; an empty match counts as none).
  size_t MatchAt(const CodePoints& text, size_t begin, size_t end, size_t pos) const;

  const std::string& pattern() const { return pattern_; }

  struct Node;  // internal

 private:
  std::string pattern_;
  std::shared_ptr<const std::vector<std::vector<Node>>> alts_;  // the top-level alternatives
};

}  // namespace weir::tokenizer
