#include "tensor/dtype.h"

#include <algorithm>
#include <cctype>

namespace weir {

std::optional<DType> DTypeFromGgmlId(uint32_t id) {
  switch (id) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 8: return DType::kQ8_0;
    case 30: return DType::kBF16;
    default: return std::nullopt;
  }
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kQ4_0: return "Q4_0";
    case DType::kQ8_0: return "Q8_0";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

std::string GgmlTypeName(uint32_t id) {
  static const char* names[] = {
      "F32",  "F16",     "Q4_0",    "Q4_1",   "Q4_2(removed)", "Q4_3(removed)", "Q5_0",  "Q5_1",
      "Q8_0", "Q8_1",    "Q2_K",    "Q3_K",   "Q4_K",          "Q5_K",          "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",       "IQ3_S",         "IQ2_S", "IQ4_XS",
      "I8",   "I16",     "I32",     "I64",    "F64",           "IQ1_M",         "BF16"};
  if (id < sizeof(names) / sizeof(names[0])) return names[id];
  return "type#" + std::to_string(id);
}

std::optional<DType> DTypeFromName(const std::string& name) {
  std::string u = name;
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return std::toupper(c); });
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    if (u == DTypeName(t)) return t;
  }
  return std::nullopt;
}

bool IsQuantized(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }

int BlockSize(DType t) { return IsQuantized(t) ? kQK : 1; }

size_t BlockBytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kQ8_0: return sizeof(BlockQ8_0);
    case DType::kQ4_0: return sizeof(BlockQ4_0);
  }
  return 0;
}

float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t exp = (x >> 23) & 0xff;
  uint32_t mant = x & 0x7fffff;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    int shift = 14 - e;
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into exp: correct
  return static_cast<uint16_t>(sign | half);
}

uint16_t F32ToBF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace weir
