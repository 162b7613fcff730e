// Tokenizer tests on the real vocabularies in shared/models (each skips when its file is absent):
// llama.cpp's SentencePiece test vectors, llama2.c tokenizer.bin vs the same vocabulary in GGUF,
// stories260K's prompt ids, TinyStories-656K's tokenizer.json against an independent Python
// implementation of Hugging Face BPE (hf_bpe_oracle.py), and a byte-level tokenizer.json trained
// by that script and compared the same way.
#include "format/tokenizer_files.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "format/gguf_reader.h"
#include "testing/testing.h"
#include "tokenizer/tokenizer.h"

namespace weir::tokenizer {
namespace {

using format::TokenizerSpec;

const char kLlamaGguf[] = "models/llama2-tokenizer/ggml-vocab-llama-spm.gguf";
const char kLlamaBin[] = "models/llama2-tokenizer/tokenizer.bin";
const char kTok512[] = "models/stories260K/tok512.bin";
const char kStories260kGguf[] = "models/stories260K/stories260K-F32.gguf";
const char k656kJson[] = "models/tinystories-656k/tokenizer.json";
const char k656kGguf[] = "models/tinystories-656k/tinystories-656k-F32.gguf";
const char kTinyStoriesText[] = "data/tinystories/tinystories_val_head.txt";

#define SKIP_IF_ABSENT(rel)                                                                  \
  do {                                                                                       \
    if (!testing::FileExists(testing::SharedPath(rel))) GTEST_SKIP() << rel << " not found"; \
  } while (0)

Result<TokenizerSpec> GgufSpec(const std::string& rel) {
  WEIR_ASSIGN_OR_RETURN(format::GgufFile file, format::GgufFile::Open(testing::SharedPath(rel)));
  return format::ReadGgufTokenizer(file);
}

Tokenizer MustCreate(const Result<TokenizerSpec>& spec) {
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  auto t = Tokenizer::Create(spec.value());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (!out.empty()) out += ' ';
    out += std::to_string(id);
  }
  return out;
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's vector files: in .inp, every input is followed by "\n__ggml_vocab_test__\n" (so
// the file ends with that separator and an input's own last newline is part of the separator);
// .out has one line of space-separated ids per input.
std::vector<VocabCase> ReadVocabCases(const std::string& inp_path, const std::string& out_path) {
  const std::string inp = testing::ReadFile(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (size_t pos = 0; pos < inp.size();) {
    size_t end = inp.find(sep, pos);
    EXPECT_NE(end, std::string::npos) << "unterminated case at byte " << pos;
    if (end == std::string::npos) break;
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + sep.size();
  }
  std::istringstream out(testing::ReadFile(out_path));
  std::string line;
  size_t i = 0;
  while (std::getline(out, line)) {
    EXPECT_LT(i, cases.size()) << "more lines in .out than inputs in .inp";
    if (i >= cases.size()) break;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) cases[i].ids.push_back(id);
    ++i;
  }
  EXPECT_EQ(i, cases.size()) << "fewer lines in .out than inputs in .inp";
  return cases;
}

// ---------------------------------------------------------------------------------------------
// Llama 2 SentencePiece vocabulary.

TEST(LlamaSpmTest, ReadsVectorFileFormat) {
  SKIP_IF_ABSENT(kLlamaGguf);
  auto cases = ReadVocabCases(testing::SharedPath(kLlamaGguf) + ".inp",
                              testing::SharedPath(kLlamaGguf) + ".out");
  ASSERT_EQ(cases.size(), 46u);
  EXPECT_EQ(cases[0].text, "ied 4 \xC2\xBD months");
  EXPECT_EQ(cases[2].text, "");
  EXPECT_TRUE(cases[2].ids.empty());
  EXPECT_EQ(cases[7].text, "\n");
  EXPECT_EQ(cases[10].text, "\t\n");
}

TEST(LlamaSpmTest, EveryLlamaCppVectorMatches) {
  SKIP_IF_ABSENT(kLlamaGguf);
  Tokenizer t = MustCreate(GgufSpec(kLlamaGguf));
  ASSERT_EQ(t.vocab_size(), 32000);
  EXPECT_EQ(t.kind(), TokenizerSpec::Kind::kSentencePiece);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.unk_id(), 0);
  auto cases = ReadVocabCases(testing::SharedPath(kLlamaGguf) + ".inp",
                              testing::SharedPath(kLlamaGguf) + ".out");
  ASSERT_EQ(cases.size(), 46u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const VocabCase& c = cases[i];
    EXPECT_EQ(Join(t.Encode(c.text, false)), Join(c.ids)) << "case " << i << ": '" << c.text << "'";
    // Every byte is representable (byte fallback), so decoding gives the input back.
    EXPECT_EQ(t.DecodeAll(t.Encode(c.text, true)), c.text) << "case " << i;
  }
}

TEST(LlamaSpmTest, Llama2cTokenizerBinEncodesLikeTheGguf) {
  SKIP_IF_ABSENT(kLlamaGguf);
  SKIP_IF_ABSENT(kLlamaBin);
  Tokenizer gguf = MustCreate(GgufSpec(kLlamaGguf));
  Tokenizer bin = MustCreate(format::LoadLlama2cTokenizer(testing::SharedPath(kLlamaBin), 32000));
  ASSERT_EQ(bin.vocab_size(), 32000);
  EXPECT_EQ(bin.bos_id(), 1);
  EXPECT_EQ(bin.eos_id(), 2);
  auto cases = ReadVocabCases(testing::SharedPath(kLlamaGguf) + ".inp",
                              testing::SharedPath(kLlamaGguf) + ".out");
  for (size_t i = 0; i < cases.size(); ++i) {
    const VocabCase& c = cases[i];
    EXPECT_EQ(Join(bin.Encode(c.text, true)), Join(gguf.Encode(c.text, true))) << "case " << i;
    EXPECT_EQ(Join(bin.Encode(c.text, false)), Join(c.ids)) << "case " << i;
    EXPECT_EQ(bin.DecodeAll(bin.Encode(c.text, true)), c.text) << "case " << i;
  }
}

TEST(LlamaSpmTest, LongTextRoundTripsAndAgreesWithTokenizerBin) {
  SKIP_IF_ABSENT(kLlamaGguf);
  SKIP_IF_ABSENT(kLlamaBin);
  SKIP_IF_ABSENT(kTinyStoriesText);
  // The whole 794 KB text in one call: a quadratic merge loop would not finish in a test.
  const std::string text = testing::ReadFile(testing::SharedPath(kTinyStoriesText));
  Tokenizer gguf = MustCreate(GgufSpec(kLlamaGguf));
  Tokenizer bin = MustCreate(format::LoadLlama2cTokenizer(testing::SharedPath(kLlamaBin), 32000));
  std::vector<int32_t> ids = gguf.Encode(text, true);
  EXPECT_LT(ids.size(), text.size() / 2);  // real merging happened
  EXPECT_EQ(gguf.DecodeAll(ids), text);
  EXPECT_EQ(bin.Encode(text, true), ids);
}

// ---------------------------------------------------------------------------------------------
// stories260K (llama2.c tok512.bin and its GGUF conversion).

TEST(Stories260kTest, PromptIdsMatchLlama2c) {
  SKIP_IF_ABSENT(kTok512);
  // SOURCES.md: llama.cpp and llama2.c both give these ids for this prompt.
  const std::vector<int32_t> expected = {1, 403, 407, 261, 378};
  Tokenizer bin = MustCreate(format::LoadLlama2cTokenizer(testing::SharedPath(kTok512), 512));
  EXPECT_EQ(bin.Encode("Once upon a time", true), expected);
  EXPECT_EQ(bin.DecodeAll(expected), "Once upon a time");
  EXPECT_EQ(bin.Decode(1, 403), "Once");  // llama2.c drops the space after BOS
  EXPECT_EQ(bin.Decode(403, 407), " upon");
  if (testing::FileExists(testing::SharedPath(kStories260kGguf))) {
    Tokenizer gguf = MustCreate(GgufSpec(kStories260kGguf));
    EXPECT_EQ(gguf.Encode("Once upon a time", true), expected);
  }
}

TEST(Stories260kTest, TokenizerBinAndGgufAgreeOnStories) {
  SKIP_IF_ABSENT(kTok512);
  SKIP_IF_ABSENT(kStories260kGguf);
  SKIP_IF_ABSENT(kTinyStoriesText);
  const std::string text =
      testing::ReadFile(testing::SharedPath(kTinyStoriesText)).substr(0, 100000);
  Tokenizer bin = MustCreate(format::LoadLlama2cTokenizer(testing::SharedPath(kTok512), 512));
  Tokenizer gguf = MustCreate(GgufSpec(kStories260kGguf));
  std::vector<int32_t> ids = bin.Encode(text, true);
  EXPECT_EQ(gguf.Encode(text, true), ids);
  EXPECT_EQ(bin.DecodeAll(ids), text);
}

// ---------------------------------------------------------------------------------------------
// TinyStories-656K tokenizer.json and the Python oracle.

// Runs hf_bpe_oracle.py encode on `inputs`; returns its ids per input.
std::vector<std::vector<int32_t>> OracleEncode(const std::string& tokenizer_json,
                                               const std::vector<std::string>& inputs) {
  const std::string dir = testing::TempDir();
  testing::WriteFile(dir + "/inputs.json", nlohmann::json(inputs).dump());
  testing::CommandResult r = testing::RunCommand(testing::Python() + " " + testing::SourceDir() +
                                                 "/tests/tokenizer/hf_bpe_oracle.py encode '" +
                                                 tokenizer_json + "' " + dir + "/inputs.json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  return nlohmann::json::parse(r.out).get<std::vector<std::vector<int32_t>>>();
}

// Hand-written inputs that exercise spaces, newlines, unknown characters and invalid UTF-8-free
// non-ASCII text, plus paragraphs of the TinyStories text when it is there.
std::vector<std::string> OracleInputs(size_t story_bytes) {
  std::vector<std::string> inputs = {
      "Once upon a time",
      "Hello world",
      " leading space",
      "trailing space ",
      "two  spaces   three",
      "line one\nline two\n\n\"Quoted,\" she said.",
      "a/b (c) @d",
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",
      "\t\ttabs\tand\ttext",
      "numbers 3.14 and 2048!",
      "",
      "\xE2\x80\x9CSmart quotes\xE2\x80\x9D and \xE2\x80\x94 dashes",
  };
  const std::string path = testing::SharedPath(kTinyStoriesText);
  if (testing::FileExists(path)) {
    const std::string text = testing::ReadFile(path).substr(0, story_bytes);
    inputs.push_back(text);
    // Paragraphs one by one as well (an encoder that keeps state across calls would show here).
    for (size_t pos = 0, n = 0; pos < text.size() && n < 40; ++n) {
      size_t end = text.find("\n\n", pos);
      if (end == std::string::npos) end = text.size();
      inputs.push_back(text.substr(pos, end - pos));
      pos = end + 2;
    }
  }
  return inputs;
}

TEST(TinyStories656kTest, TokenizerJsonMatchesPythonOracle) {
  SKIP_IF_ABSENT(k656kJson);
  const std::string json_path = testing::SharedPath(k656kJson);
  Tokenizer t = MustCreate(format::LoadHfTokenizerJson(json_path));
  ASSERT_EQ(t.vocab_size(), 2048);
  EXPECT_EQ(t.kind(), TokenizerSpec::Kind::kBpeMerges);
  const std::vector<std::string> inputs = OracleInputs(30000);
  const auto expected = OracleEncode(json_path, inputs);
  ASSERT_EQ(expected.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(Join(t.Encode(inputs[i], false)), Join(expected[i]))
        << "input " << i << ": '" << inputs[i].substr(0, 200) << "'";
  }
}

TEST(TinyStories656kTest, SampleTokenCountFromSources) {
  SKIP_IF_ABSENT(k656kJson);
  SKIP_IF_ABSENT(kTinyStoriesText);
  // SOURCES.md: "a 5.8 KB TinyStories sample" gives 1251 tokens in llama.cpp and with
  // tokenizer.json. Our reading of that sample: the first 5800 bytes of the text, BOS first.
  Tokenizer t = MustCreate(format::LoadHfTokenizerJson(testing::SharedPath(k656kJson)));
  const std::string sample =
      testing::ReadFile(testing::SharedPath(kTinyStoriesText)).substr(0, 5800);
  EXPECT_EQ(t.Encode(sample, true).size(), 1251u);
}

TEST(TinyStories656kTest, UnknownCharactersBecomeUnk) {
  SKIP_IF_ABSENT(k656kJson);
  Tokenizer t = MustCreate(format::LoadHfTokenizerJson(testing::SharedPath(k656kJson)));
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  // The vocabulary has no byte tokens: '/', '(', '@' and non-ASCII text become <unk>.
  for (const char* text : {"/", "(", "@", "\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC", "\xFF\xFE"}) {
    std::vector<int32_t> ids = t.Encode(std::string("x") + text + "y", false);
    EXPECT_NE(std::find(ids.begin(), ids.end(), 0), ids.end()) << text << ": " << Join(ids);
  }
  // A run of unknown characters is one <unk> (tokenizer.json has fuse_unk).
  std::vector<int32_t> ids = t.Encode("a/(@b", false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 1) << Join(ids);
  EXPECT_EQ(t.DecodeAll(t.Encode("Once upon a time", true)), "Once upon a time");
}

TEST(TinyStories656kTest, GgufScoresReproduceTokenizerJson) {
  SKIP_IF_ABSENT(k656kJson);
  SKIP_IF_ABSENT(k656kGguf);
  SKIP_IF_ABSENT(kTinyStoriesText);
  // The GGUF stores -(merge rank) as scores (SOURCES.md), so score-driven SentencePiece merging
  // should give tokenizer.json's ids. The GGUF path does not fuse runs of unknown characters,
  // so compare after collapsing runs of <unk>.
  Tokenizer json = MustCreate(format::LoadHfTokenizerJson(testing::SharedPath(k656kJson)));
  Tokenizer gguf = MustCreate(GgufSpec(k656kGguf));
  EXPECT_EQ(gguf.kind(), TokenizerSpec::Kind::kSentencePiece);
  auto collapse = [](std::vector<int32_t> ids) {
    ids.erase(
        std::unique(ids.begin(), ids.end(), [](int32_t a, int32_t b) { return a == 0 && b == 0; }),
        ids.end());
    return ids;
  };
  const std::string text = testing::ReadFile(testing::SharedPath(kTinyStoriesText));
  EXPECT_EQ(collapse(gguf.Encode(text, true)), json.Encode(text, true));
}

// ---------------------------------------------------------------------------------------------
// A byte-level (GPT-2 style) tokenizer.json trained by the oracle script.

TEST(ByteLevelJsonTest, TrainedTokenizerMatchesPythonOracle) {
  const std::string dir = testing::TempDir();
  std::string corpus;
  if (testing::FileExists(testing::SharedPath(kTinyStoriesText))) {
    corpus = testing::ReadFile(testing::SharedPath(kTinyStoriesText)).substr(0, 20000);
  } else {
    for (int i = 0; i < 50; ++i) {
      corpus +=
          "Once upon a time, there was a little dog named Spot. He liked to run and play "
          "in the park with his friends. It's the best day, they'd say!\n\n";
    }
  }
  testing::WriteFile(dir + "/corpus.txt", corpus);
  const std::string json_path = dir + "/tokenizer.json";
  testing::CommandResult r = testing::RunCommand(
      testing::Python() + " " + testing::SourceDir() +
      "/tests/tokenizer/hf_bpe_oracle.py train-byte-level " + dir + "/corpus.txt 300 " + json_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  auto spec = format::LoadHfTokenizerJson(json_path);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->byte_level);
  Tokenizer t = MustCreate(spec);
  // 300 merges asked for; the fallback corpus (no shared text) is too repetitive for all of them.
  EXPECT_GT(spec->merges.size(), 50u);
  EXPECT_LE(spec->merges.size(), 300u);
  EXPECT_EQ(t.vocab_size(), static_cast<int>(256 + spec->merges.size() + 1));

  std::vector<std::string> inputs = OracleInputs(8000);
  inputs.push_back("we'll they're I'd it's DON'T");
  inputs.push_back("x_y__z snake_case 12345 3.14");
  inputs.push_back("\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80");
  inputs.push_back("   \n\n  end  ");
  const auto expected = OracleEncode(json_path, inputs);
  ASSERT_EQ(expected.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> ids = t.Encode(inputs[i], false);
    EXPECT_EQ(Join(ids), Join(expected[i]))
        << "input " << i << ": '" << inputs[i].substr(0, 200) << "'";
    EXPECT_EQ(t.DecodeAll(ids), inputs[i]) << "input " << i;
  }
}

}  // namespace
}  // namespace weir::tokenizer
