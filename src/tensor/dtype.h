// Element types of weight tensors and their block layouts. The numeric ids and block layouts
// are those of GGUF (ggml), so a GGUF tensor's bytes are used as they are:
//   F32  : 4-byte IEEE float
//   F16  : 2-byte IEEE half
//   BF16 : 2-byte bfloat16 (upper half of an F32)
//   Q8_0 : blocks of 32 values = { f16 d; int8 q[32]; }            34 bytes, x = d * q
//   Q4_0 : blocks of 32 values = { f16 d; uint8 qs[16]; }          18 bytes, x = d * (q - 8)
//          where value j (0..15) is the low nibble of qs[j] and value j+16 its high nibble.
// A row of a quantized tensor must hold a whole number of blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace weir {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kBF16 = 30,
};

constexpr int kQK = 32;  // values per Q8_0 / Q4_0 block

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Maps a GGUF/ggml type id to a supported DType; nullopt for types weir does not handle.
std::optional<DType> DTypeFromGgmlId(uint32_t id);
// "F32", "F16", "BF16", "Q8_0", "Q4_0".
const char* DTypeName(DType t);
// Name of any ggml type id, including unsupported ones ("Q4_K", "IQ2_XS", ...), for messages.
std::string GgmlTypeName(uint32_t id);
// Parses "f32", "F16", "q8_0", ... (case-insensitive).
std::optional<DType> DTypeFromName(const std::string& name);

// Values per block (1 for float types) and bytes per block.
int BlockSize(DType t);
// Q8_0 and Q4_0: blocks of 32 with a scale (the types whose dots run on an 8-bit activation).
bool IsQuantized(DType t);
size_t BlockBytes(DType t);
// Bytes for n values; n must be a multiple of BlockSize(t).
inline size_t RowBytes(DType t, int64_t n) {
  return static_cast<size_t>(n / BlockSize(t)) * BlockBytes(t);
}

// IEEE half <-> float, exact for all finite values, inf and nan.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round to nearest even
inline float BF16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t F32ToBF16(float f);  // round to nearest even

}  // namespace weir
