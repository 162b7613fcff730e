#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/quantize.h"

namespace weir {
namespace {

TEST(DTypeTest, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t v = static_cast<uint16_t>(h);
    float f = F16ToF32(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), v) << std::hex << h;
  }
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(BF16ToF32(0x3f80), 1.0f);
  float x = 1.0f + std::ldexp(1.0f, -8);  // exactly halfway: stays even
  EXPECT_EQ(F32ToBF16(x), 0x3f80);
}

TEST(QuantizeTest, RoundTripErrorWithinBlockScale) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 1);
  const int n = 96;
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = nd(rng);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    std::vector<uint8_t> buf(RowBytes(t, n));
    QuantizeRow(t, x.data(), buf.data(), n);
    DequantizeRow(t, buf.data(), y.data(), n);
    for (int b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
      // Q4_0 clamps q=16 to 15 on the side opposite the extreme value: one full step.
      float bound = t == DType::kQ4_0 ? amax / 8 * 1.01f + 1e-3f
                  : t == DType::kQ8_0 ? amax / 127 * 0.51f + 1e-3f
                  : t == DType::kBF16 ? amax / 128 : t == DType::kF16 ? amax / 1024 : 0.0f;
      for (int j = 0; j < 32; ++j) {
        EXPECT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound) << DTypeName(t);
      }
    }
  }
}

TEST(DTypeTest, NamesAndIds) {
  EXPECT_EQ(DTypeFromGgmlId(8), DType::kQ8_0);
  EXPECT_EQ(DTypeFromGgmlId(12), DType::kQ4_K);
  EXPECT_FALSE(DTypeFromGgmlId(16).has_value());  // IQ2_XXS: not in the table
  EXPECT_FALSE(DTypeFromGgmlId(4).has_value());   // removed from the format
  EXPECT_EQ(GgmlTypeName(12), "Q4_K");
  EXPECT_EQ(DTypeFromName("q4_0"), DType::kQ4_0);
  EXPECT_EQ(RowBytes(DType::kQ4_0, 64), 36u);
}

}  // namespace
}  // namespace weir
