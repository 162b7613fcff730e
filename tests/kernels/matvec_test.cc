#include "kernels/matvec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/gather.h"
#include "kernels/isa.h"
#include "kernels/tiled.h"
#include "base/aligned_buffer.h"
#include "kernels/kernel_test_util.h"

namespace weir::kernels {
namespace {

using testing::AbsDot;
using testing::AllDTypes;
using testing::Describe;
using testing::EffectiveX;
using testing::IsQuantized;
using testing::kRel;
using testing::RandomFloats;
using testing::RandomWeights;
using testing::RawQuantWeights;
using testing::Weights;

const int64_t kRows[] = {1, 3, 17, 67};
const int64_t kColsQuant[] = {32, 96, 160, 4128};
const int64_t kColsFloat[] = {1, 7, 32, 67, 96, 160, 4128};

std::vector<int64_t> ColsFor(DType t) {
  if (BlockSize(t) == kQK_K) return {256, 768, 4352};
  if (IsBlockQuantized(t)) return {std::begin(kColsQuant), std::end(kColsQuant)};
  return {std::begin(kColsFloat), std::end(kColsFloat)};
}

// Checks y (n tokens) against ref::MatMul within kRel * sum |w||x_eff| per output.
void ExpectNearRef(const Weights& w, const std::vector<float>& x, int64_t n,
                   const std::vector<float>& y, const std::string& what) {
  std::vector<float> want(static_cast<size_t>(n * w.rows));
  ref::MatMul(w.view(), x.data(), n, want.data());
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> xe = EffectiveX(w.dtype, x.data() + t * w.cols, w.cols);
    for (int64_t r = 0; r < w.rows; ++r) {
      const double bound = kRel * AbsDot(&w.values[r * w.cols], xe.data(), w.cols) + 1e-30;
      ASSERT_NEAR(y[t * w.rows + r], want[t * w.rows + r], bound)
          << what << " token " << t << " row " << r;
    }
  }
}

TEST(MatVecTest, EveryPathMatchesReferenceOnAwkwardShapes) {
  std::mt19937 rng(1);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : AllDTypes()) {
      for (int64_t rows : kRows) {
        for (int64_t cols : ColsFor(t)) {
          Weights w = RandomWeights(rng, t, rows, cols);
          std::vector<float> x = RandomFloats(rng, cols, -2, 2);
          if (cols >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // a zero block
          std::vector<float> y(static_cast<size_t>(rows), NAN);
          MatVec(w.view(), x.data(), y.data(), nullptr);
          ExpectNearRef(w, x, 1, y, Describe(isa, t, rows, cols));
        }
      }
    }
  }
}

TEST(MatVecTest, RawQuantizedBlocksIncludingMinus128) {
  std::mt19937 rng(2);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : AllDTypes()) {
      if (!IsBlockQuantized(t)) continue;
      for (int64_t cols : ColsFor(t)) {
        Weights w = RawQuantWeights(rng, t, 5, cols);
        std::vector<float> x = RandomFloats(rng, cols, -3, 3);
        std::vector<float> y(5);
        MatVec(w.view(), x.data(), y.data(), nullptr);
        ExpectNearRef(w, x, 1, y, Describe(isa, t, 5, cols));
      }
    }
  }
}

// Blocks that break naive scale arithmetic, for every block-quantized type on every path: f16
// scales and mins at the f16 extremes (+-65504, the smallest normal, subnormals, zero, mixed),
// blocks whose quant bytes are all equal, and what the quantizer makes of all-equal, zero,
// outlier, +-65504 and f32-denormal rows. Against the reference, and MatMul / gathered rows
// bitwise equal to MatVec.
TEST(MatVecTest, AdversarialBlocksEveryPath) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> subnormal(1, 0x3ff);
  std::normal_distribution<float> normal(0, 1);
  struct Case {
    std::string name;
    std::function<uint16_t()> half;       // raw blocks: the f16 fields
    int fill;                             // raw blocks: every other byte, or -1: random bytes
    std::function<float(int64_t)> value;  // or: quantize these values
  };
  auto raw = [](std::string name, std::function<uint16_t()> half, int fill = -1) {
    return Case{std::move(name), std::move(half), fill, {}};
  };
  auto quantized = [](std::string name, std::function<float(int64_t)> value) {
    return Case{std::move(name), {}, -1, std::move(value)};
  };
  auto random_byte = [&] { return static_cast<uint8_t>(byte(rng)); };
  const uint16_t kMaxHalf = 0x7bff, kMinNormal = 0x0400;
  const std::vector<Case> cases = {
      raw("max_scales", [&] { return static_cast<uint16_t>(kMaxHalf | (byte(rng) & 0x80) << 8); }),
      raw("min_normal_scales", [&] { return kMinNormal; }),
      raw("subnormal_scales",
          [&] { return static_cast<uint16_t>(subnormal(rng) | (byte(rng) & 0x80) << 8); }),
      raw("mixed_scales",
          [&] {
            const uint16_t pick[] = {kMaxHalf, 0xfbff, 0x3c00, kMinNormal, 0x0001, 0x0000, 0x8000};
            return pick[byte(rng) % 7];
          }),
      raw("all_bytes_00", [&] { return F32ToF16(0.03f); }, 0x00),
      raw("all_bytes_ff", [&] { return F32ToF16(-0.02f); }, 0xff),
      raw("all_bytes_88", [&] { return F32ToF16(0.5f); }, 0x88),
      quantized("equal_pos", [](int64_t) { return 0.37f; }),
      quantized("equal_neg", [](int64_t) { return -1.25f; }),
      quantized("zero", [](int64_t) { return 0.0f; }),
      quantized("outliers", [&](int64_t i) { return i % 256 == 17 ? 1000.0f : normal(rng); }),
      quantized("pm_65504", [](int64_t i) { return i % 3 == 0 ? 65504.0f : -65504.0f; }),
      quantized("f32_denormals", [&](int64_t) { return std::ldexp(normal(rng), -140); }),
  };
  ThreadPool pool(2);
  for (DType t : AllDTypes()) {
    if (!IsBlockQuantized(t)) continue;
    for (const Case& c : cases) {
      const int64_t rows = 7, cols = testing::ValidCols(t, 512);
      Weights w;
      if (c.value) {
        std::vector<float> src(static_cast<size_t>(rows * cols));
        for (int64_t i = 0; i < rows * cols; ++i) src[static_cast<size_t>(i)] = c.value(i);
        w = Weights{t, rows, cols, {}, {}};
        w.bytes.resize(RowBytes(t, cols) * rows);
        w.values.resize(src.size());
        for (int64_t r = 0; r < rows; ++r) {
          uint8_t* row = w.bytes.data() + RowBytes(t, cols) * r;
          QuantizeRow(t, src.data() + r * cols, row, cols);
          DequantizeRow(t, row, w.values.data() + r * cols, cols);
        }
      } else if (c.fill >= 0) {
        w = testing::BlockWeights(t, rows, cols, c.half,
                                  [&] { return static_cast<uint8_t>(c.fill); });
      } else {
        w = testing::BlockWeights(t, rows, cols, c.half, random_byte);
      }
      bool finite = true;
      for (float v : w.values) finite = finite && std::isfinite(v);
      ASSERT_TRUE(finite) << DTypeName(t) << " " << c.name << ": the bound needs finite weights";
      const int64_t n = 5;
      std::vector<float> x = RandomFloats(rng, n * cols, -2, 2);
      for (Isa isa : SupportedIsas()) {
        ScopedIsaOverride use(isa);
        const std::string what = Describe(isa, t, rows, cols) + " " + c.name;
        std::vector<float> y(static_cast<size_t>(n * rows), NAN);
        MatMul(w.view(), x.data(), n, y.data(), &pool);
        ExpectNearRef(w, x, n, y, what);
        std::vector<int32_t> all(static_cast<size_t>(rows));
        for (int32_t i = 0; i < rows; ++i) all[static_cast<size_t>(i)] = rows - 1 - i;
        for (int64_t tok = 0; tok < n; ++tok) {
          std::vector<float> yv(static_cast<size_t>(rows)), yg(static_cast<size_t>(rows));
          MatVec(w.view(), x.data() + tok * cols, yv.data(), nullptr);
          GatherMatVecRows(w.view(), all.data(), rows, x.data() + tok * cols, yg.data(), nullptr);
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(yv[r], y[tok * rows + r]) << what << " tok " << tok << " row " << r;
            ASSERT_EQ(yv[r], yg[r]) << what << " (gathered) tok " << tok << " row " << r;
          }
        }
      }
    }
  }
}

// The reference itself: with quantized weights it equals the exact product of the dequantized
// weights with x up to the activation rounding, |x_i - d_b q_i| <= d_b / 2 per element.
TEST(MatVecTest, ReferenceIsTheDequantizedProductUpToActivationRounding) {
  std::mt19937 rng(3);
  for (DType t : AllDTypes()) {
    for (int64_t cols : ColsFor(t)) {
      Weights w = RandomWeights(rng, t, 3, cols);
      std::vector<float> x = RandomFloats(rng, cols, -2, 2);
      std::vector<float> y(3);
      ref::MatVec(w.view(), x.data(), y.data());
      for (int64_t r = 0; r < 3; ++r) {
        const float* row = &w.values[r * cols];
        double exact = 0, rounding = 0;
        for (int64_t j = 0; j < cols; ++j) {
          exact += static_cast<double>(row[j]) * x[j];
          if (testing::Int8Dot(t)) {
            float amax = 0;
            for (int k = 0; k < kQK; ++k) amax = std::fmax(amax, std::fabs(x[j / kQK * kQK + k]));
            rounding += std::fabs(row[j]) * amax / 127.0 / 2 * 1.001;
          }
        }
        EXPECT_NEAR(y[r], exact, rounding + kRel * AbsDot(row, x.data(), cols))
            << DTypeName(t) << " cols " << cols << " row " << r;
      }
    }
  }
}

TEST(MatVecTest, ThreadedEqualsSingleThreadedExactly) {
  std::mt19937 rng(4);
  ThreadPool pool2(2), pool3(3);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : AllDTypes()) {
      const int64_t cols = testing::ValidCols(t, 160);
      Weights w = RandomWeights(rng, t, 67, cols);
      std::vector<float> x = RandomFloats(rng, cols);
      std::vector<float> y1(67), y2(67), y3(67);
      MatVec(w.view(), x.data(), y1.data(), nullptr);
      MatVec(w.view(), x.data(), y2.data(), &pool2);
      MatVec(w.view(), x.data(), y3.data(), &pool3);
      EXPECT_EQ(y1, y2) << Describe(isa, t, 67, 160);
      EXPECT_EQ(y1, y3) << Describe(isa, t, 67, 160);
    }
  }
}

// MatMul shares each weight row between tokens; every token must still get exactly what MatVec
// gives it alone (same operations in the same order), and agree with the reference.
TEST(MatMulTest, EqualsPerTokenMatVecAndReference) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : AllDTypes()) {
      for (int64_t n : {1, 2, 3, 4, 5, 17, 35}) {
        const int64_t rows = 17, cols = IsBlockQuantized(t) ? testing::ValidCols(t, 96) : 67;
        Weights w = RandomWeights(rng, t, rows, cols);
        std::vector<float> x = RandomFloats(rng, n * cols);
        std::vector<float> y(static_cast<size_t>(n * rows), NAN);
        MatMul(w.view(), x.data(), n, y.data(), n % 2 ? &pool : nullptr);
        ExpectNearRef(w, x, n, y, Describe(isa, t, rows, cols) + " n=" + std::to_string(n));
        for (int64_t tok = 0; tok < n; ++tok) {
          std::vector<float> yv(static_cast<size_t>(rows));
          MatVec(w.view(), x.data() + tok * cols, yv.data(), nullptr);
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(yv[r], y[tok * rows + r]) << Describe(isa, t, rows, cols) << " tok " << tok;
          }
        }
      }
    }
  }
}

// Long rows with many tokens: the 16-row kernels keep a row group's unpacked blocks for the
// later token passes when the row fits their buffer (up to 5632 values, a 1.1B model's down
// projection), and unpack it again for every pass when it does not (9216); a call's tokens come
// in chunks of up to 64 with partial passes of 8. Every token equals MatVec and the reference.
TEST(MatMulTest, LongRowsManyTokensEqualMatVecAndReference) {
  std::mt19937 rng(55);
  ThreadPool pool(2);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : AllDTypes()) {
      if (!IsBlockQuantized(t)) continue;
      for (int64_t want_cols : {5632, 9216}) {
        const int64_t rows = 19, n = 75, cols = testing::ValidCols(t, want_cols);
        Weights w = RandomWeights(rng, t, rows, cols);
        std::vector<float> x = RandomFloats(rng, n * cols);
        std::vector<float> y(static_cast<size_t>(n * rows), NAN);
        MatMul(w.view(), x.data(), n, y.data(), &pool);
        const std::string what = Describe(isa, t, rows, cols) + " n=" + std::to_string(n);
        ExpectNearRef(w, x, n, y, what);
        std::vector<float> yv(static_cast<size_t>(rows));
        for (int64_t tok = 0; tok < n; ++tok) {
          MatVec(w.view(), x.data() + tok * cols, yv.data(), nullptr);
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(yv[r], y[tok * rows + r]) << what << " tok " << tok << " row " << r;
          }
        }
      }
    }
  }
}

TEST(MatMulTest, ZeroTokensWritesNothing) {
  std::mt19937 rng(6);
  Weights w = RandomWeights(rng, DType::kQ8_0, 3, 32);
  std::vector<float> y(3, 7.0f);
  MatMul(w.view(), nullptr, 0, y.data(), nullptr);
  EXPECT_EQ(y, std::vector<float>(3, 7.0f));
}


// Strided f32 rows (one head's keys in a KV cache): every path against the reference within the
// usual bound, for awkward widths and strides.
TEST(DotRowsF32Test, EveryPathMatchesTheReference) {
  std::mt19937 rng(21);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (auto [rows, cols, stride] : {std::tuple<int64_t, int64_t, size_t>{1, 64, 64},
                                      {7, 64, 256}, {33, 17, 40}, {130, 128, 1024}, {5, 3, 3}}) {
      const std::vector<float> w = testing::RandomFloats(rng, rows * static_cast<int64_t>(stride));
      const std::vector<float> x = testing::RandomFloats(rng, cols);
      std::vector<float> got(static_cast<size_t>(rows), -7.0f), want(got.size());
      DotRowsF32(w.data(), stride, rows, cols, x.data(), got.data());
      ref::DotRowsF32(w.data(), stride, rows, cols, x.data(), want.data());
      for (int64_t r = 0; r < rows; ++r) {
        const double bound = testing::kRel * testing::AbsDot(w.data() + r * stride, x.data(), cols) + 1e-30;
        ASSERT_NEAR(got[r], want[r], bound) << IsaName(isa) << " rows " << rows << " cols " << cols << " row " << r;
      }
    }
  }
}


// Products sharing one input give, per weight, exactly what MatMul gives for it alone: runs of
// one kind, kinds mixed (types, a tiled weight), a weight with no rows, more weights than one
// section holds.
TEST(MatMulSharedTest, EachProductEqualsItsOwnMatMulBitwise) {
  std::mt19937 rng(31);
  ThreadPool pool(3);
  const int64_t cols = 96;
  std::vector<testing::Weights> w;
  for (int i = 0; i < 10; ++i) {
    const DType t = i == 4 ? DType::kF16 : (i % 3 == 0 ? DType::kQ8_0 : DType::kQ4_0);
    w.push_back(testing::RandomWeights(rng, t, 16 * (1 + i % 3) + (i == 7 ? 5 : 0), cols));
  }
  std::vector<AlignedBuffer> tiled_bytes;
  std::vector<TensorView> views;
  for (size_t i = 0; i < w.size(); ++i) {
    TensorView v = w[i].view();
    if (i == 2 || i == 3) {  // two tiled weights next to each other, then row-major ones
      tiled_bytes.emplace_back(v.nbytes());
      v = TileRows(v, tiled_bytes.back().data());
    }
    views.push_back(v);
  }
  views.push_back(TensorView{DType::kQ4_0, Shape{0, cols}, w[0].bytes.data()});  // no rows
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (int64_t n : {1, 5}) {
      const std::vector<float> x = testing::RandomFloats(rng, n * cols);
      std::vector<std::vector<float>> got(views.size()), want(views.size());
      std::vector<const TensorView*> ws;
      std::vector<float*> ys;
      for (size_t i = 0; i < views.size(); ++i) {
        got[i].assign(static_cast<size_t>(n * views[i].rows()) + 1, -3.0f);
        want[i] = got[i];
        ws.push_back(&views[i]);
        ys.push_back(got[i].data());
        MatMul(views[i], x.data(), n, want[i].data(), &pool);
      }
      MatMulShared(ws, x.data(), n, ys.data(), &pool);
      for (size_t i = 0; i < views.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << IsaName(isa) << " weight " << i << " n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace weir::kernels
