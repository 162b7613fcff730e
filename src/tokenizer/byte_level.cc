#include "tokenizer/byte_level.h"

#include <array>


namespace weir::tokenizer {
namespace {

constexpr bool StandsForItself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<uint16_t, 256> MakeByteToCodePoint() {
  std::array<uint16_t, 256> table{};
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    table[b] = static_cast<uint16_t>(StandsForItself(b) ? b : 256 + next++);
  }
  return table;
}
constexpr std::array<uint16_t, 256> kByteToCodePoint = MakeByteToCodePoint();
constexpr int kMappedLimit = 256 + 68;  // code points in [0, kMappedLimit) may be in the mapping

constexpr std::array<int16_t, kMappedLimit> MakeCodePointToByte() {
  std::array<int16_t, kMappedLimit> table{};
  for (auto& v : table) v = -1;
  for (int b = 0; b < 256; ++b) table[kByteToCodePoint[b]] = static_cast<int16_t>(b);
  return table;
}
constexpr std::array<int16_t, kMappedLimit> kCodePointToByte = MakeCodePointToByte();

}  // namespace

uint32_t ByteToCodePoint(uint8_t b) { return kByteToCodePoint[b]; }

int CodePointToByte(uint32_t cp) {
  return cp < static_cast<uint32_t>(kMappedLimit) ? kCodePointToByte[cp] : -1;
}

}  // namespace weir::tokenizer
