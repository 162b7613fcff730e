#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/isa.h"
#include "kernels/kernel_test_util.h"

namespace weir::kernels {
namespace {

using testing::RandomFloats;

const int64_t kSizes[] = {1, 7, 16, 17, 67, 100, 4128};

// RmsNorm: the paths differ in the order of the sum of squares, a relative error of a few ulp
// in the scale; bound 1e-5 relative per element.
TEST(OpsTest, RmsNormMatchesReferenceOnEveryPath) {
  std::mt19937 rng(21);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (int64_t n : kSizes) {
      std::vector<float> x = RandomFloats(rng, n, -3, 3), w = RandomFloats(rng, n, 0.5f, 1.5f);
      std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      RmsNorm(got.data(), x.data(), w.data(), n, 1e-5f);
      ref::RmsNorm(want.data(), x.data(), w.data(), n, 1e-5f);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-30)
            << IsaName(isa) << " n " << n << " i " << i;
      }
      // In place (out aliases x).
      std::vector<float> inplace = x;
      RmsNorm(inplace.data(), inplace.data(), w.data(), n, 1e-5f);
      EXPECT_EQ(inplace, got) << IsaName(isa) << " n " << n;
    }
  }
}

// Softmax: the vector exp has a relative error below 1e-6; bound 1e-5 relative + 1e-12 absolute
// (for values that underflow in one path and are denormal in the other).
TEST(OpsTest, SoftmaxMatchesReferenceOnEveryPath) {
  std::mt19937 rng(22);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (int64_t n : kSizes) {
      for (float range : {1.0f, 30.0f, 200.0f}) {
        std::vector<float> x = RandomFloats(rng, n, -range, range);
        if (n > 3) x[2] = -std::numeric_limits<float>::infinity();  // a masked position
        std::vector<float> got = x, want = x;
        Softmax(got.data(), n);
        ref::Softmax(want.data(), n);
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-5 * want[i] + 1e-12)
              << IsaName(isa) << " n " << n << " range " << range << " i " << i;
          sum += got[i];
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
        if (n > 3) {
          EXPECT_EQ(got[2], 0.0f);
        }
      }
    }
  }
}

TEST(OpsTest, SiluMulMatchesReferenceOnEveryPath) {
  std::mt19937 rng(23);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (int64_t n : kSizes) {
      std::vector<float> g = RandomFloats(rng, n, -30, 30), u = RandomFloats(rng, n, -2, 2);
      if (n > 2) g[1] = -120.0f;  // exp(120) overflows f32: silu must still be ~0
      std::vector<float> got = g, want = g;
      SiluMul(got.data(), u.data(), n);
      ref::SiluMul(want.data(), u.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-30)
            << IsaName(isa) << " n " << n << " g " << g[i];
      }
    }
  }
}

// GeGLU on every path against the double-precision reference, including the saturated ends
// (large |g|: exp overflows to inf or the product is exactly 0) and the negative range where the
// tanh form 1 + tanh(z) would cancel.
TEST(OpsTest, GeluTanhMulMatchesReferenceOnEveryPath) {
  std::mt19937 rng(25);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (int64_t n : kSizes) {
      std::vector<float> g = RandomFloats(rng, n, -12, 12), u = RandomFloats(rng, n, -2, 2);
      if (n > 3) {
        g[1] = -120.0f;
        g[2] = 90.0f;
        g[3] = -3.5f;
      }
      std::vector<float> got = g, want = g;
      GeluTanhMul(got.data(), u.data(), n);
      ref::GeluTanhMul(want.data(), u.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-30)
            << IsaName(isa) << " n " << n << " g " << g[i];
      }
    }
  }
  // The reference is the tanh approximation itself: against gelu's formula in long double.
  for (float g : {-6.0f, -3.0f, -1.0f, -0.1f, 0.0f, 0.3f, 1.0f, 2.5f, 8.0f}) {
    float got = g;
    const float one = 1.0f;
    ref::GeluTanhMul(&got, &one, 1);
    const long double x = g;
    const long double want =
        0.5L * x * (1.0L + std::tanh(0.79788456080286535588L * (x + 0.044715L * x * x * x)));
    EXPECT_NEAR(got, static_cast<double>(want), 1e-6 * std::fabs(static_cast<double>(want)) + 1e-12) << g;
  }
}

TEST(OpsTest, RopeRotatesPairsAndKeepsNorms) {
  std::mt19937 rng(24);
  const int n_heads = 3, head_dim = 8;
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    std::vector<float> x = RandomFloats(rng, n_heads * head_dim);
    std::vector<float> at0 = x;
    Rope(at0.data(), n_heads, head_dim, head_dim, 0, 10000.0f, style);
    EXPECT_EQ(at0, x) << "position 0 is the identity";
    std::vector<float> y = x;
    const int pos = 5;
    Rope(y.data(), n_heads, head_dim, head_dim, pos, 10000.0f, style);
    for (int h = 0; h < n_heads; ++h) {
      for (int i = 0; i < head_dim / 2; ++i) {
        const int a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
        const int b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + head_dim / 2;
        const float* v = &x[h * head_dim];
        const float* r = &y[h * head_dim];
        const double theta = pos * std::pow(10000.0, -2.0 * i / head_dim);
        EXPECT_NEAR(r[a], v[a] * std::cos(theta) - v[b] * std::sin(theta), 1e-5);
        EXPECT_NEAR(r[b], v[a] * std::sin(theta) + v[b] * std::cos(theta), 1e-5);
      }
    }
  }
}

// Linear scaling and per-pair frequency factors (Llama 3.1's rope_freqs) against the definition
// in double: pair i turns by freq_scale * pos * base^(-2i/rot_dim) / factor[i]. rot_dim < head_dim
// leaves the tail alone. Without the scale or the factors the result differs (the check can fail).
TEST(OpsTest, RopeWithFreqScaleAndFactorsMatchesDefinition) {
  std::mt19937 rng(25);
  const int n_heads = 2, head_dim = 12, rot_dim = 8;
  const float factors[rot_dim / 2] = {1.0f, 1.7f, 8.0f, 0.5f};
  const float scale = 0.25f, base = 500.0f;
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    for (int pos : {0, 1, 7, 300, 5000}) {
      const std::vector<float> x = RandomFloats(rng, n_heads * head_dim);
      std::vector<float> y = x, plain = x;
      Rope(y.data(), n_heads, head_dim, rot_dim, pos, base, style, scale, factors);
      Rope(plain.data(), n_heads, head_dim, rot_dim, pos, base, style);
      double max_diff_from_plain = 0;
      for (int h = 0; h < n_heads; ++h) {
        const float* v = &x[h * head_dim];
        const float* r = &y[h * head_dim];
        for (int i = 0; i < rot_dim / 2; ++i) {
          const int a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
          const int b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + rot_dim / 2;
          const double theta =
              scale * pos * std::pow(static_cast<double>(base), -2.0 * i / rot_dim) / factors[i];
          // float angles: the error grows with the angle (pos 5000 -> ~1e-3 rad at most).
          const double tol = 1e-5 + 4e-7 * std::fabs(theta);
          EXPECT_NEAR(r[a], v[a] * std::cos(theta) - v[b] * std::sin(theta), tol)
              << RopeStyleName(style) << " pos " << pos << " pair " << i;
          EXPECT_NEAR(r[b], v[a] * std::sin(theta) + v[b] * std::cos(theta), tol);
          max_diff_from_plain = std::max(
              max_diff_from_plain, static_cast<double>(std::fabs(r[a] - plain[h * head_dim + a])));
        }
        for (int j = rot_dim; j < head_dim; ++j) EXPECT_EQ(r[j], v[j]);
      }
      if (pos > 0) EXPECT_GT(max_diff_from_plain, 1e-3) << "scaling had no effect at pos " << pos;
    }
  }
}

// The true top-k by a full sort: larger score first, NaN last, ties by lower index.
std::vector<int32_t> SortTopK(const std::vector<float>& s, int64_t k) {
  std::vector<int32_t> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (std::isnan(s[a])) return false;
    if (std::isnan(s[b])) return true;
    return s[a] > s[b];
  });
  order.resize(static_cast<size_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(s.size()))));
  std::sort(order.begin(), order.end());
  return order;
}

TEST(TopKTest, KEqualsNReturnsEveryIndex) {
  std::mt19937 rng(25);
  for (int64_t n : {1, 5, 100}) {
    std::vector<float> s = RandomFloats(rng, n);
    std::vector<int32_t> idx(static_cast<size_t>(n), -1);
    ASSERT_EQ(TopK(s.data(), n, n, idx.data()), n);
    std::vector<int32_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(idx, all);
    // k > n is clamped to n.
    std::vector<int32_t> idx2(static_cast<size_t>(n), -1);
    ASSERT_EQ(TopK(s.data(), n, n + 10, idx2.data()), n);
    EXPECT_EQ(idx2, all);
  }
}

TEST(TopKTest, ReturnsTheTrueTopKWithTiesByLowerIndex) {
  std::mt19937 rng(26);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 300);
    std::vector<float> s(static_cast<size_t>(n));
    // Few distinct values so ties are common; sometimes NaN, -0/+0, infinities.
    std::uniform_int_distribution<int> pick(0, 9);
    for (float& v : s) {
      const int p = pick(rng);
      v = p == 0   ? NAN
          : p == 1 ? -0.0f
          : p == 2 ? 0.0f
          : p == 3 ? -INFINITY
          : p == 4 ? INFINITY
                   : static_cast<float>(p % 3) - 1.0f;
    }
    const int64_t k = static_cast<int64_t>(rng() % (n + 1));
    std::vector<int32_t> idx(static_cast<size_t>(n), -1);
    const int64_t got = TopK(s.data(), n, k, idx.data());
    ASSERT_EQ(got, k);
    idx.resize(static_cast<size_t>(got));
    ASSERT_EQ(idx, SortTopK(s, k)) << "trial " << trial << " n " << n << " k " << k;
    // The caller-scratch form gives the same answer.
    std::vector<float> scratch(static_cast<size_t>(n));
    std::vector<int32_t> idx2(static_cast<size_t>(n), -1);
    ASSERT_EQ(TopK(s.data(), n, k, idx2.data(), scratch.data()), k);
    idx2.resize(static_cast<size_t>(k));
    EXPECT_EQ(idx2, idx);
  }
}

TEST(TopKTest, EmptyAndZero) {
  float s[3] = {1, 2, 3};
  int32_t idx[3] = {-1, -1, -1};
  EXPECT_EQ(TopK(s, 3, 0, idx), 0);
  EXPECT_EQ(TopK(s, 3, -4, idx), 0);
  EXPECT_EQ(TopK(s, 0, 2, idx), 0);
  EXPECT_EQ(idx[0], -1);
  EXPECT_EQ(TopK(s, 3, 1, idx), 1);
  EXPECT_EQ(idx[0], 2);
}

// The orthonormal Walsh-Hadamard rotation: by hand on a block of 4 (the rows of H_4 / 2), its
// own inverse, and dot products kept (what lets a quantized cache store rotated keys).
TEST(OpsTest, HadamardRotateIsOrthonormalAndItsOwnInverse) {
  std::vector<float> e = {1, 0, 0, 0, 0, 2, 0, 0};
  HadamardRotate(e.data(), 8, 4);
  const std::vector<float> want = {0.5f, 0.5f, 0.5f, 0.5f, 1, -1, 1, -1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(e[i], want[i]) << i;
  std::mt19937 rng(3);
  for (int block : {2, 64, 256}) {
    const int64_t n = 512;
    std::vector<float> a = RandomFloats(rng, n, -2, 2), b = RandomFloats(rng, n, -2, 2);
    std::vector<float> ra = a, rb = b;
    HadamardRotate(ra.data(), n, block);
    HadamardRotate(rb.data(), n, block);
    double dot = 0, rdot = 0;
    for (int64_t i = 0; i < n; ++i) {
      dot += double(a[i]) * b[i];
      rdot += double(ra[i]) * rb[i];
    }
    EXPECT_NEAR(rdot, dot, 1e-3) << block;
    EXPECT_NE(ra, a) << block;
    HadamardRotate(ra.data(), n, block);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(ra[i], a[i], 1e-5) << block << " " << i;
  }
}

}  // namespace
}  // namespace weir::kernels
