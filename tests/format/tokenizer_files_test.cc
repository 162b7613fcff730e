#include "format/tokenizer_files.h"

#include <gtest/gtest.h>

#include <random>

#include "format/mapped_file.h"
#include "testing/testing.h"
#include "tiny_model_files.h"

namespace weir::format {
namespace {

using testdata::HfTokenizerJson;
using testdata::Llama2cPieces;
using testdata::MakeLlama2cTokenizer;

const std::string kMarker = "\xE2\x96\x81";  // "▁"

// ---------------------------------------------------------------------------------------------
// llama2.c tokenizer

TEST(Llama2cTokenizerTest, SyntheticPiecesAreNormalized) {
  std::vector<std::string> pieces = Llama2cPieces(24);
  std::string bytes = MakeLlama2cTokenizer(pieces);
  auto r = ParseLlama2cTokenizer(bytes, 24, "tok24.bin");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TokenizerSpec& t = *r;
  EXPECT_EQ(t.kind, TokenizerSpec::Kind::kSentencePiece);
  ASSERT_EQ(t.tokens.size(), 24u);
  ASSERT_EQ(t.scores.size(), 24u);
  ASSERT_EQ(t.types.size(), 24u);
  EXPECT_EQ(t.tokens[0], "<unk>");
  EXPECT_EQ(t.tokens[1], "<s>");
  EXPECT_EQ(t.tokens[2], "</s>");
  EXPECT_EQ(t.types[0], TokenType::kUnknown);
  EXPECT_EQ(t.types[1], TokenType::kControl);
  EXPECT_EQ(t.types[2], TokenType::kControl);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_TRUE(t.add_bos);
  EXPECT_TRUE(t.add_space_prefix);
  EXPECT_TRUE(t.byte_fallback);
  EXPECT_FALSE(t.byte_level);
  for (size_t i = 3; i < pieces.size(); ++i) {
    // Every ' ' became "▁"; nothing else changed.
    std::string want;
    for (char c : pieces[i]) want += c == ' ' ? kMarker : std::string(1, c);
    EXPECT_EQ(t.tokens[i], want) << i;
    EXPECT_EQ(t.scores[i], -static_cast<float>(i));
    bool is_byte = pieces[i].rfind("<0x", 0) == 0;
    EXPECT_EQ(t.types[i], is_byte ? TokenType::kByte : TokenType::kNormal) << i;
  }
}

TEST(Llama2cTokenizerTest, RealTok512) {
  const std::string path = testing::SharedPath("models/stories260K/tok512.bin");
  if (!testing::FileExists(path)) GTEST_SKIP() << path << " absent";
  auto r = LoadLlama2cTokenizer(path, 512);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TokenizerSpec& t = *r;
  ASSERT_EQ(t.tokens.size(), 512u);
  EXPECT_EQ(t.tokens[1], "<s>");
  EXPECT_EQ(t.tokens[2], "</s>");
  EXPECT_EQ(t.tokens[3], "<0x00>");
  EXPECT_EQ(t.tokens[258], "<0xFF>");
  EXPECT_EQ(t.tokens[259], kMarker + "t");  // stored as " t"
  EXPECT_EQ(t.tokens[260], "he");
  EXPECT_EQ(t.scores[260], -1.0f);
  int bytes = 0, with_space = 0;
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    bytes += t.types[i] == TokenType::kByte;
    with_space += t.tokens[i].find(' ') != std::string::npos;
  }
  EXPECT_EQ(bytes, 256);
  EXPECT_EQ(with_space, 0);
  // The wrong vocab size is caught: 511 entries leave trailing bytes, 513 run off the end.
  EXPECT_FALSE(LoadLlama2cTokenizer(path, 511).ok());
  EXPECT_FALSE(LoadLlama2cTokenizer(path, 513).ok());
}

TEST(Llama2cTokenizerTest, RealLlama2Tokenizer) {
  const std::string path = testing::SharedPath("models/llama2-tokenizer/tokenizer.bin");
  if (!testing::FileExists(path)) GTEST_SKIP() << path << " absent";
  auto r = LoadLlama2cTokenizer(path, 32000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tokens.size(), 32000u);
  EXPECT_EQ(r->tokens[259], kMarker + kMarker);  // "  " in the file
  EXPECT_EQ(r->tokens[260], kMarker + "t");
  EXPECT_EQ(r->bos_id, 1);
  EXPECT_EQ(r->eos_id, 2);
  auto bad = LoadLlama2cTokenizer(path, 512);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("trailing"), std::string::npos) << bad.status().ToString();
}

TEST(Llama2cTokenizerTest, ErrorsAreClear) {
  std::vector<std::string> pieces = Llama2cPieces(16);
  const std::string good = MakeLlama2cTokenizer(pieces);
  ASSERT_TRUE(ParseLlama2cTokenizer(good, 16, "t.bin").ok());

  auto expect_error = [](const Result<TokenizerSpec>& r, const std::string& needle) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("t.bin"), std::string::npos) << r.status().ToString();
  };
  expect_error(ParseLlama2cTokenizer("", 16, "t.bin"), "too short");
  expect_error(ParseLlama2cTokenizer(good, 0, "t.bin"), "vocab_size 0");
  expect_error(ParseLlama2cTokenizer(good, 15, "t.bin"), "trailing bytes");
  expect_error(ParseLlama2cTokenizer(good.substr(0, good.size() - 1), 16, "t.bin"), "past the end");
  expect_error(ParseLlama2cTokenizer(good, 1 << 20, "t.bin"), "cannot hold");

  std::string bad_len = good;
  int32_t neg = -5;
  std::memcpy(&bad_len[4 + 4], &neg, 4);  // token 0's length
  expect_error(ParseLlama2cTokenizer(bad_len, 16, "t.bin"), "token 0: length -5");

  std::string too_long = good;
  int32_t max_len = 2;
  std::memcpy(&too_long[0], &max_len, 4);
  expect_error(ParseLlama2cTokenizer(too_long, 16, "t.bin"), "max_token_length");

  std::string nan_score = good;
  float nan = std::nanf("");
  std::memcpy(&nan_score[4], &nan, 4);
  expect_error(ParseLlama2cTokenizer(nan_score, 16, "t.bin"), "not finite");
}

// ---------------------------------------------------------------------------------------------
// Hugging Face tokenizer.json

TEST(HfTokenizerTest, SyntheticSentencePieceStyle) {
  const std::string text = HfTokenizerJson(16).dump();
  auto r = ParseHfTokenizerJson(text, "tokenizer.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TokenizerSpec& t = *r;
  EXPECT_EQ(t.kind, TokenizerSpec::Kind::kBpeMerges);
  ASSERT_EQ(t.tokens.size(), 16u);
  EXPECT_EQ(t.tokens[7], kMarker);
  EXPECT_EQ(t.tokens[10], kMarker + "the");
  ASSERT_EQ(t.merges.size(), 3u);
  EXPECT_EQ(t.merges[0], kMarker + " t");
  EXPECT_EQ(t.merges[1], "h e");
  EXPECT_EQ(t.merges[2], kMarker + "t he");  // from the ["a", "b"] form
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_EQ(t.bos_id, 1);   // from TemplateProcessing
  EXPECT_EQ(t.eos_id, -1);  // tokenizer.json alone names no EOS
  EXPECT_TRUE(t.add_bos);
  EXPECT_TRUE(t.add_space_prefix);
  EXPECT_FALSE(t.byte_level);
  EXPECT_TRUE(t.byte_fallback);
  EXPECT_TRUE(t.scores.empty());
  EXPECT_EQ(t.types[0], TokenType::kUnknown);
  EXPECT_EQ(t.types[1], TokenType::kControl);
  EXPECT_EQ(t.types[2], TokenType::kControl);
  EXPECT_EQ(t.types[4], TokenType::kNormal);

  // tokenizer_config.json names EOS and PAD and can turn BOS off.
  const std::string cfg =
      R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "pad_token": "<unk>",
          "add_bos_token": false})";
  auto r2 = ParseHfTokenizerJson(text, "tokenizer.json", cfg, "tokenizer_config.json");
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->eos_id, 2);
  EXPECT_EQ(r2->pad_id, 0);
  EXPECT_FALSE(r2->add_bos);
}

TEST(HfTokenizerTest, ByteLevelStyle) {
  nlohmann::json j = HfTokenizerJson(16);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", "\\s+"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "Digits"}, {"individual_digits", true}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["post_processor"] = nullptr;
  auto r = ParseHfTokenizerJson(j.dump(), "tokenizer.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->byte_level);
  // The file's own split stages, in order; ByteLevel's use_regex (default true) adds GPT-2's.
  EXPECT_TRUE(r->has_pre_regexes);
  EXPECT_EQ(r->pre_regexes,
            (std::vector<std::string>{"\\s+", "\\p{N}", std::string(kGpt2SplitRegex)}));

  // A Split that removes or merges is not something weir reproduces: refused, not ignored.
  nlohmann::json removed = j;
  removed["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  auto bad = ParseHfTokenizerJson(removed.dump(), "tokenizer.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("Removed"), std::string::npos) << bad.status().ToString();
  EXPECT_FALSE(r->add_space_prefix);
  EXPECT_FALSE(r->add_bos);
  EXPECT_EQ(r->bos_id, -1);

  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kMarker}, {"prepend_scheme", "first"}};
  j["decoder"] = nullptr;
  auto r2 = ParseHfTokenizerJson(j.dump(), "tokenizer.json");
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_FALSE(r2->byte_level);
  EXPECT_TRUE(r2->add_space_prefix);
}

TEST(HfTokenizerTest, ErrorsAreClear) {
  auto expect_error = [](const nlohmann::json& j, Status::Code code, const std::string& needle) {
    auto r = ParseHfTokenizerJson(j.dump(), "tok.json");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("tok.json"), std::string::npos) << r.status().ToString();
  };
  nlohmann::json j = HfTokenizerJson(16);
  {
    auto r = ParseHfTokenizerJson("{\"model\": [1, 2", "tok.json");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("invalid JSON"), std::string::npos);
  }
  nlohmann::json k = j;
  k["model"]["type"] = "Unigram";
  expect_error(k, Status::Code::kUnsupported, "'Unigram' is not supported");
  k = j;
  k["model"]["type"] = "WordPiece";
  expect_error(k, Status::Code::kUnsupported, "WordPiece");
  k = j;
  k.erase("model");
  expect_error(k, Status::Code::kCorrupt, "'model'");
  k = j;
  k["model"]["merges"].push_back("q z");
  expect_error(k, Status::Code::kCorrupt, "'q' is not in the vocabulary");
  k = j;
  k["model"]["merges"].push_back("t e");  // "te" is not a token
  expect_error(k, Status::Code::kCorrupt, "merged piece 'te'");
  k = j;
  k["model"]["merges"].push_back("abc");
  expect_error(k, Status::Code::kCorrupt, "two pieces");
  k = j;
  k["model"]["merges"].push_back(42);
  expect_error(k, Status::Code::kCorrupt, "merge #3");
  k = j;
  k["model"]["vocab"]["zz"] = 100;  // a gap: ids must be dense
  expect_error(k, Status::Code::kCorrupt, "id 100");
  k = j;
  k["model"]["vocab"]["zz"] = 3;  // id 3 twice
  expect_error(k, Status::Code::kCorrupt, "id 3 is given to both");
  k = j;
  k["model"]["vocab"]["zz"] = "seven";
  expect_error(k, Status::Code::kCorrupt, "must be an integer id");
  k = j;
  k["model"]["unk_token"] = "<nope>";
  expect_error(k, Status::Code::kCorrupt, "unk_token '<nope>'");
  k = j;
  k["normalizer"] = {{"type", "Lowercase"}};
  expect_error(k, Status::Code::kUnsupported, "normalizer type 'Lowercase'");
  k = j;
  k["pre_tokenizer"] = {{"type", "ByteLevel"}};  // with the "▁" normalizer: contradictory
  expect_error(k, Status::Code::kUnsupported, "ByteLevel");
  k = j;
  k["post_processor"]["special_tokens"]["<s>"]["ids"] = {5};
  expect_error(k, Status::Code::kCorrupt, "post_processor BOS '<s>'");
  // Deeply nested Sequences are refused, not recursed without bound.
  nlohmann::json deep = {{"type", "NFC"}};
  for (int i = 0; i < 40; ++i)
    deep = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array({deep})}};
  k = j;
  k["normalizer"] = deep;
  expect_error(k, Status::Code::kUnsupported, "nested too deeply");

  auto bad_cfg = ParseHfTokenizerJson(j.dump(), "tok.json", R"({"eos_token": "<eos>"})",
                                      "tokenizer_config.json");
  ASSERT_FALSE(bad_cfg.ok());
  EXPECT_NE(bad_cfg.status().message().find("eos_token '<eos>'"), std::string::npos)
      << bad_cfg.status().ToString();
}

TEST(HfTokenizerTest, RealTinyStories) {
  const std::string path = testing::SharedPath("models/tinystories-656k/tokenizer.json");
  if (!testing::FileExists(path)) GTEST_SKIP() << path << " absent";
  auto r = LoadHfTokenizerJson(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TokenizerSpec& t = *r;
  EXPECT_EQ(t.kind, TokenizerSpec::Kind::kBpeMerges);
  EXPECT_EQ(t.tokens.size(), 2048u);
  EXPECT_EQ(t.merges.size(), 1967u);
  EXPECT_EQ(t.merges[0], "e " + kMarker);
  EXPECT_EQ(t.tokens[0], "<unk>");
  EXPECT_EQ(t.tokens[1], "<|start_story|>");
  EXPECT_EQ(t.tokens[2], "<|end_story|>");
  EXPECT_EQ(t.tokens[3], "\n");
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);  // from tokenizer_config.json beside it
  EXPECT_EQ(t.pad_id, 0);
  EXPECT_TRUE(t.add_bos);
  EXPECT_TRUE(t.add_space_prefix);
  EXPECT_FALSE(t.byte_level);
  EXPECT_TRUE(t.byte_fallback);
  EXPECT_EQ(t.types[1], TokenType::kControl);
  EXPECT_EQ(t.types[3], TokenType::kNormal);
}

// ---------------------------------------------------------------------------------------------
// Fuzz-style robustness: truncations and random byte changes never crash, and whatever loads
// is internally consistent.

void CheckSpecInvariants(const TokenizerSpec& t) {
  ASSERT_FALSE(t.tokens.empty());
  if (!t.types.empty()) {
    ASSERT_EQ(t.types.size(), t.tokens.size());
  }
  if (!t.scores.empty()) {
    ASSERT_EQ(t.scores.size(), t.tokens.size());
  }
  for (int32_t id : {t.bos_id, t.eos_id, t.unk_id, t.pad_id}) {
    ASSERT_GE(id, -1);
    ASSERT_LT(id, static_cast<int32_t>(t.tokens.size()));
  }
}

std::string Mutate(const std::string& in, std::mt19937* rng) {
  std::string s = in;
  std::uniform_int_distribution<int> kind(0, 3);
  switch (kind(*rng)) {
    case 0:  // truncate
      s.resize(std::uniform_int_distribution<size_t>(0, s.size())(*rng));
      break;
    case 1:  // flip a few bytes anywhere
      for (int i = 0, n = 1 + (*rng)() % 4; i < n && !s.empty(); ++i) {
        s[(*rng)() % s.size()] ^= static_cast<char>(1 + (*rng)() % 255);
      }
      break;
    case 2:  // overwrite 4 bytes with an extreme integer
      if (s.size() >= 4) {
        const int32_t extremes[] = {0, -1, INT32_MIN, INT32_MAX, 1 << 20, 7};
        int32_t v = extremes[(*rng)() % 6];
        std::memcpy(&s[(*rng)() % (s.size() - 3)], &v, 4);
      }
      break;
    default:  // insert or delete a byte
      if (!s.empty()) {
        size_t at = (*rng)() % s.size();
        if ((*rng)() % 2) {
          s.erase(at, 1);
        } else {
          s = s.substr(0, at) + static_cast<char>((*rng)()) + s.substr(at);
        }
      }
  }
  return s;
}

TEST(TokenizerFuzzTest, Llama2cTokenizerNeverCrashes) {
  std::string base = MakeLlama2cTokenizer(Llama2cPieces(64));
  const std::string real = testing::SharedPath("models/stories260K/tok512.bin");
  const bool have_real = testing::FileExists(real);
  const std::string real_bytes = have_real ? testing::ReadFile(real) : "";
  std::mt19937 rng(1234);
  int ok = 0;
  for (int i = 0; i < 4000; ++i) {
    const bool use_real = have_real && i % 2;
    std::string s = Mutate(use_real ? real_bytes : base, &rng);
    auto r = ParseLlama2cTokenizer(s, use_real ? 512 : 64, "fuzz.bin");
    if (r.ok()) {
      ++ok;
      CheckSpecInvariants(*r);
      ASSERT_EQ(r->tokens.size(), use_real ? 512u : 64u);
    } else {
      ASSERT_FALSE(r.status().message().empty());
    }
  }
  // Byte flips inside piece text keep the file valid, so some cases must load.
  EXPECT_GT(ok, 100);
  EXPECT_LT(ok, 4000);
}

TEST(TokenizerFuzzTest, HfTokenizerJsonNeverCrashes) {
  std::string base = HfTokenizerJson(24).dump(1);
  std::mt19937 rng(99);
  int ok = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string s = Mutate(base, &rng);
    auto r = ParseHfTokenizerJson(s, "fuzz.json", i % 3 == 0 ? R"({"eos_token": "</s>"})" : "",
                                  "cfg.json");
    if (r.ok()) {
      ++ok;
      CheckSpecInvariants(*r);
    } else {
      ASSERT_FALSE(r.status().message().empty());
    }
  }
  EXPECT_GT(ok, 10);
  EXPECT_LT(ok, 4000);
}

TEST(TokenizerFuzzTest, RealTokenizerJsonMutationsNeverCrash) {
  const std::string path = testing::SharedPath("models/tinystories-656k/tokenizer.json");
  if (!testing::FileExists(path)) GTEST_SKIP() << path << " absent";
  const std::string base = testing::ReadFile(path);
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string s = Mutate(base, &rng);
    auto r = ParseHfTokenizerJson(s, "fuzz.json");
    if (r.ok()) CheckSpecInvariants(*r);
  }
}

}  // namespace
}  // namespace weir::format
