#include "tensor/dtype.h"

#include <algorithm>
#include <cctype>

#include "tensor/quant_iq4.h"
#include "tensor/quant_kquants.h"
#include "tensor/quant_legacy.h"

namespace weir {

namespace {

// The table. Rows are in ggml id order; Traits() finds a row by a direct index. The file types
// of Q3_K, Q4_K and Q5_K are llama.cpp's *_M mixes, the usual files of those types.
constexpr DTypeTraits kTraits[] = {
    {DType::kF32, "F32", 1, 4, DotKind::kFloat, DequantizeRowF32, QuantizeRowF32, 0},
    {DType::kF16, "F16", 1, 2, DotKind::kFloat, DequantizeRowF16, QuantizeRowF16, 1},
    {DType::kQ4_0, "Q4_0", kQK, sizeof(BlockQ4_0), DotKind::kInt8Block, DequantizeRowQ4_0,
     QuantizeRowQ4_0, 2},
    {DType::kQ4_1, "Q4_1", kQK, sizeof(BlockQ4_1), DotKind::kInt8Block, DequantizeRowQ4_1,
     QuantizeRowQ4_1, 3},
    {DType::kQ5_0, "Q5_0", kQK, sizeof(BlockQ5_0), DotKind::kInt8Block, DequantizeRowQ5_0,
     QuantizeRowQ5_0, 8},
    {DType::kQ5_1, "Q5_1", kQK, sizeof(BlockQ5_1), DotKind::kInt8Block, DequantizeRowQ5_1,
     QuantizeRowQ5_1, 9},
    {DType::kQ8_0, "Q8_0", kQK, sizeof(BlockQ8_0), DotKind::kInt8Block, DequantizeRowQ8_0,
     QuantizeRowQ8_0, 7},
    {DType::kQ2_K, "Q2_K", kQK_K, sizeof(BlockQ2_K), DotKind::kInt8Block, DequantizeRowQ2_K,
     QuantizeRowQ2_K, 10},
    {DType::kQ3_K, "Q3_K", kQK_K, sizeof(BlockQ3_K), DotKind::kInt8Block, DequantizeRowQ3_K,
     QuantizeRowQ3_K, 12},
    {DType::kQ4_K, "Q4_K", kQK_K, sizeof(BlockQ4_K), DotKind::kInt8Block, DequantizeRowQ4_K,
     QuantizeRowQ4_K, 15},
    {DType::kQ5_K, "Q5_K", kQK_K, sizeof(BlockQ5_K), DotKind::kInt8Block, DequantizeRowQ5_K,
     QuantizeRowQ5_K, 17},
    {DType::kQ6_K, "Q6_K", kQK_K, sizeof(BlockQ6_K), DotKind::kInt8Block, DequantizeRowQ6_K,
     QuantizeRowQ6_K, 18},
    {DType::kIQ4_NL, "IQ4_NL", kQK, sizeof(BlockIQ4_NL), DotKind::kInt8Block, DequantizeRowIQ4_NL,
     QuantizeRowIQ4_NL, 25},
    {DType::kIQ4_XS, "IQ4_XS", kQK_K, sizeof(BlockIQ4_XS), DotKind::kInt8Block, DequantizeRowIQ4_XS,
     QuantizeRowIQ4_XS, 30},
    {DType::kBF16, "BF16", 1, 2, DotKind::kFloat, DequantizeRowBF16, QuantizeRowBF16, 32},
};

// ggml id -> row of kTraits, or -1.
constexpr int kMaxGgmlId = 31;
struct IdIndex {
  int row[kMaxGgmlId];
};
constexpr IdIndex MakeIdIndex() {
  IdIndex ix{};
  for (int& r : ix.row) r = -1;
  for (int i = 0; i < static_cast<int>(sizeof(kTraits) / sizeof(kTraits[0])); ++i) {
    ix.row[static_cast<uint32_t>(kTraits[i].type)] = i;
  }
  return ix;
}
constexpr IdIndex kIdIndex = MakeIdIndex();

// Every enumerator has a row (checked at compile time).
constexpr bool AllRowsPresent() {
  for (DType t : {DType::kF32, DType::kF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                  DType::kQ8_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kBF16}) {
    if (kIdIndex.row[static_cast<uint32_t>(t)] < 0) return false;
  }
  return true;
}
static_assert(AllRowsPresent());

}  // namespace

std::span<const DTypeTraits> AllDTypeTraits() { return kTraits; }

const DTypeTraits& Traits(DType t) {
  return kTraits[kIdIndex.row[static_cast<uint32_t>(t)]];
}

std::optional<DType> DTypeFromGgmlId(uint32_t id) {
  if (id >= static_cast<uint32_t>(kMaxGgmlId) || kIdIndex.row[id] < 0) return std::nullopt;
  return kTraits[kIdIndex.row[id]].type;
}

const char* DTypeName(DType t) { return Traits(t).name; }

std::string GgmlTypeName(uint32_t id) {
  static const char* names[] = {
      "F32",  "F16",     "Q4_0",    "Q4_1",   "Q4_2(removed)", "Q4_3(removed)", "Q5_0",  "Q5_1",
      "Q8_0", "Q8_1",    "Q2_K",    "Q3_K",   "Q4_K",          "Q5_K",          "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",       "IQ3_S",         "IQ2_S", "IQ4_XS",
      "I8",   "I16",     "I32",     "I64",    "F64",           "IQ1_M",         "BF16",  "Q4_0_4_4",
      "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4",  "IQ4_NL_4_8",    "IQ4_NL_8_8",
      "MXFP4"};
  if (id < sizeof(names) / sizeof(names[0])) return names[id];
  return "type#" + std::to_string(id);
}

std::optional<DType> DTypeFromName(const std::string& name) {
  std::string u = name;
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const DTypeTraits& row : kTraits) {
    if (u == row.name) return row.type;
  }
  return std::nullopt;
}

std::string DTypeNameList() {
  std::string out;
  for (const DTypeTraits& row : kTraits) {
    if (!out.empty()) out += '|';
    for (const char* p = row.name; *p; ++p) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
    }
  }
  return out;
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
