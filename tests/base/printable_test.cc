#include "base/printable.h"

#include <gtest/gtest.h>

#include <string>

namespace weir {
namespace {

TEST(PrintableTest, PlainTextAndValidUtf8PassThrough) {
  EXPECT_EQ(Printable("blk.0.ffn_up.weight"), "blk.0.ffn_up.weight");
  EXPECT_EQ(Printable("\xe2\x96\x81th\xc3\xa9 \xf0\x9f\x99\x82 \xe6\x97\xa5"),
            "\xe2\x96\x81th\xc3\xa9 \xf0\x9f\x99\x82 \xe6\x97\xa5");
  EXPECT_EQ(Printable(""), "");
}

TEST(PrintableTest, ControlCharactersAreEscaped) {
  EXPECT_EQ(Printable("a\nb\tc\rd\\e"), "a\\nb\\tc\\rd\\\\e");
  EXPECT_EQ(Printable(std::string("x\0y", 3)), "x\\x00y");
  EXPECT_EQ(Printable("\x1b[31mred\x7f"), "\\x1b[31mred\\x7f");
}

TEST(PrintableTest, InvalidUtf8IsEscapedBytewise) {
  EXPECT_EQ(Printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(Printable("a\x80z"), "a\\x80z");  // stray continuation byte
  EXPECT_EQ(Printable("\xc3"), "\\xc3");      // truncated at the end
  EXPECT_EQ(Printable("\xe2\x96z"),
            "\\xe2\\x96z");                                 // truncated before a non-continuation
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate
  EXPECT_EQ(Printable("\xf4\x90\x80\x80"),
            "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
}

TEST(PrintableTest, DisplayChangingCodePointsAreEscaped) {
  EXPECT_EQ(Printable("\xc2\x85"), "\\u{0085}");  // NEL, a C1 control
  EXPECT_EQ(Printable("ab\xe2\x80\xaeqp"),
            "ab\\u{202e}qp");                           // right-to-left override
  EXPECT_EQ(Printable("\xe2\x81\xa6x"), "\\u{2066}x");  // left-to-right isolate
  EXPECT_EQ(Printable("\xe2\x80\xa8"), "\\u{2028}");    // line separator
  EXPECT_EQ(Printable("\xef\xbb\xbfk"), "\\u{feff}k");  // BOM
}

TEST(PrintableTest, LongTextIsCutAtACharacterBoundaryWithItsLength) {
  std::string long_name(300, 'k');
  EXPECT_EQ(Printable(long_name), std::string(80, 'k') + "... (300 bytes)");
  EXPECT_EQ(Printable(long_name, 10), std::string(10, 'k') + "... (300 bytes)");
  // A 3-byte character that would cross the limit is left out whole.
  std::string s = std::string(9, 'a') + "\xe6\x97\xa5" + "bbb";
  EXPECT_EQ(Printable(s, 10), std::string(9, 'a') + "... (15 bytes)");
  EXPECT_EQ(Printable(s, 12), std::string(9, 'a') + "\xe6\x97\xa5... (15 bytes)");
  // Exactly max_bytes: not cut.
  EXPECT_EQ(Printable(std::string(10, 'z'), 10), std::string(10, 'z'));
}

TEST(PrintableTest, OutputIsAlwaysOneLineOfValidUtf8) {
  // Every single byte and every byte pair: no raw control or invalid byte survives.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; b += 7) {
      std::string in = {static_cast<char>(a), static_cast<char>(b)};
      std::string out = Printable(in);
      for (unsigned char c : out) {
        ASSERT_TRUE(c >= 0x20 && c != 0x7f) << "input " << a << "," << b;
      }
      // The output is valid printable UTF-8: a second pass only doubles its backslashes.
      std::string doubled;
      for (char c : out) doubled += c == '\\' ? std::string("\\\\") : std::string(1, c);
      EXPECT_EQ(Printable(out, 1000), doubled) << a << "," << b;
    }
  }
}

}  // namespace
}  // namespace weir
