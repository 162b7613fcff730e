// Error messages about hostile files never carry the file's raw bytes: names and strings read from
// a GGUF, a safetensors header, tokenizer.json or config.json reach the message through
// base/printable.h (control and invalid UTF-8 bytes escaped, bidi overrides escaped, long names cut
// with their length).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "format/gguf_reader.h"
#include "format/hf_config.h"
#include "format/safetensors_reader.h"
#include "format/tokenizer_files.h"

namespace weir::format {
namespace {

// A hostile name: an ANSI escape that would clear the screen, a right-to-left override, a stray
// byte that is not UTF-8, a newline that would forge a second log line.
const std::string kHostile = "ev\x1b[2J\xe2\x80\xaeil\xff\nFAKE LOG LINE";

void ExpectClean(const std::string& msg) {
  for (unsigned char c : msg) {
    ASSERT_TRUE(c >= 0x20 && c != 0x7f && c != 0xff) << msg;
  }
  EXPECT_EQ(msg.find("\xe2\x80\xae"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ev\\x1b[2J\\u{202e}il\\xff\\nFAKE LOG LINE"), std::string::npos) << msg;
}

void Append(std::string* out, const void* p, size_t n) {
  out->append(static_cast<const char*>(p), n);
}
void AppendU32(std::string* out, uint32_t v) { Append(out, &v, 4); }
void AppendU64(std::string* out, uint64_t v) { Append(out, &v, 8); }
void AppendStr(std::string* out, const std::string& s) {
  AppendU64(out, s.size());
  out->append(s);
}

// A GGUF v3 file with the given u32 metadata keys and no tensors.
std::string GgufWithKeys(const std::vector<std::string>& keys) {
  std::string b = "GGUF";
  AppendU32(&b, 3);
  AppendU64(&b, 0);
  AppendU64(&b, keys.size());
  for (const std::string& k : keys) {
    AppendStr(&b, k);
    AppendU32(&b, 4);  // u32
    AppendU32(&b, 7);
  }
  return b;
}

Status ParseGguf(const std::string& bytes) {
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  return GgufFile::Parse("hostile.gguf", copy.data(), copy.size(), nullptr).status();
}

TEST(ErrorMessageTest, GgufKeyNameIsEscaped) {
  Status st = ParseGguf(GgufWithKeys({kHostile, kHostile}));  // appears twice
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("appears twice"), std::string::npos) << st.message();
  ExpectClean(st.message());
}

TEST(ErrorMessageTest, GgufLongKeyNameIsShortened) {
  std::string huge(100000, 'k');
  Status st = ParseGguf(GgufWithKeys({huge, huge}));
  ASSERT_FALSE(st.ok());
  EXPECT_LT(st.message().size(), 300u) << st.message().substr(0, 300);
  EXPECT_NE(st.message().find("(100000 bytes)"), std::string::npos) << st.message().substr(0, 300);
}

TEST(ErrorMessageTest, GgufStringValuesAreEscapedInLoaderMessages) {
  // general.architecture is a hostile string: the loader names it in its error.
  std::string b = "GGUF";
  AppendU32(&b, 3);
  AppendU64(&b, 0);
  AppendU64(&b, 1);
  AppendStr(&b, "general.architecture");
  AppendU32(&b, 8);  // string
  AppendStr(&b, kHostile);
  std::vector<uint8_t> copy(b.begin(), b.end());
  auto f = GgufFile::Parse("hostile.gguf", copy.data(), copy.size(), nullptr);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto c = ReadGgufLlamaConfig(*f);
  ASSERT_FALSE(c.ok());
  ExpectClean(c.status().message());
  // `weir inspect` renders the value the same way.
  ExpectClean(f->RenderValue(f->kvs()[0]));
}

TEST(ErrorMessageTest, SafetensorsTensorNameIsEscaped) {
  // JSON escapes give the parser the same hostile bytes, except the 0xff (JSON must be UTF-8).
  std::string json =
      R"({"ev\u001b[2J\u202eil\nX": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}})";
  std::string b;
  AppendU64(&b, json.size());
  b += json;
  b.append(4, '\0');
  auto h = ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(b.data()), b.size(),
                                  "hostile.safetensors");
  ASSERT_FALSE(h.ok());
  const std::string& msg = h.status().message();
  for (unsigned char c : msg) ASSERT_TRUE(c >= 0x20 && c != 0x7f) << msg;
  EXPECT_NE(msg.find("ev\\x1b[2J\\u{202e}il\\nX"), std::string::npos) << msg;
}

TEST(ErrorMessageTest, TokenizerJsonStringsAreEscaped) {
  auto t =
      ParseHfTokenizerJson(R"({"model": {"type": "\u001b[2J\u202eUnigram\n"}})", "tokenizer.json");
  ASSERT_FALSE(t.ok());
  const std::string& msg = t.status().message();
  for (unsigned char c : msg) ASSERT_TRUE(c >= 0x20 && c != 0x7f) << msg;
  EXPECT_NE(msg.find("\\x1b[2J\\u{202e}Unigram\\n"), std::string::npos) << msg;
}

TEST(ErrorMessageTest, ConfigJsonStringsAreEscaped) {
  auto c = ParseHfLlamaConfig(R"({"model_type": "\u001b]0;pwned\u0007\u202e"})", "config.json");
  ASSERT_FALSE(c.ok());
  const std::string& msg = c.status().message();
  for (unsigned char ch : msg) ASSERT_TRUE(ch >= 0x20 && ch != 0x7f) << msg;
  EXPECT_EQ(msg.find("\xe2\x80\xae"), std::string::npos) << msg;
}

}  // namespace
}  // namespace weir::format
