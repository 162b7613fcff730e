// Every row of the DTypeTraits table (dtype.h) against its own invariants: the table is
// consistent, quantize -> dequantize stays within a per-type error bound relative to the block's
// largest magnitude, the K quantizers' search beats plain rounding, adversarial blocks give
// finite output, and re-quantizing a dequantized row is stable where the scheme makes that true.
//
// Oracle I/O (used by tests/reference/check_quant_types.py, skipped unless the variables are
// set; all files are raw little-endian, no headers):
//   WEIR_QUANT_DUMP=<dir>  QuantOracleIo.DumpRandomRows writes, for every type NAME in the table
//                          (ggml spelling, e.g. Q4_K): NAME.in.f32 (kOracleValues f32 inputs,
//                          seeded), NAME.q.bin (weir's QuantizeRow of them) and NAME.deq.f32
//                          (weir's DequantizeRow of NAME.q.bin).
//   WEIR_QUANT_IN=<dir>    QuantOracleIo.DequantizeGivenBlocks reads every NAME.bin in <dir>
//                          (whole blocks of type NAME) and writes NAME.out.f32, its DequantizeRow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant_iq4.h"
#include "tensor/quant_kquants.h"
#include "tensor/quantize.h"

namespace weir {
namespace {

constexpr int64_t kRowValues = 8 * kQK_K;  // a whole number of blocks of every type
constexpr int64_t kOracleValues = 64 * kQK_K;

std::string Lower(const char* s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<float> RoundTrip(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(RowBytes(t, static_cast<int64_t>(x.size())));
  QuantizeRow(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size());
  DequantizeRow(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

std::vector<uint8_t> Quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(RowBytes(t, static_cast<int64_t>(x.size())));
  QuantizeRow(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

// Error bounds of one type, as fractions of the largest magnitude in the block (for the float
// types, of each value itself). Derived from the step of each scheme (below) with a margin for
// the f16 rounding of the scales; the search quantizers are measured to sit well inside them.
struct Bound {
  double max_abs;  // |x - y| <= max_abs * amax (+ tiny)
  double rms;      // sqrt(mean (x - y)^2) <= rms * amax over a block
};

Bound BoundFor(DType t) {
  switch (t) {
    case DType::kF32:
      return {0, 0};
    case DType::kF16:
      return {1.0 / 2048, 1.0 / 2048};  // half an ulp (+ 2^-25 for subnormals)
    case DType::kBF16:
      return {1.0 / 256, 1.0 / 256};  // half an ulp of an 8-bit significand
    // d = amax/127: half a step, plus up to 127 * 2^-11 steps from rounding d to f16.
    case DType::kQ8_0:
      return {0.57 / 127, 0.57 / 127};
    // d = amax/8 (or /16): values at the far end of the range are a whole step off (code 16 is
    // clamped to 15); a block of +-amax is mostly such values, so the rms bound is a step too.
    case DType::kQ4_0:
      return {1.01 / 8, 1.01 / 8};
    case DType::kQ5_0:
      return {1.01 / 16, 1.01 / 16};
    // d = (max - min)/15 (or /31) <= 2 amax/15: half a step, plus the f16 min's rounding. The grid
    // has no point at 0, so a block clustered between two points can sit half a step off
    // everywhere: the rms bound is the per-value one.
    case DType::kQ4_1:
      return {1.1 / 15, 1.1 / 15};
    case DType::kQ5_1:
      return {1.1 / 31, 1.1 / 31};
    // K types: a sub-block spans at most 2 amax in 2^bits - 1 steps; the searched scale may clip
    // a few values, and the sub-block scales are themselves quantized, so the per-value bound is
    // a step (not half) and the RMS bound a generous fraction of a step.
    case DType::kQ2_K:
      return {2.0 / 3, 0.25};
    case DType::kQ3_K:
      return {1.0 / 3.5, 0.1};
    case DType::kQ4_K:
      return {2.0 / 15, 0.05};
    case DType::kQ5_K:
      return {2.0 / 31, 0.025};
    case DType::kQ6_K:
      return {1.0 / 31, 0.0125};
    // IQ4: the largest value sits on an end of the 16 levels (127 level units from 0); the
    // widest gap between levels is 24 units, so a value is at most 12 units off, and values at
    // the far end (up to 127 beyond the other end's 113) at most 14; the searched scale may give
    // up a little of that for the rest of the block. A block of one sign uses the 8 levels of
    // one side only (gaps of 10-24 units over 127: rms about 0.04 of amax on uniform values,
    // 0.051 the worst block measured). IQ4_XS's 6-bit sub-block scales add up to half a code step
    // of the super-block scale.
    case DType::kIQ4_NL:
      return {16.0 / 113, 0.06};
    case DType::kIQ4_XS:
      return {20.0 / 113, 0.06};
  }
  return {0, 0};
}

// Checks y against x block by block; returns the worst rms / amax seen. The bounds hold while
// the block's f16 scale is a normal number; tiny blocks (f16-subnormal scales, whose relative
// precision is poor by design of the formats) are checked with `tiny_abs` extra absolute error.
double ExpectWithinBound(DType t, const std::vector<float>& x, const std::vector<float>& y,
                         const std::string& what, double tiny_abs = 0) {
  const Bound b = BoundFor(t);
  const int bs = BlockSize(t);
  double worst = 0;
  if (bs == 1) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double sub = t == DType::kF16 ? std::ldexp(1.0, -25) : 0.0;  // f16 subnormal step / 2
      EXPECT_LE(std::fabs(static_cast<double>(x[i]) - y[i]),
                b.max_abs * std::fabs(x[i]) + sub + tiny_abs)
          << DTypeName(t) << " " << what << " value " << i;
    }
    return 0;
  }
  for (size_t blk = 0; blk < x.size() / bs; ++blk) {
    double amax = 0, se = 0, worst_abs = 0;
    for (int j = 0; j < bs; ++j) {
      const size_t i = blk * bs + j;
      amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      const double e = std::fabs(static_cast<double>(x[i]) - y[i]);
      worst_abs = std::max(worst_abs, e);
      se += e * e;
    }
    const double rms = std::sqrt(se / bs);
    const double slack = tiny_abs;
    EXPECT_LE(worst_abs, b.max_abs * amax + slack)
        << DTypeName(t) << " " << what << " block " << blk << " amax " << amax;
    EXPECT_LE(rms, b.rms * amax + slack) << DTypeName(t) << " " << what << " block " << blk;
    if (amax > 0) worst = std::max(worst, rms / amax);
  }
  return worst;
}

// A few distributions that stress different parts of a quantizer.
std::map<std::string, std::vector<float>> TestRows() {
  std::map<std::string, std::vector<float>> rows;
  std::mt19937 rng(20240601);
  std::normal_distribution<float> normal(0, 1);
  std::uniform_real_distribution<float> uni(-1, 1);
  std::vector<float> x(kRowValues);
  for (auto& v : x) v = normal(rng);
  rows["normal"] = x;
  for (auto& v : x) v = uni(rng);
  rows["uniform"] = x;
  for (auto& v : x) v = 2.0f + uni(rng);  // all positive: the min types cannot use a positive min
  rows["positive"] = x;
  for (auto& v : x) v = -3.0f + 0.5f * uni(rng);
  rows["negative"] = x;
  // Heavy tails: a few values 20x the rest, and a scale that varies from block to block, from
  // 2^-2 (smaller blocks have f16-subnormal scales, see AdversarialBlocksGiveFiniteOutput) to 2^5
  // (the largest values stay well inside f16's range).
  for (size_t i = 0; i < x.size(); ++i) {
    const float scale = std::ldexp(1.0f, static_cast<int>(i / 256) - 2);
    x[i] = normal(rng) * scale * (i % 97 == 5 ? 20.0f : 1.0f);
  }
  rows["heavy_tailed_scaled"] = x;
  return rows;
}

TEST(QuantTypesTest, TableIsConsistent) {
  std::set<std::string> names;
  uint32_t last_id = 0;
  bool first = true;
  const std::string list = DTypeNameList();
  for (const DTypeTraits& row : AllDTypeTraits()) {
    SCOPED_TRACE(row.name);
    EXPECT_TRUE(names.insert(row.name).second) << "duplicate name";
    EXPECT_EQ(&Traits(row.type), &row);
    if (!first) {
      EXPECT_GT(GgmlId(row.type), last_id) << "rows must be in ggml id order";
    }
    first = false;
    last_id = GgmlId(row.type);
    EXPECT_EQ(DTypeFromGgmlId(GgmlId(row.type)), row.type);
    EXPECT_EQ(GgmlTypeName(GgmlId(row.type)), row.name);
    EXPECT_EQ(DTypeFromName(Lower(row.name)), row.type);
    EXPECT_EQ(DTypeFromName(row.name), row.type);
    EXPECT_STREQ(DTypeName(row.type), row.name);
    EXPECT_NE(list.find(Lower(row.name)), std::string::npos);
    EXPECT_NE(row.dequantize_row, nullptr);
    EXPECT_NE(row.quantize_row, nullptr);
    EXPECT_EQ(IsBlockQuantized(row.type), row.block_size > 1);
    EXPECT_EQ(RowBytes(row.type, row.block_size * 3), 3 * row.block_bytes);
  }
  EXPECT_EQ(names.size(), 15u);

  // Block geometry is ggml's; the byte counts are those of the block structs.
  const std::map<DType, std::pair<int, size_t>> geometry = {
      {DType::kF32, {1, 4}},
      {DType::kF16, {1, 2}},
      {DType::kBF16, {1, 2}},
      {DType::kQ4_0, {kQK, sizeof(BlockQ4_0)}},
      {DType::kQ4_1, {kQK, sizeof(BlockQ4_1)}},
      {DType::kQ5_0, {kQK, sizeof(BlockQ5_0)}},
      {DType::kQ5_1, {kQK, sizeof(BlockQ5_1)}},
      {DType::kQ8_0, {kQK, sizeof(BlockQ8_0)}},
      {DType::kQ2_K, {kQK_K, sizeof(BlockQ2_K)}},
      {DType::kQ3_K, {kQK_K, sizeof(BlockQ3_K)}},
      {DType::kQ4_K, {kQK_K, sizeof(BlockQ4_K)}},
      {DType::kQ5_K, {kQK_K, sizeof(BlockQ5_K)}},
      {DType::kQ6_K, {kQK_K, sizeof(BlockQ6_K)}},
      {DType::kIQ4_NL, {kQK, sizeof(BlockIQ4_NL)}},
      {DType::kIQ4_XS, {kQK_K, sizeof(BlockIQ4_XS)}},
  };
  for (const auto& [t, g] : geometry) {
    EXPECT_EQ(BlockSize(t), g.first) << DTypeName(t);
    EXPECT_EQ(BlockBytes(t), g.second) << DTypeName(t);
  }
  // ggml's type sizes, independently of the structs.
  EXPECT_EQ(BlockBytes(DType::kQ2_K), 84u);
  EXPECT_EQ(BlockBytes(DType::kQ3_K), 110u);
  EXPECT_EQ(BlockBytes(DType::kQ4_K), 144u);
  EXPECT_EQ(BlockBytes(DType::kQ5_K), 176u);
  EXPECT_EQ(BlockBytes(DType::kQ6_K), 210u);
  EXPECT_EQ(BlockBytes(DType::kIQ4_NL), 18u);
  EXPECT_EQ(BlockBytes(DType::kIQ4_XS), 136u);

  // Ids weir does not compute with: Q8_1, Q8_K, IQ types, I8.., and out of range.
  for (uint32_t id : {4u, 5u, 9u, 15u, 16u, 21u, 22u, 24u, 28u, 29u, 31u, 39u, 1000u, 0xffffffffu}) {
    EXPECT_FALSE(DTypeFromGgmlId(id).has_value()) << id;
  }
  EXPECT_FALSE(DTypeFromName("q8_1").has_value());
  EXPECT_FALSE(DTypeFromName("").has_value());
}

TEST(QuantTypesTest, RoundTripErrorBoundedByBlockAmax) {
  for (const auto& [name, x] : TestRows()) {
    for (const DTypeTraits& row : AllDTypeTraits()) {
      const std::vector<float> y = RoundTrip(row.type, x);
      const double worst = ExpectWithinBound(row.type, x, y, name);
      if (row.block_size > 1) {
        std::printf("  %-20s %-5s worst block rms/amax %.5f (bound %.5f)\n", name.c_str(), row.name,
                    worst, BoundFor(row.type).rms);
      }
    }
  }
}

// The rms error of the plain scheme each K quantizer's search improves on: per sub-block, the
// value of largest magnitude (signed types) or the range from min(x, 0) to max(x) (types with a
// min) mapped onto the extreme codes, rounded to nearest, with the sub-block scale and min kept
// exact (no 6-bit codes, no f16), which only favours it.
double PlainRms(DType t, const std::vector<float>& x) {
  int sub = 16, qmin = 0, qmax = 3;
  bool with_min = true;
  switch (t) {
    case DType::kQ2_K:
      break;
    case DType::kQ3_K:
      qmin = -4, qmax = 3, with_min = false;
      break;
    case DType::kQ4_K:
      sub = 32, qmax = 15;
      break;
    case DType::kQ5_K:
      sub = 32, qmax = 31;
      break;
    case DType::kQ6_K:
      qmin = -32, qmax = 31, with_min = false;
      break;
    default:
      return 0;
  }
  double se = 0;
  for (size_t b = 0; b < x.size(); b += sub) {
    const float* v = x.data() + b;
    double s, lo = 0;
    if (with_min) {
      lo = std::min(0.0f, *std::min_element(v, v + sub));
      s = (*std::max_element(v, v + sub) - lo) / qmax;
    } else {
      float big = 0;
      for (int i = 0; i < sub; ++i) big = std::fabs(v[i]) > std::fabs(big) ? v[i] : big;
      s = big / qmin;
    }
    for (int i = 0; i < sub; ++i) {
      const double q = s != 0 ? std::clamp(std::round((v[i] - lo) / s), 1.0 * qmin, 1.0 * qmax) : 0;
      se += (v[i] - lo - s * q) * (v[i] - lo - s * q);
    }
  }
  return std::sqrt(se / x.size());
}

// Each K quantizer searches for better scales than the plain scheme above; on Gaussian and
// Laplacian rows it must beat it by at least 4% (measured: 6-20%) despite storing its scales in
// 4-8 bits.
TEST(QuantTypesTest, KQuantsBeatPlainRounding) {
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0, 0.02f);
  std::exponential_distribution<float> expo(50);
  std::vector<float> gauss(kRowValues * 4), laplace(kRowValues * 4);
  for (auto& v : gauss) v = normal(rng);
  for (size_t i = 0; i < laplace.size(); ++i) laplace[i] = (i % 2 ? 1 : -1) * expo(rng);
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (const auto* x : {&gauss, &laplace}) {
      const std::vector<float> y = RoundTrip(t, *x);
      double se = 0;
      for (size_t i = 0; i < x->size(); ++i) se += ((*x)[i] - y[i]) * ((*x)[i] - y[i]);
      const double rms = std::sqrt(se / x->size()), plain = PlainRms(t, *x);
      std::printf("  %-5s %-8s rms %.6f plain %.6f (%.3f)\n", DTypeName(t),
                  x == &gauss ? "gauss" : "laplace", rms, plain, rms / plain);
      EXPECT_LT(rms, 0.96 * plain) << DTypeName(t);
    }
  }
}

// Blocks that break naive scale arithmetic: every output must be finite, zeros must stay zero,
// and the in-range cases must still meet the round-trip bound.
TEST(QuantTypesTest, AdversarialBlocksGiveFiniteOutput) {
  std::map<std::string, std::vector<float>> cases;
  std::vector<float> x(kRowValues);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 1);

  cases["all_zero"] = std::vector<float>(kRowValues, 0.0f);
  cases["negative_zero"] = std::vector<float>(kRowValues, -0.0f);
  cases["all_equal_pos"] = std::vector<float>(kRowValues, 0.37f);
  cases["all_equal_neg"] = std::vector<float>(kRowValues, -1.25f);
  for (auto& v : x) v = normal(rng);
  for (size_t i = 0; i < x.size(); i += 256) x[i + 17] = 1000.0f;  // one huge outlier per 256
  cases["one_outlier"] = x;
  for (auto& v : x) v = normal(rng);
  for (size_t i = 0; i < x.size(); i += 32) x[i + 3] = -60000.0f;  // outlier near the f16 limit
  cases["f16_outlier"] = x;
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0 ? 65504.0f : -65504.0f);
  cases["pm_65504"] = x;
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 5) * 16384.0f - 32768.0f;
  cases["large_spread"] = x;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::ldexp(normal(rng), -140);  // f32 denormals
  }
  cases["f32_denormals"] = x;
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? 1 : -1) * FLT_TRUE_MIN * (i % 7);
  cases["smallest_denormals"] = x;
  for (auto& v : x) v = normal(rng) * 1e-6f;  // below f16's normal range once divided by levels
  cases["tiny"] = x;
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 16) % 2 ? normal(rng) : 0.0f;
  cases["zero_sub_blocks"] = x;

  for (const auto& [name, in] : cases) {
    for (const DTypeTraits& row : AllDTypeTraits()) {
      SCOPED_TRACE(name + " " + row.name);
      const std::vector<float> y = RoundTrip(row.type, in);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << "value " << i << " in " << in[i];
      }
      bool all_zero = std::all_of(in.begin(), in.end(), [](float v) { return v == 0; });
      if (all_zero) {
        for (float v : y) ASSERT_EQ(v, 0.0f);
      }
      // Blocks too small for an f16 scale lose their relative precision (in ggml too); there
      // the check is only that the output is no further from x than zero is.
      const bool tiny = name == "f32_denormals" || name == "smallest_denormals" || name == "tiny";
      double amax = 0;
      for (float v : in) amax = std::max(amax, std::fabs(static_cast<double>(v)));
      ExpectWithinBound(row.type, in, y, name, tiny ? amax : 0.0);
    }
  }
}

// Values far beyond the f16 range are a loss for every f16-scaled format, but the K quantizers
// clamp their scales and must still give finite numbers (the 32-value types use ggml's reference
// scheme, which does not clamp: amax/127 above 65504 becomes an f16 inf there, as in ggml).
TEST(QuantTypesTest, KQuantsStayFiniteBeyondF16Range) {
  std::vector<float> x(kRowValues);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 1);
  for (float scale : {1e6f, 1e20f, 1e38f}) {
    for (auto& v : x) v = std::clamp(normal(rng) * scale, -FLT_MAX, FLT_MAX);
    x[5] = FLT_MAX;
    x[300] = -FLT_MAX;
    for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      const std::vector<float> y = RoundTrip(t, x);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << DTypeName(t) << " scale " << scale << " value " << i;
      }
    }
  }
}

// Re-quantizing a dequantized row. Where the scale is a function of the block's extreme (ggml's
// reference schemes of the 32-value types) the dequantized extreme reproduces the same f16 scale
// and the codes come back: Q8_0 (127 * d is exact in f32), Q4_0 and Q5_0 (-8 d, -16 d exact) are
// bitwise idempotent by construction; Q4_1 and Q5_1 are too as long as max - min is not tiny next
// to |min| (the f32 sum 15 d + m must keep d to f16 precision), which holds on these rows. The
// searched K quantizers are not idempotent: they may find another encoding, and for a block far
// from zero (the "negative" row) the 6-bit min code can saturate, so the check is that the second
// pass moves the values by at most 0.6 of the first pass's rms error (worst measured: 0.43, Q5_K
// on "negative"; most are below 0.1).
TEST(QuantTypesTest, RequantizingDequantizedRowIsStable) {
  for (const auto& [name, x] : TestRows()) {
    for (const DTypeTraits& row : AllDTypeTraits()) {
      SCOPED_TRACE(name + " " + row.name);
      const std::vector<uint8_t> q1 = Quantize(row.type, x);
      std::vector<float> y1(x.size());
      DequantizeRow(row.type, q1.data(), y1.data(), static_cast<int64_t>(x.size()));
      const std::vector<uint8_t> q2 = Quantize(row.type, y1);
      std::vector<float> y2(x.size());
      DequantizeRow(row.type, q2.data(), y2.data(), static_cast<int64_t>(x.size()));
      double e1 = 0, e2 = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        e1 += (static_cast<double>(x[i]) - y1[i]) * (static_cast<double>(x[i]) - y1[i]);
        e2 += (static_cast<double>(y1[i]) - y2[i]) * (static_cast<double>(y1[i]) - y2[i]);
      }
      const bool bytes_equal = q1 == q2;
      const bool values_equal = std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0;
      std::printf("  %-20s %-5s bytes %s values %s  rms(y1-y2)/rms(x-y1) %.4f\n", name.c_str(),
                  row.name, bytes_equal ? "same" : "DIFF", values_equal ? "same" : "DIFF",
                  e1 > 0 ? std::sqrt(e2 / e1) : 0.0);
      switch (row.type) {
        case DType::kF32:
        case DType::kF16:
        case DType::kBF16:
        case DType::kQ8_0:
        case DType::kQ4_0:
        case DType::kQ5_0:
        case DType::kQ4_1:
        case DType::kQ5_1:
          EXPECT_TRUE(bytes_equal);
          break;
        default:
          EXPECT_LE(e2, 0.36 * e1);
          break;
      }
    }
  }
}

// ---- Oracle I/O (protocol at the top of this file) ----

bool WriteBytes(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  return static_cast<bool>(f);
}

// Inputs that exercise the quantizers: per 256 values one of several shapes, at scales from
// 2^-10 to 2^6.
std::vector<float> OracleInput() {
  std::mt19937 rng(1234567);
  std::normal_distribution<float> normal(0, 1);
  std::uniform_real_distribution<float> uni(-1, 1);
  std::vector<float> x(kOracleValues);
  for (int64_t blk = 0; blk < kOracleValues / kQK_K; ++blk) {
    const float scale = std::ldexp(1.0f, static_cast<int>(blk % 17) - 10);
    float* v = x.data() + blk * kQK_K;
    switch (blk % 8) {
      case 0:
        for (int i = 0; i < kQK_K; ++i) v[i] = normal(rng) * scale;
        break;
      case 1:
        for (int i = 0; i < kQK_K; ++i) v[i] = uni(rng) * scale;
        break;
      case 2:
        for (int i = 0; i < kQK_K; ++i) v[i] = (1.5f + uni(rng)) * scale;
        break;
      case 3:
        for (int i = 0; i < kQK_K; ++i) v[i] = (-1.5f + uni(rng)) * scale;
        break;
      case 4:
        for (int i = 0; i < kQK_K; ++i) v[i] = normal(rng) * scale * (i % 37 == 0 ? 12.0f : 1.0f);
        break;
      case 5:
        for (int i = 0; i < kQK_K; ++i) v[i] = std::round(normal(rng) * 4) * scale;
        break;
      case 6:
        for (int i = 0; i < kQK_K; ++i) v[i] = (i / 32) % 2 ? normal(rng) * scale : 0;
        break;
      default:
        for (int i = 0; i < kQK_K; ++i) v[i] = normal(rng) * normal(rng) * scale;
        break;
    }
  }
  return x;
}

TEST(QuantOracleIo, DumpRandomRows) {
  const char* dir = std::getenv("WEIR_QUANT_DUMP");
  if (dir == nullptr || *dir == 0) GTEST_SKIP() << "WEIR_QUANT_DUMP not set";
  const std::vector<float> x = OracleInput();
  for (const DTypeTraits& row : AllDTypeTraits()) {
    const std::string base = std::string(dir) + "/" + row.name;
    const std::vector<uint8_t> q = Quantize(row.type, x);
    std::vector<float> y(x.size());
    DequantizeRow(row.type, q.data(), y.data(), kOracleValues);
    ASSERT_TRUE(WriteBytes(base + ".in.f32", x.data(), x.size() * 4)) << base;
    ASSERT_TRUE(WriteBytes(base + ".q.bin", q.data(), q.size())) << base;
    ASSERT_TRUE(WriteBytes(base + ".deq.f32", y.data(), y.size() * 4)) << base;
  }
}

TEST(QuantOracleIo, DequantizeGivenBlocks) {
  const char* dir = std::getenv("WEIR_QUANT_IN");
  if (dir == nullptr || *dir == 0) GTEST_SKIP() << "WEIR_QUANT_IN not set";
  int n_files = 0;
  for (const DTypeTraits& row : AllDTypeTraits()) {
    const std::string base = std::string(dir) + "/" + row.name;
    std::ifstream f(base + ".bin", std::ios::binary);
    if (!f) continue;
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_EQ(bytes.size() % row.block_bytes, 0u)
        << base << ".bin: " << bytes.size() << " bytes is not a whole number of " << row.block_bytes
        << "-byte blocks";
    const int64_t n = static_cast<int64_t>(bytes.size() / row.block_bytes) * row.block_size;
    std::vector<float> y(static_cast<size_t>(n));
    DequantizeRow(row.type, bytes.data(), y.data(), n);
    ASSERT_TRUE(WriteBytes(base + ".out.f32", y.data(), y.size() * 4)) << base;
    ++n_files;
  }
  std::printf("  dequantized %d files from %s\n", n_files, dir);
}

}  // namespace
}  // namespace weir
