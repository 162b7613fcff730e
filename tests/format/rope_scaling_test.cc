#include "format/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>

namespace weir::format {
namespace {

// Llama 3.1 8B's RoPE (head_dim 128, base 500000, rope_scaling factor 8, low 1, high 4, original
// context 8192): the factors rise from 1 (fast pairs) through a blended band to 8 (slow pairs).
// The band, by the definition: wavelengths 2048..8192, i.e. 2 pi * 500000^(2i/128) in that
// range, pairs i = 29..34 (wavelength 1956 at i = 28, 8219 at i = 35).
TEST(RopeScalingTest, Llama31Factors) {
  auto r = Llama3RopeFreqs(Llama3RopeScaling{}, 500000.0, 128, "test");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<float>& f = *r;
  ASSERT_EQ(f.size(), 64u);
  for (int i = 0; i <= 28; ++i) EXPECT_EQ(f[i], 1.0f) << i;
  for (int i = 29; i <= 34; ++i) {
    EXPECT_GT(f[i], 1.0f) << i;
    EXPECT_LT(f[i], 8.0f) << i;
    EXPECT_GT(f[i], f[i - 1]) << i;  // rising through the band
  }
  for (int i = 35; i < 64; ++i) EXPECT_EQ(f[i], 8.0f) << i;
  // One blended value by hand: i = 31, wavelength 2 pi * 500000^(62/128).
  const double wl = 2 * M_PI * std::pow(500000.0, 62.0 / 128), s = (8192 / wl - 1) / 3;
  EXPECT_NEAR(f[31], 1 / ((1 - s) / 8 + s), 1e-5);
}

TEST(RopeScalingTest, BadParametersAreNamed) {
  auto expect = [](Llama3RopeScaling s, double base, int dim, const char* needle) {
    auto r = Llama3RopeFreqs(s, base, dim, "cfg.json rope_scaling");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("cfg.json rope_scaling"), std::string::npos);
  };
  Llama3RopeScaling s;
  s.factor = 0;
  expect(s, 1e4, 64, "factor = 0");
  s = {}, s.low_freq_factor = -1;
  expect(s, 1e4, 64, "low_freq_factor = -1");
  s = {}, s.high_freq_factor = 1;
  expect(s, 1e4, 64, "high_freq_factor = 1");
  s = {}, s.original_max_position_embeddings = NAN;
  expect(s, 1e4, 64, "original_max_position_embeddings = nan");
  expect(Llama3RopeScaling{}, 1.0, 64, "base (rope_theta) = 1");
  expect(Llama3RopeScaling{}, 1e4, 7, "dim (head_dim) = 7");
}

}  // namespace
}  // namespace weir::format
