// Tokenizer tests on vocabularies built inside the test: validation errors, the fast merge loops
// against brute-force references on random vocabularies, decoding rules, unknown text, invalid
// UTF-8 and concurrent use. tokenizer_files_test.cc covers the real vocabularies in shared/.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_split.h"
#include "tokenizer/utf8.h"

namespace weir::tokenizer {
namespace {

using format::TokenizerSpec;
using format::TokenType;
using Kind = TokenizerSpec::Kind;

const std::string kMark = "\xE2\x96\x81";  // "▁"

std::string ByteTokenPiece(int b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

// <unk>=0, <s>=1, </s>=2, then (optionally) <0x00>..<0xFF>, then `pieces` with their scores.
TokenizerSpec MakeSpm(const std::vector<std::pair<std::string, float>>& pieces, bool with_bytes) {
  TokenizerSpec s;
  s.kind = Kind::kSentencePiece;
  auto add = [&](const std::string& p, float score, TokenType t) {
    s.tokens.push_back(p);
    s.scores.push_back(score);
    s.types.push_back(t);
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) add(ByteTokenPiece(b), 0, TokenType::kByte);
  }
  for (const auto& [p, score] : pieces) add(p, score, TokenType::kNormal);
  s.unk_id = 0;
  s.bos_id = 1;
  s.eos_id = 2;
  return s;
}

int32_t IdOf(const TokenizerSpec& s, const std::string& piece) {
  auto it = std::find(s.tokens.begin(), s.tokens.end(), piece);
  EXPECT_NE(it, s.tokens.end()) << piece;
  return static_cast<int32_t>(it - s.tokens.begin());
}

Tokenizer MustCreate(const TokenizerSpec& spec) {
  auto t = Tokenizer::Create(spec);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::vector<std::string> Units(std::string_view text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t len = Utf8UnitLength(text, pos);
    out.emplace_back(text.substr(pos, len));
    pos += len;
  }
  return out;
}

std::string MarkSpaces(std::string_view text, bool prefix) {
  std::string out = prefix && !text.empty() ? kMark : "";
  for (char c : text) out += c == ' ' ? kMark : std::string(1, c);
  return out;
}

bool IsByteToken(const std::string& p) { return p.size() == 6 && p.rfind("<0x", 0) == 0; }

// Brute-force SentencePiece BPE: rescan all pairs after every merge.
std::vector<int32_t> NaiveSpm(const TokenizerSpec& s, std::string_view text) {
  std::map<std::string, int32_t> matchable;
  for (size_t id = 0; id < s.tokens.size(); ++id) {
    TokenType t = s.types.empty() ? TokenType::kNormal : s.types[id];
    if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kByte) continue;
    if (IsByteToken(s.tokens[id])) continue;
    matchable.emplace(s.tokens[id], static_cast<int32_t>(id));
  }
  std::vector<std::string> sym = Units(MarkSpaces(text, s.add_space_prefix));
  for (;;) {
    int best = -1;
    float best_score = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = matchable.find(sym[i] + sym[i + 1]);
      if (it == matchable.end()) continue;
      float score = s.scores[it->second];
      if (best < 0 || score > best_score) {
        best = static_cast<int>(i);
        best_score = score;
      }
    }
    if (best < 0) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + best + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& u : sym) {
    if (auto it = matchable.find(u); it != matchable.end()) {
      ids.push_back(it->second);
      continue;
    }
    std::vector<int32_t> bytes;
    for (unsigned char c : u) {
      auto bt = std::find(s.tokens.begin(), s.tokens.end(), ByteTokenPiece(c));
      if (bt == s.tokens.end() || !s.byte_fallback) break;
      bytes.push_back(static_cast<int32_t>(bt - s.tokens.begin()));
    }
    if (bytes.size() == u.size()) {
      ids.insert(ids.end(), bytes.begin(), bytes.end());
    } else {
      ids.push_back(s.unk_id);
    }
  }
  return ids;
}

// Brute-force rank BPE over ids: merge the leftmost lowest-rank pair, rescan, repeat.
void NaiveRankMerge(const TokenizerSpec& s, std::vector<int32_t>* ids) {
  std::map<std::pair<int32_t, int32_t>, std::pair<int, int32_t>> rules;
  for (size_t r = 0; r < s.merges.size(); ++r) {
    const std::string& m = s.merges[r];
    size_t sp = m.find(' ');
    int32_t a = IdOf(s, m.substr(0, sp)), b = IdOf(s, m.substr(sp + 1));
    rules.emplace(std::pair{a, b},
                  std::pair{static_cast<int>(r), IdOf(s, m.substr(0, sp) + m.substr(sp + 1))});
  }
  for (;;) {
    int best = -1, best_rank = 0;
    int32_t result = 0;
    for (size_t i = 0; i + 1 < ids->size(); ++i) {
      auto it = rules.find({(*ids)[i], (*ids)[i + 1]});
      if (it != rules.end() && (best < 0 || it->second.first < best_rank)) {
        best = static_cast<int>(i);
        best_rank = it->second.first;
        result = it->second.second;
      }
    }
    if (best < 0) return;
    (*ids)[best] = result;
    ids->erase(ids->begin() + best + 1);
  }
}

std::string RandomText(std::mt19937& rng, const std::vector<std::string>& alphabet, int max_len) {
  std::string out;
  int len = std::uniform_int_distribution<int>(0, max_len)(rng);
  for (int i = 0; i < len; ++i) out += alphabet[rng() % alphabet.size()];
  return out;
}

std::string RandomBytes(std::mt19937& rng, int max_len) {
  std::string out;
  int len = std::uniform_int_distribution<int>(0, max_len)(rng);
  for (int i = 0; i < len; ++i) out.push_back(static_cast<char>(rng() & 0xFF));
  return out;
}

// Replaces literal "▁" in text by ' ' (what a SentencePiece round trip gives back).
std::string SpacesForMarks(const std::string& text) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, kMark.size(), kMark) == 0) {
      out += ' ';
      pos += kMark.size();
    } else {
      out += text[pos++];
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// UTF-8 units and the byte-level helpers.

TEST(Utf8Test, UnitsCoverValidAndInvalidText) {
  EXPECT_EQ(Units("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"),
            (std::vector<std::string>{"a", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"}));
  // Stray continuation, truncated sequence, lead byte followed by ASCII, 0xFF: one byte each.
  EXPECT_EQ(Units("\x80\xE2\x82"), (std::vector<std::string>{"\x80", "\xE2", "\x82"}));
  EXPECT_EQ(Units("\xE2\x41\x41"), (std::vector<std::string>{"\xE2", "A", "A"}));
  EXPECT_EQ(Units("\xFF\xC3"), (std::vector<std::string>{"\xFF", "\xC3"}));
  EXPECT_EQ(Utf8Decode("\xE2\x82\xAC", 0, 3), 0x20ACu);
  EXPECT_EQ(Utf8Decode("\x80", 0, 1), kBadByteCodePoint);
  std::string enc;
  for (uint32_t cp : {0x41u, 0xE9u, 0x20ACu, 0x1F600u}) AppendUtf8(cp, &enc);
  EXPECT_EQ(enc, "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(ByteLevelTest, MappingIsGpt2sBijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = ByteToCodePoint(static_cast<uint8_t>(b));
    EXPECT_EQ(CodePointToByte(cp), b);
    seen.insert(cp);
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(ByteToCodePoint('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(ByteToCodePoint(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(ByteToCodePoint('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(ByteToCodePoint(0xAD), 0x143u);  // the last of the 68 shifted bytes
  EXPECT_EQ(CodePointToByte(0x144), -1);
  EXPECT_EQ(CodePointToByte(0x2581), -1);
}

std::vector<std::string_view> Gpt2PreSplit(std::string_view text) {
  auto s = PreSplitter::ForName("gpt2");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? s->Split(text) : std::vector<std::string_view>{};
}

std::vector<std::string> Split(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view w : Gpt2PreSplit(text)) out.emplace_back(w);
  return out;
}

TEST(ByteLevelTest, PreSplitFollowsGpt2Pattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Split("it's  ok\n\n"), (V{"it", "'s", " ", " ok", "\n\n"}));
  EXPECT_EQ(Split("x  \ty"), (V{"x", "  ", "\t", "y"}));
  EXPECT_EQ(Split("a1b22 ?!x"), (V{"a", "1", "b", "22", " ?!", "x"}));
  EXPECT_EQ(Split("we'll they're I'd 'S"), (V{"we", "'ll", " they", "'re", " I", "'d", " '", "S"}));
  EXPECT_EQ(Split(" caf\xC3\xA9 \xD0\x9F\xD1\x80\xD0\xB8"),
            (V{" caf\xC3\xA9", " \xD0\x9F\xD1\x80\xD0\xB8"}));
  EXPECT_EQ(Split("hi \xF0\x9F\x98\x80!"), (V{"hi", " \xF0\x9F\x98\x80!"}));
  EXPECT_EQ(Split("end  "), (V{"end", "  "}));
  EXPECT_EQ(Split(""), V{});
}

TEST(ByteLevelTest, PreSplitCoversAnyInput) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text = RandomBytes(rng, 64);
    std::string joined;
    for (std::string_view w : Gpt2PreSplit(text)) {
      ASSERT_FALSE(w.empty());
      joined.append(w);
    }
    EXPECT_EQ(joined, text);
  }
}

// ---------------------------------------------------------------------------------------------
// Validation.

void ExpectInvalid(const TokenizerSpec& spec, const std::string& needle) {
  auto t = Tokenizer::Create(spec);
  ASSERT_FALSE(t.ok()) << "expected an error mentioning " << needle;
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().ToString();
}

TEST(TokenizerCreateTest, RejectsInconsistentSpecs) {
  const TokenizerSpec good = MakeSpm({{kMark + "a", -1}, {"a", -2}}, true);
  ASSERT_TRUE(Tokenizer::Create(good).ok());

  TokenizerSpec s = good;
  s.kind = Kind::kNone;
  ExpectInvalid(s, "kind");
  s = good;
  s.tokens.clear();
  s.scores.clear();
  s.types.clear();
  ExpectInvalid(s, "empty vocabulary");
  s = good;
  s.scores.pop_back();
  ExpectInvalid(s, "scores");
  s = good;
  s.types.push_back(TokenType::kNormal);
  ExpectInvalid(s, "token types");
  s = good;
  s.bos_id = static_cast<int32_t>(s.tokens.size());
  ExpectInvalid(s, "bos_id");
  s = good;
  s.eos_id = -7;
  ExpectInvalid(s, "eos_id");
  s = good;
  s.types[5] = static_cast<TokenType>(9);
  ExpectInvalid(s, "invalid type 9");
  s = good;
  s.types.back() = TokenType::kByte;
  ExpectInvalid(s, "<0xNN>");
  s = good;
  s.scores.back() = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(s, "NaN");
  s = good;
  s.byte_level = true;
  auto t = Tokenizer::Create(s);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kUnsupported);

  // Neither unk nor a full set of byte tokens: some text could not be encoded.
  s = MakeSpm({{"a", -1}}, false);
  s.unk_id = -1;
  ExpectInvalid(s, "no unk_id");
  s = MakeSpm({{"a", -1}}, true);
  s.unk_id = -1;
  EXPECT_TRUE(Tokenizer::Create(s).ok());
  s.byte_fallback = false;
  ExpectInvalid(s, "byte_fallback off");
}

TEST(TokenizerCreateTest, RejectsBadMerges) {
  TokenizerSpec s = MakeSpm({{"a", 0}, {"b", 0}, {"ab", 0}}, false);
  s.kind = Kind::kBpeMerges;
  s.merges = {"a b"};
  ASSERT_TRUE(Tokenizer::Create(s).ok());
  s.merges = {"a b", "b a"};
  ExpectInvalid(s, "merge 1 'b a': piece 'ba' is not in the vocabulary");
  s.merges = {"a c"};
  ExpectInvalid(s, "piece 'c'");
  for (std::string bad : {"ab", "a  b", " ab", "a b c", "ab "}) {
    s.merges = {bad};
    ExpectInvalid(s, "not two pieces");
  }
}

// ---------------------------------------------------------------------------------------------
// SentencePiece (score-driven) encoding.

TEST(SentencePieceTest, HighestScoreWinsAndTiesGoLeft) {
  TokenizerSpec s = MakeSpm({{kMark, -9},
                             {"a", -9},
                             {"b", -9},
                             {"c", -9},
                             {"ab", -1},
                             {"bc", -2},
                             {"bca", -5},
                             {"aa", -3}},
                            true);
  s.add_space_prefix = false;
  Tokenizer t = MustCreate(s);
  // "abca": "ab" (-1) beats "bc" (-2); then nothing merges ("abc" is not a piece).
  EXPECT_EQ(t.Encode("abca", false),
            (std::vector<int32_t>{IdOf(s, "ab"), IdOf(s, "c"), IdOf(s, "a")}));
  // Equal scores: the left pair merges first.
  EXPECT_EQ(t.Encode("aaa", false), (std::vector<int32_t>{IdOf(s, "aa"), IdOf(s, "a")}));
  // With "bc" scoring higher, "bc" forms and then "bc"+"a".
  s.scores[IdOf(s, "bc")] = 0;
  t = MustCreate(s);
  EXPECT_EQ(t.Encode("abca", false), (std::vector<int32_t>{IdOf(s, "a"), IdOf(s, "bca")}));
}

TEST(SentencePieceTest, SpacePrefixAndByteFallback) {
  TokenizerSpec s = MakeSpm({{kMark, -9}, {"a", -9}, {"b", -9}, {kMark + "a", -1}}, true);
  Tokenizer t = MustCreate(s);
  // " " becomes "▁", a "▁" is prepended, 'é' (2 bytes) and '\n' fall back to byte tokens.
  EXPECT_EQ(t.Encode("a b\xC3\xA9\n", true),
            (std::vector<int32_t>{1, IdOf(s, kMark + "a"), IdOf(s, kMark), IdOf(s, "b"),
                                  IdOf(s, "<0xC3>"), IdOf(s, "<0xA9>"), IdOf(s, "<0x0A>")}));
  EXPECT_EQ(t.Encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(t.Encode("", false).empty());
  s.add_space_prefix = false;
  t = MustCreate(s);
  EXPECT_EQ(t.Encode("a", false), (std::vector<int32_t>{IdOf(s, "a")}));
}

TEST(SentencePieceTest, ControlAndBytePiecesAreNotMatchedFromText) {
  TokenizerSpec s = MakeSpm({{"<", -1}, {"s", -1}, {">", -1}, {"<s", -1}}, true);
  s.add_space_prefix = false;
  Tokenizer t = MustCreate(s);
  // "<s>" is the BOS piece, but text never turns into a control token.
  EXPECT_EQ(t.Encode("<s>", false), (std::vector<int32_t>{IdOf(s, "<s"), IdOf(s, ">")}));
}

TEST(SentencePieceTest, UnknownCharactersBecomeUnkOnePerCharacter) {
  TokenizerSpec s = MakeSpm({{kMark, -1}, {"a", -1}}, false);
  Tokenizer t = MustCreate(s);
  const int32_t m = IdOf(s, kMark), a = IdOf(s, "a");
  EXPECT_EQ(t.Encode("a//\xC3\xA9"
                     "a",
                     false),
            (std::vector<int32_t>{m, a, 0, 0, 0, a}));
}

TEST(SentencePieceTest, MatchesBruteForceOnRandomVocabularies) {
  std::mt19937 rng(1234);
  const std::vector<std::string> alphabet = {"a", "b", "c", " ", "\xC3\xA9", "\n"};
  for (int vocab_trial = 0; vocab_trial < 40; ++vocab_trial) {
    std::vector<std::pair<std::string, float>> pieces;
    std::set<std::string> seen;
    for (const std::string& ch : {std::string("a"), std::string("b"), kMark}) {
      pieces.push_back({ch, -100});
      seen.insert(ch);
    }
    const std::vector<std::string> piece_alphabet = {"a", "b", "c", kMark, "\xC3\xA9"};
    int n_pieces = 5 + static_cast<int>(rng() % 30);
    while (static_cast<int>(pieces.size()) < n_pieces) {
      std::string p = RandomText(rng, piece_alphabet, 4);
      if (Units(p).size() < 2 || !seen.insert(p).second) continue;
      pieces.push_back({p, -static_cast<float>(rng() % 6)});  // few distinct scores: many ties
    }
    const bool with_bytes = vocab_trial % 2 == 0;
    TokenizerSpec s = MakeSpm(pieces, with_bytes);
    s.add_space_prefix = vocab_trial % 3 != 0;
    Tokenizer t = MustCreate(s);
    for (int i = 0; i < 25; ++i) {
      std::string text = RandomText(rng, alphabet, 30);
      ASSERT_EQ(t.Encode(text, false), NaiveSpm(s, text)) << "text '" << text << "'";
      if (with_bytes) {
        EXPECT_EQ(t.DecodeAll(t.Encode(text, true)), text);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Merge-list (rank-driven) encoding.

// A kBpeMerges vocabulary over the given characters plus random merges in shuffled rank order
// (so a merge may rank before the merges that build its parts).
TokenizerSpec RandomMergeSpec(std::mt19937& rng, const std::vector<std::string>& chars,
                              int n_merges, bool shuffle_ranks) {
  TokenizerSpec s;
  s.kind = Kind::kBpeMerges;
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  s.unk_id = 0;
  s.bos_id = 1;
  s.eos_id = 2;
  std::vector<std::string> pieces = chars;
  for (const std::string& c : chars) {
    s.tokens.push_back(c);
    s.types.push_back(TokenType::kNormal);
  }
  std::set<std::string> merge_set;
  for (int tries = 0; static_cast<int>(s.merges.size()) < n_merges && tries < 10000; ++tries) {
    const std::string a = pieces[rng() % pieces.size()];
    const std::string b = pieces[rng() % pieces.size()];
    if (a.size() + b.size() > 12 || !merge_set.insert(a + " " + b).second) continue;
    s.merges.push_back(a + " " + b);
    std::string ab = a + b;
    if (std::find(pieces.begin(), pieces.end(), ab) == pieces.end()) {
      pieces.push_back(ab);
      s.tokens.push_back(ab);
      s.types.push_back(TokenType::kNormal);
    }
  }
  if (shuffle_ranks) std::shuffle(s.merges.begin(), s.merges.end(), rng);
  return s;
}

TEST(BpeMergesTest, LowestRankFirstAndTiesGoLeft) {
  TokenizerSpec s;
  s.kind = Kind::kBpeMerges;
  s.tokens = {"<unk>", kMark, "a", "b", "c", "ab", "bc", "abc", "aa", "aaa"};
  s.unk_id = 0;
  s.add_space_prefix = false;
  s.merges = {"b c", "a b", "a bc", "ab c", "a a", "aa a"};
  Tokenizer t = MustCreate(s);
  EXPECT_EQ(t.Encode("abc", false), (std::vector<int32_t>{7}));  // b c, then a bc
  s.merges = {"a b", "b c", "a bc", "ab c", "a a", "aa a"};
  t = MustCreate(s);
  EXPECT_EQ(t.Encode("abcbc", false), (std::vector<int32_t>{7, 6}));  // a b, b c, ab c
  // "aaaa": "a a" merges leftmost first: aa a a -> aa aa; "aa a" never applies (rank 5 vs
  // the second "a a" at rank 4).
  EXPECT_EQ(t.Encode("aaaa", false), (std::vector<int32_t>{8, 8}));
  EXPECT_EQ(t.Encode("aaa", false), (std::vector<int32_t>{9}));
}

TEST(BpeMergesTest, MatchesBruteForceOnRandomMergeLists) {
  std::mt19937 rng(99);
  const std::vector<std::string> chars = {"a", "b", "c", kMark, "\xC3\xA9"};
  const std::vector<std::string> alphabet = {"a", "b", "c", " ", "\xC3\xA9", "/"};
  for (int trial = 0; trial < 40; ++trial) {
    TokenizerSpec s = RandomMergeSpec(rng, chars, 5 + trial, trial % 2 == 1);
    s.add_space_prefix = trial % 3 != 0;
    Tokenizer t = MustCreate(s);
    for (int i = 0; i < 25; ++i) {
      std::string text = RandomText(rng, alphabet, 30);
      // Reference: characters to ids ('/' is unknown: unk, a run of them fused), then merges.
      std::vector<int32_t> ids;
      bool last_unk = false;
      for (const std::string& u : Units(MarkSpaces(text, s.add_space_prefix))) {
        auto it = std::find(s.tokens.begin(), s.tokens.end(), u);
        if (it == s.tokens.end()) {
          if (!last_unk) ids.push_back(s.unk_id);
          last_unk = true;
        } else {
          ids.push_back(static_cast<int32_t>(it - s.tokens.begin()));
          last_unk = false;
        }
      }
      NaiveRankMerge(s, &ids);
      ASSERT_EQ(t.Encode(text, false), ids) << "text '" << text << "'";
    }
  }
}

TEST(BpeMergesTest, ByteFallbackRoundTripsAnyBytes) {
  std::mt19937 rng(5);
  TokenizerSpec s = RandomMergeSpec(rng, {"a", "b", kMark, "e"}, 30, false);
  for (int b = 0; b < 256; ++b) {
    s.tokens.push_back(ByteTokenPiece(b));
    s.types.push_back(TokenType::kNormal);  // tokenizer.json does not type them; the text does
  }
  Tokenizer t = MustCreate(s);
  EXPECT_EQ(t.Encode("\t", false), (std::vector<int32_t>{IdOf(s, kMark), IdOf(s, "<0x09>")}));
  EXPECT_TRUE(t.is_byte(IdOf(s, "<0x09>")));
  EXPECT_FALSE(t.is_byte(IdOf(s, "a")));
  for (int i = 0; i < 300; ++i) {
    std::string text = RandomBytes(rng, 40) + RandomText(rng, {"a", "b", " ", "e"}, 20);
    std::vector<int32_t> ids = t.Encode(text, i % 2 == 0);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size());
    EXPECT_EQ(t.DecodeAll(ids), SpacesForMarks(text));
  }
}

// A byte-level vocabulary: the 256 mapped characters, random merges, an <|endoftext|> control.
TokenizerSpec RandomByteLevelSpec(std::mt19937& rng, int n_merges) {
  std::vector<std::string> chars;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), &c);
    chars.push_back(c);
  }
  // Merges only over a few characters so that they apply often.
  std::vector<std::string> common;
  for (char c : std::string("ab e\n")) common.push_back(chars[static_cast<uint8_t>(c)]);
  TokenizerSpec s = RandomMergeSpec(rng, common, n_merges, false);
  s.byte_level = true;
  s.add_space_prefix = false;
  s.tokens.erase(s.tokens.begin(), s.tokens.begin() + 3);  // no <unk>/<s>/</s>
  s.types.clear();
  s.unk_id = s.bos_id = s.eos_id = -1;
  for (const std::string& c : chars) {
    if (std::find(s.tokens.begin(), s.tokens.end(), c) == s.tokens.end()) s.tokens.push_back(c);
  }
  s.tokens.push_back("<|endoftext|>");
  s.types.assign(s.tokens.size(), TokenType::kNormal);
  s.types.back() = TokenType::kControl;
  s.eos_id = static_cast<int32_t>(s.tokens.size()) - 1;
  return s;
}

TEST(ByteLevelBpeTest, MatchesPreSplitPlusBruteForceAndRoundTrips) {
  std::mt19937 rng(42);
  TokenizerSpec s = RandomByteLevelSpec(rng, 40);
  Tokenizer t = MustCreate(s);
  std::map<uint8_t, int32_t> byte_id;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), &c);
    byte_id[static_cast<uint8_t>(b)] = IdOf(s, c);
  }
  for (int i = 0; i < 300; ++i) {
    std::string text = i % 3 == 0 ? RandomBytes(rng, 30)
                                  : RandomText(rng, {"a", "b", " ", "e", "\n", "'s", "9"}, 40);
    std::vector<int32_t> expected;
    for (std::string_view word : Gpt2PreSplit(text)) {
      std::vector<int32_t> ids;
      for (char c : word) ids.push_back(byte_id[static_cast<uint8_t>(c)]);
      NaiveRankMerge(s, &ids);
      expected.insert(expected.end(), ids.begin(), ids.end());
    }
    std::vector<int32_t> ids = t.Encode(text, false);
    ASSERT_EQ(ids, expected);
    EXPECT_EQ(t.DecodeAll(ids), text);
  }
  // The control token prints nothing; a space prefix is added and removed again.
  EXPECT_EQ(t.Decode(-1, s.eos_id), "");
  s.add_space_prefix = true;
  t = MustCreate(s);
  std::vector<int32_t> ids = t.Encode("ab", false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(t.Decode(s.eos_id, ids.front()).substr(0, 1), " ");  // the prefix is there
  EXPECT_EQ(t.DecodeAll(ids), "ab");
}

TEST(BpeMergesTest, UnknownRunsFuseIntoOneUnk) {
  TokenizerSpec s;
  s.kind = Kind::kBpeMerges;
  s.tokens = {"<unk>", kMark, "a", kMark + "a"};
  s.merges = {kMark + " a"};
  s.unk_id = 0;
  Tokenizer t = MustCreate(s);
  // "▁a", then "/(@é" fused into one unk, then "▁" (space) "a" merged.
  EXPECT_EQ(t.Encode("a/(@\xC3\xA9 a\xFF", false), (std::vector<int32_t>{3, 0, 3, 0}));
}

// ---------------------------------------------------------------------------------------------
// Decoding.

TEST(DecodeTest, StreamingRules) {
  TokenizerSpec s = MakeSpm({{kMark + "Hi", -1}, {"!", -1}, {kMark, -1}}, true);
  Tokenizer t = MustCreate(s);
  const int32_t hi = IdOf(s, kMark + "Hi");
  EXPECT_EQ(t.Decode(t.bos_id(), hi), "Hi");  // leading space dropped after BOS
  EXPECT_EQ(t.Decode(-1, hi), "Hi");          // ... and at the very start
  EXPECT_EQ(t.Decode(IdOf(s, "!"), hi), " Hi");
  EXPECT_EQ(t.Decode(hi, IdOf(s, "<0x41>")), "A");
  EXPECT_EQ(t.Decode(t.bos_id(), IdOf(s, "<0x20>")), " ");  // a byte token is never stripped
  EXPECT_EQ(t.Decode(hi, t.bos_id()), "");
  EXPECT_EQ(t.Decode(hi, t.eos_id()), "");
  EXPECT_EQ(t.Decode(hi, -3), "");
  EXPECT_EQ(t.Decode(hi, t.vocab_size()), "");
  EXPECT_EQ(t.DecodeAll(std::vector<int32_t>{1, hi, hi, IdOf(s, "!"), 2}), "Hi Hi!");
  EXPECT_EQ(t.DecodeAll(t.Encode(" Hi", true)), " Hi");
  s.add_space_prefix = false;
  t = MustCreate(s);
  EXPECT_EQ(t.Decode(t.bos_id(), hi), " Hi");
}

TEST(DecodeTest, Accessors) {
  TokenizerSpec s = MakeSpm({{"x", -2.5f}}, true);
  s.pad_id = 0;
  s.add_bos = false;
  Tokenizer t = MustCreate(s);
  EXPECT_EQ(t.vocab_size(), 3 + 256 + 1);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.kind(), Kind::kSentencePiece);
  EXPECT_EQ(t.piece(t.vocab_size() - 1), "x");
  EXPECT_EQ(t.piece(-1), "");
  EXPECT_EQ(t.score(t.vocab_size() - 1), -2.5f);
  EXPECT_TRUE(t.is_control(1));
  EXPECT_FALSE(t.is_control(0));
  EXPECT_FALSE(t.is_control(12345));
  EXPECT_TRUE(t.is_byte(3));
  EXPECT_EQ(t.type(0), TokenType::kUnknown);
}

// ---------------------------------------------------------------------------------------------
// Robustness and concurrency.

TEST(TokenizerFuzzTest, RandomBytesNeverCrashAndStayInRange) {
  std::mt19937 rng(2024);
  // (spec, whether it can represent any bytes, so that decoding gives the text back)
  std::vector<std::pair<TokenizerSpec, bool>> specs;
  specs.push_back({MakeSpm({{kMark, -1}, {"a", -1}, {kMark + "a", 0}}, true), true});
  specs.push_back({MakeSpm({{kMark, -1}, {"a", -1}, {kMark + "a", 0}}, false), false});
  specs.push_back({RandomMergeSpec(rng, {"a", "b", kMark, "\xC3\xA9"}, 20, true), false});
  specs.push_back({RandomByteLevelSpec(rng, 20), true});
  for (const auto& [s, lossless] : specs) {
    Tokenizer t = MustCreate(s);
    for (int i = 0; i < 200; ++i) {
      std::string text = RandomBytes(rng, 200);
      std::vector<int32_t> ids = t.Encode(text, true);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size());
      std::string back = t.DecodeAll(ids);  // must not crash either
      if (lossless) {
        EXPECT_EQ(back, SpacesForMarks(text));
      }
    }
  }
}

TEST(TokenizerConcurrencyTest, EncodeFromManyThreadsMatchesSerial) {
  std::mt19937 rng(3);
  TokenizerSpec s = RandomMergeSpec(rng, {"a", "b", "c", kMark}, 40, false);
  Tokenizer t = MustCreate(s);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(RandomText(rng, {"a", "b", "c", " ", "?"}, 300));
  std::vector<std::vector<int32_t>> serial;
  for (const auto& text : texts) serial.push_back(t.Encode(text, true));
  std::vector<std::vector<std::vector<int32_t>>> results(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      Tokenizer copy = t;  // copies share the immutable tables
      for (const auto& text : texts) results[k].push_back(copy.Encode(text, true));
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, serial);
}

}  // namespace
}  // namespace weir::tokenizer
