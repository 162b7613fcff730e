// The pre-tokenizer regex engine, the registry, the generated Unicode tables and special-token
// matching. The byte-for-byte comparison with Hugging Face tokenizers over a corpus is
// tests/tokenizer/tokenizers_oracle.py (ctest Tokenizer.HfTokenizersOracle).
#include "tokenizer/pre_split.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "format/tokenizer_spec.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace weir::tokenizer {
namespace {

using V = std::vector<std::string>;

V SplitWith(std::string_view name, std::string_view text) {
  auto s = PreSplitter::ForName(name);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  V out;
  if (!s.ok()) return out;
  for (std::string_view w : s->Split(text)) out.emplace_back(w);
  return out;
}

TEST(UnicodeTablesTest, CategoriesAndWhiteSpace) {
  EXPECT_EQ(CategoryOf(UnicodeFlags('a')), MajorCategory::kL);
  EXPECT_EQ(CategoryOf(UnicodeFlags('7')), MajorCategory::kN);
  EXPECT_EQ(CategoryOf(UnicodeFlags('!')), MajorCategory::kP);
  EXPECT_EQ(CategoryOf(UnicodeFlags('+')), MajorCategory::kS);
  EXPECT_EQ(CategoryOf(UnicodeFlags(0x4E2D)), MajorCategory::kL);   // 中, inside a CJK range
  EXPECT_EQ(CategoryOf(UnicodeFlags(0x0663)), MajorCategory::kN);   // Arabic-Indic three
  EXPECT_EQ(CategoryOf(UnicodeFlags(0x00BD)), MajorCategory::kN);   // ½
  EXPECT_EQ(CategoryOf(UnicodeFlags(0x0301)), MajorCategory::kM);   // combining acute
  EXPECT_EQ(CategoryOf(UnicodeFlags(0x1F600)), MajorCategory::kS);  // 😀
  EXPECT_EQ(CategoryOf(UnicodeFlags(0x10FFFF)), MajorCategory::kC);
  EXPECT_EQ(CategoryOf(UnicodeFlags(kBadByteCodePoint)), MajorCategory::kC);
  for (uint32_t ws : {0x09u, 0x0Au, 0x20u, 0x85u, 0xA0u, 0x2009u, 0x3000u}) {
    EXPECT_TRUE(IsWhiteSpace(UnicodeFlags(ws))) << ws;
  }
  EXPECT_FALSE(IsWhiteSpace(UnicodeFlags(0x200B)));  // zero-width space is not White_Space
  EXPECT_NE(std::string(UnicodeTablesVersion()).find("Unicode"), std::string::npos);
}

TEST(PreRegexTest, CompileErrorsNameThePatternAndOffset) {
  for (std::string_view bad :
       {"(ab", "a)", "[abc", "\\p{Xx}", "a{3,1}", "(?<n>a)", "(ab)+", "a+?"}) {
    auto r = PreRegex::Compile(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(std::string(bad)), std::string::npos)
        << r.status().ToString();
  }
}

size_t MatchLen(std::string_view pattern, std::string_view text) {
  auto r = PreRegex::Compile(pattern);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  CodePoints cp = DecodeForMatch(text);
  size_t n = r->MatchAt(cp, 0, cp.size(), 0);
  return cp.offsets[n];  // in bytes
}

TEST(PreRegexTest, BacktrackingLookaheadQuantifiersAndCase) {
  EXPECT_EQ(MatchLen(R"(\s+(?!\S))", "   x"), 2u);  // leaves the last space to the word
  EXPECT_EQ(MatchLen(R"(\s+(?!\S))", "   "), 3u);
  EXPECT_EQ(MatchLen(R"(\p{N}{1,3})", "12345"), 3u);
  EXPECT_EQ(MatchLen(R"((?i:'s|'ll))", "'LL"), 3u);
  EXPECT_EQ(MatchLen(R"('s|'ll)", "'LL"), 0u);
  EXPECT_EQ(MatchLen(R"([^\r\n\p{L}\p{N}]?\p{L}+)", " caf\xC3\xA9!"), 6u);
  EXPECT_EQ(MatchLen(R"(\s*[\r\n]+)", "  \n\nx"), 4u);
  EXPECT_EQ(MatchLen(R"(a?ab)", "ab"), 2u);  // the optional part gives its character back
  EXPECT_EQ(MatchLen(R"(\s+$)", "  "), 2u);
  EXPECT_EQ(MatchLen(R"(\s+$)", "  x"), 0u);
  EXPECT_EQ(MatchLen("[\xE4\xB8\x80-\xE9\xBE\xA5]+", "\xE4\xB8\xAD\xE6\x96\x87x"), 6u);  // 一-龥
}

TEST(PreSplitTest, RegistryPatterns) {
  EXPECT_EQ(SplitWith("gpt2", "it's  ok\n\n"), (V{"it", "'s", " ", " ok", "\n\n"}));
  EXPECT_EQ(SplitWith("gpt2", "a1b22 ?!x"), (V{"a", "1", "b", "22", " ?!", "x"}));
  EXPECT_EQ(SplitWith("smollm", "ab 123"), (V{"ab", " ", "1", "2", "3"}));
  EXPECT_EQ(SplitWith("llama-bpe", "HELLO'S 12345\n\n x"),
            (V{"HELLO", "'S", " ", "123", "45", "\n\n", " x"}));
  EXPECT_EQ(SplitWith("qwen2", "a 123"), (V{"a", " ", "1", "2", "3"}));
  EXPECT_EQ(SplitWith("deepseek-coder", "ab, cd\n12"), (V{"ab", ",", " cd", "\n", "1", "2"}));
  EXPECT_EQ(SplitWith("deepseek-llm", "Hi, 12\n"), (V{"Hi", ",", " ", "12", "\n"}));
}

TEST(PreSplitTest, EveryRegistryEntryCoversAnyInput) {
  std::mt19937 rng(11);
  for (const char* name : {"default", "gpt2", "gpt-2", "phi-2", "smollm", "starcoder", "llama-bpe",
                           "llama3", "qwen2", "deepseek-llm", "deepseek-coder"}) {
    auto s = PreSplitter::ForName(name);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (int trial = 0; trial < 200; ++trial) {
      std::string text;
      int len = static_cast<int>(rng() % 48);
      for (int i = 0; i < len; ++i) {
        // Bytes biased towards ASCII letters, digits, spaces and newlines, with any byte at times.
        static const char kPool[] = "ab Z9'\n\r\t.!";
        text.push_back(rng() % 4 == 0 ? static_cast<char>(rng() & 0xFF)
                                      : kPool[rng() % (sizeof(kPool) - 1)]);
      }
      std::string joined;
      for (std::string_view w : s->Split(text)) {
        ASSERT_FALSE(w.empty()) << name;
        joined.append(w);
      }
      EXPECT_EQ(joined, text) << name;
    }
  }
}

TEST(PreSplitTest, UnknownNameIsAnErrorListingTheKnownOnes) {
  auto s = PreSplitter::ForName("mystery-9");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'mystery-9'"), std::string::npos);
  EXPECT_NE(s.status().message().find("llama-bpe"), std::string::npos);
  EXPECT_NE(s.status().message().find("deepseek-coder"), std::string::npos);

  // Through a tokenizer: a byte-level vocabulary with that pre is refused, never guessed.
  format::TokenizerSpec spec;
  spec.kind = format::TokenizerSpec::Kind::kBpeMerges;
  spec.byte_level = true;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), &c);
    spec.tokens.push_back(c);
  }
  spec.pre = "mystery-9";
  auto t = Tokenizer::Create(spec);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("mystery-9"), std::string::npos);
  spec.pre = "qwen2";
  EXPECT_TRUE(Tokenizer::Create(spec).ok());
}

format::TokenizerSpec ByteSpecWithSpecials() {
  format::TokenizerSpec spec;
  spec.kind = format::TokenizerSpec::Kind::kBpeMerges;
  spec.byte_level = true;
  spec.add_space_prefix = false;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), &c);
    spec.tokens.push_back(c);
  }
  spec.types.assign(256, format::TokenType::kNormal);
  for (auto [piece, type] : {std::pair{"<|im_start|>", format::TokenType::kControl},
                             std::pair{"<|im_start|>x", format::TokenType::kControl},
                             std::pair{"<tool>", format::TokenType::kUserDefined}}) {
    spec.tokens.push_back(piece);
    spec.types.push_back(type);
  }
  return spec;
}

TEST(SpecialTokensTest, MatchedWholeLongestFirstAndOnlyWhenAsked) {
  auto t = Tokenizer::Create(ByteSpecWithSpecials());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const int32_t start = 256, start_x = 257, tool = 258;
  std::vector<int32_t> ids = t->Encode("a<|im_start|>b", false, /*parse_special=*/true);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', start, 'b'}));
  ids = t->Encode("<|im_start|>xy", false, true);  // the longer piece wins
  EXPECT_EQ(ids, (std::vector<int32_t>{start_x, 'y'}));
  // Without parse_special the control piece is text; the user-defined one is always matched.
  ids = t->Encode("<|im_start|><tool>", false, false);
  ASSERT_EQ(ids.size(), 13u);
  EXPECT_EQ(ids.back(), tool);
  EXPECT_EQ(t->DecodeAll(ids), "<|im_start|><tool>");
  EXPECT_EQ(t->FindSpecial("<|im_start|>"), start);
  EXPECT_EQ(t->FindSpecial("<none>"), -1);
}

}  // namespace
}  // namespace weir::tokenizer

namespace weir::tokenizer {
namespace {

// Hostile patterns compile or fail with a Status; compiled ones match any bytes without crashing.
TEST(PreRegexTest, MutatedPatternsFailCleanly) {
  uint32_t state = 99;
  auto next = [&]() {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  const std::string base(format::kGpt2SplitRegex);
  const CodePoints text = DecodeForMatch("it's 12 \xF0\x9F\x98\x80 ok\n\n  x\xFF");
  int compiled = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string p = base.substr(0, next() % (base.size() + 1));
    for (int k = 0; k < 2 && !p.empty(); ++k) {
      static const char kBytes[] = "()[]{}|?*+\\^$-,!:p{L}s1";
      p[next() % p.size()] = kBytes[next() % (sizeof(kBytes) - 1)];
    }
    auto r = PreRegex::Compile(p);
    if (!r.ok()) continue;
    ++compiled;
    for (size_t pos = 0; pos < text.size(); ++pos) {
      size_t n = r->MatchAt(text, 0, text.size(), pos);
      ASSERT_LE(pos + n, text.size()) << p;
    }
  }
  EXPECT_GT(compiled, 0);
}

}  // namespace
}  // namespace weir::tokenizer
