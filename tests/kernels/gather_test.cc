#include "kernels/gather.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/internal/avx512_vbmi.h"
#include "kernels/isa.h"
#include "kernels/kernel_test_util.h"
#include "kernels/matvec.h"

namespace weir::kernels {
namespace {

using testing::AbsDot;
using testing::AllDTypes;
using testing::IsQuantized;
using testing::kRel;
using testing::RandomFloats;
using testing::RandomWeights;
using testing::RawQuantWeights;
using testing::Weights;

// A random subset of [0, n) with about density * n members (at least one when density > 0),
// ascending unless shuffled.
std::vector<int32_t> RandomIndices(std::mt19937& rng, int64_t n, double density, bool shuffle) {
  std::vector<int32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  int64_t k = static_cast<int64_t>(std::llround(density * static_cast<double>(n)));
  if (density > 0 && k == 0) k = 1;
  all.resize(static_cast<size_t>(k));
  if (!shuffle) std::sort(all.begin(), all.end());
  return all;
}

// f16 scale of block b of row i of a quantized weight.
float BlockScale(const Weights& w, int64_t i, int64_t b) {
  uint16_t h;
  std::memcpy(&h, w.bytes.data() + RowBytes(w.dtype, w.cols) * i + BlockBytes(w.dtype) * b, 2);
  return F16ToF32(h);
}

// wt is [cols_in, rows_out]; y[r] = sum_k x[idx[k]] * wt[idx[k], r], with the coefficient
// rounding of Q8_0 / Q4_0 (gather.h): y must match the reference within kRel of the sum of the
// terms' magnitudes, and the exact product within that plus the rounding bound
// sum_groups C / 2 * sum_k |q_k| (C = the group's largest |x * d| / 127).
void ExpectColsNearRef(const Weights& wt, const std::vector<int32_t>& idx,
                       const std::vector<float>& x, const std::vector<float>& y,
                       const std::string& what) {
  const int64_t n_out = wt.cols;
  std::vector<float> want(static_cast<size_t>(n_out));
  ref::GatherMatVecCols(wt.view(), idx.data(), static_cast<int64_t>(idx.size()), x.data(),
                        want.data());
  const bool quant = IsQuantized(wt.dtype);
  for (int64_t r = 0; r < n_out; ++r) {
    double exact = 0, abs_sum = 0, rounding = 0;
    for (size_t g = 0; g < idx.size(); g += 4) {
      const size_t end = std::min(idx.size(), g + 4);
      double cmax = 0, qsum = 0;
      for (size_t k = g; k < end; ++k) {
        const int32_t i = idx[k];
        const double term = static_cast<double>(x[i]) * wt.values[i * n_out + r];
        exact += term;
        abs_sum += std::fabs(term);
        if (quant) {
          const double d = BlockScale(wt, i, r / kQK);
          cmax = std::max(cmax, std::fabs(static_cast<double>(x[i]) * d));
          if (d != 0) qsum += std::fabs(wt.values[i * n_out + r] / d);
        }
      }
      rounding += cmax / 127.0 / 2.0 * qsum * 1.001;
    }
    const double bound = kRel * abs_sum * 1.01 + 1e-30;
    ASSERT_NEAR(y[r], want[r], bound) << what << " output " << r;
    ASSERT_NEAR(y[r], exact, bound + rounding) << what << " output " << r << " (vs exact)";
  }
}

// The paths to run: every supported one, and on CPUs with AVX-512 VBMI the AVX-512 path once more
// without its VBMI kernel (the quantized column form has two AVX-512 implementations).
struct PathVariant {
  Isa isa;
  bool vbmi;
};
std::vector<PathVariant> ColumnPaths() {
  std::vector<PathVariant> v;
  for (Isa isa : SupportedIsas()) v.push_back({isa, true});
  if (IsaSupported(Isa::kAvx512) && internal::Avx512VbmiUsed()) v.push_back({Isa::kAvx512, false});
  return v;
}
std::string Describe(PathVariant p, DType t, int64_t rows, int64_t cols) {
  return testing::Describe(p.isa, t, rows, cols) + (p.vbmi ? "" : " (no VBMI)");
}

class AllowVbmi {
 public:
  explicit AllowVbmi(bool allowed) { internal::SetAvx512VbmiAllowedForTesting(allowed); }
  ~AllowVbmi() { internal::SetAvx512VbmiAllowedForTesting(true); }
};

TEST(GatherColsTest, EveryPathMatchesReference) {
  std::mt19937 rng(11);
  for (PathVariant path : ColumnPaths()) {
    ScopedIsaOverride use(path.isa);
    AllowVbmi vbmi(path.vbmi);
    for (DType t : AllDTypes()) {
      std::vector<int64_t> outs = {32, 96, 160, 4128};
      if (!IsBlockQuantized(t)) outs.insert(outs.end(), {1, 7, 67});
      outs = testing::ValidColsList(t, outs);
      for (int64_t cols_in : {1, 3, 17, 67}) {
        for (int64_t n_out : outs) {
          Weights wt = RandomWeights(rng, t, cols_in, n_out);
          std::vector<float> x = RandomFloats(rng, cols_in, -2, 2);
          for (double density : {0.0, 0.25, 0.5, 1.0}) {
            std::vector<int32_t> idx = RandomIndices(rng, cols_in, density, cols_in % 2 == 1);
            std::vector<float> y(static_cast<size_t>(n_out), NAN);
            GatherMatVecCols(wt.view(), idx.data(), static_cast<int64_t>(idx.size()), x.data(),
                             y.data(), nullptr);
            ExpectColsNearRef(
                wt, idx, x, y,
                Describe(path, t, cols_in, n_out) + " density " + std::to_string(density));
          }
        }
      }
    }
  }
}

TEST(GatherColsTest, RawQuantizedBlocksAndThreads) {
  std::mt19937 rng(12);
  ThreadPool pool2(2), pool3(3);
  for (PathVariant path : ColumnPaths()) {
    ScopedIsaOverride use(path.isa);
    AllowVbmi vbmi(path.vbmi);
    for (DType t : AllDTypes()) {
      const int64_t n_out = testing::ValidCols(t, 160);
      Weights wt = IsBlockQuantized(t) ? RawQuantWeights(rng, t, 67, n_out)
                                       : RandomWeights(rng, t, 67, n_out);
      std::vector<float> x = RandomFloats(rng, 67, -2, 2);
      for (ThreadPool* pool : {&pool2, &pool3}) {
        std::vector<int32_t> idx = RandomIndices(rng, 67, 0.5, false);
        std::vector<float> y(n_out, NAN);
        GatherMatVecCols(wt.view(), idx.data(), static_cast<int64_t>(idx.size()), x.data(),
                         y.data(), pool);
        ExpectColsNearRef(wt, idx, x, y,
                          Describe(path, t, 67, 160) + " threads " + std::to_string(pool->size()));
      }
    }
  }
}

// On VBMI CPUs the quantized column form runs two groups of rows per pass through the kernel,
// reading and writing each output block once for both; that must give the same bits as one group
// per pass, for lists whose length leaves 0, 1, 2 or 3 rows of a last short group and odd groups.
TEST(GatherColsTest, GroupPairsGiveTheSameBitsAsSingleGroups) {
  if (!IsaSupported(Isa::kAvx512) || !internal::Avx512VbmiUsed()) {
    GTEST_SKIP() << "this CPU has no AVX-512 VBMI";
  }
  std::mt19937 rng(15);
  ScopedIsaOverride use(Isa::kAvx512);
  ThreadPool pool(2);
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t n_out : {32, 544, 4128}) {
      Weights wt = RawQuantWeights(rng, t, 67, n_out);
      std::vector<float> x = RandomFloats(rng, 67, -2, 2);
      for (int64_t n_idx : {8, 12, 13, 21, 31, 67}) {
        std::vector<int32_t> idx = RandomIndices(rng, 67, static_cast<double>(n_idx) / 67, true);
        ASSERT_EQ(static_cast<int64_t>(idx.size()), n_idx);
        std::vector<float> pairs(static_cast<size_t>(n_out)), singles(pairs.size());
        GatherMatVecCols(wt.view(), idx.data(), n_idx, x.data(), pairs.data(), &pool);
        internal::SetAvx512VbmiPairsAllowedForTesting(false);
        GatherMatVecCols(wt.view(), idx.data(), n_idx, x.data(), singles.data(), &pool);
        internal::SetAvx512VbmiPairsAllowedForTesting(true);
        for (int64_t r = 0; r < n_out; ++r) {
          ASSERT_EQ(std::memcmp(&pairs[r], &singles[r], sizeof(float)), 0)
              << DTypeName(t) << " n_out " << n_out << " n_idx " << n_idx << " output " << r
              << ": " << pairs[r] << " vs " << singles[r];
        }
      }
    }
  }
}

// The x86 quantized column forms (AVX2; AVX-512 with and without VBMI) round the coefficients
// alike, sum exact integer products and scale each block's sum with one fused multiply-add, so
// they must agree to the bit, whatever instructions form the integer sums.
TEST(GatherColsTest, X86QuantizedColumnPathsGiveTheSameBits) {
  std::vector<PathVariant> paths;
  for (PathVariant p : ColumnPaths()) {
    if (p.isa == Isa::kAvx2 || p.isa == Isa::kAvx512) paths.push_back(p);
  }
  if (paths.size() < 2) GTEST_SKIP() << "fewer than two x86 SIMD paths on this CPU";
  std::mt19937 rng(16);
  // Q4_1: AVX-512 computes the column form itself, AVX2 through dequantize + its F32 kernel;
  // both are one fused multiply-add per row in index order.
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (int64_t n_out : {32, 96, 544, 4128}) {
      Weights wt = RawQuantWeights(rng, t, 67, n_out);
      std::vector<float> x = RandomFloats(rng, 67, -2, 2);
      for (int64_t n_idx : {1, 4, 7, 8, 13, 31, 67}) {
        std::vector<int32_t> idx = RandomIndices(rng, 67, static_cast<double>(n_idx) / 67, true);
        ASSERT_EQ(static_cast<int64_t>(idx.size()), n_idx);
        // One thread: a pool hands index chunks out dynamically, so its partial sums meet in an
        // order that may change from run to run.
        std::vector<float> first;
        for (PathVariant path : paths) {
          ScopedIsaOverride use(path.isa);
          AllowVbmi vbmi(path.vbmi);
          std::vector<float> y(static_cast<size_t>(n_out), 0.5f);
          GatherMatVecCols(wt.view(), idx.data(), n_idx, x.data(), y.data(), nullptr);
          if (first.empty()) {
            first = y;
            continue;
          }
          for (int64_t r = 0; r < n_out; ++r) {
            ASSERT_EQ(std::memcmp(&y[r], &first[r], sizeof(float)), 0)
                << Describe(path, t, 67, n_out) << " n_idx " << n_idx << " output " << r << ": "
                << y[r] << " vs " << first[r] << " (" << Describe(paths[0], t, 67, n_out) << ")";
          }
        }
      }
    }
  }
}

// With every column active, the column form over wt = W^T is the dense product W x.
TEST(GatherColsTest, AllColumnsActiveEqualsDenseProduct) {
  std::mt19937 rng(13);
  ThreadPool pool(2);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const int64_t rows = 96, cols = 67;  // W [rows, cols]
    Weights w = RandomWeights(rng, t, rows, cols);
    // Transpose W's values into wt [cols, rows], exactly representable in the same dtype.
    std::vector<float> tv(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) tv[c * rows + r] = w.values[r * cols + c];
    }
    std::vector<uint8_t> tb(RowBytes(t, rows) * cols);
    for (int64_t c = 0; c < cols; ++c) {
      QuantizeRow(t, tv.data() + c * rows, tb.data() + RowBytes(t, rows) * c, rows);
    }
    TensorView wt{t, Shape{cols, rows}, tb.data()};
    std::vector<float> x = RandomFloats(rng, cols);
    std::vector<int32_t> idx(static_cast<size_t>(cols));
    std::iota(idx.begin(), idx.end(), 0);
    std::vector<float> dense(rows), sparse(rows);
    MatVec(w.view(), x.data(), dense.data(), &pool);
    GatherMatVecCols(wt, idx.data(), cols, x.data(), sparse.data(), &pool);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(sparse[r], dense[r], 2 * kRel * AbsDot(&w.values[r * cols], x.data(), cols))
          << DTypeName(t) << " row " << r;
    }
  }
}

// The row form runs MatVec's own row kernel, so each active output is bitwise what MatVec gives,
// and inactive outputs are left alone.
TEST(GatherRowsTest, ActiveRowsEqualMatVecAndOthersUntouched) {
  std::mt19937 rng(14);
  ThreadPool pool(2);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : AllDTypes()) {
      for (int64_t rows : {1, 3, 17, 67}) {
        for (int64_t cols : testing::ValidColsList(
                 t, IsBlockQuantized(t) ? std::vector<int64_t>{32, 96, 160, 4128}
                                        : std::vector<int64_t>{7, 67, 160, 4128})) {
          Weights w = (IsBlockQuantized(t) && rows == 3) ? RawQuantWeights(rng, t, rows, cols)
                                                         : RandomWeights(rng, t, rows, cols);
          std::vector<float> x = RandomFloats(rng, cols, -2, 2);
          std::vector<float> dense(static_cast<size_t>(rows));
          MatVec(w.view(), x.data(), dense.data(), nullptr);
          for (double density : {0.0, 0.25, 0.5, 1.0}) {
            std::vector<int32_t> idx = RandomIndices(rng, rows, density, rows % 2 == 1);
            std::vector<float> y(static_cast<size_t>(rows), -12345.0f);
            GatherMatVecRows(w.view(), idx.data(), static_cast<int64_t>(idx.size()), x.data(),
                             y.data(), rows > 10 ? &pool : nullptr);
            std::vector<bool> active(static_cast<size_t>(rows), false);
            for (int32_t i : idx) active[i] = true;
            for (int64_t r = 0; r < rows; ++r) {
              if (active[r]) {
                ASSERT_EQ(y[r], dense[r]) << testing::Describe(isa, t, rows, cols) << " row " << r;
              } else {
                ASSERT_EQ(y[r], -12345.0f) << testing::Describe(isa, t, rows, cols) << " row " << r;
              }
            }
            // And against the reference.
            std::vector<float> want(static_cast<size_t>(rows), -12345.0f);
            ref::GatherMatVecRows(w.view(), idx.data(), static_cast<int64_t>(idx.size()), x.data(),
                                  want.data());
            for (int32_t i : idx) {
              std::vector<float> xe = testing::EffectiveX(t, x.data(), cols);
              ASSERT_NEAR(y[i], want[i], kRel * AbsDot(&w.values[i * cols], xe.data(), cols))
                  << testing::Describe(isa, t, rows, cols) << " row " << i;
            }
          }
        }
      }
    }
  }
}

// Long index lists (many groups of gathered rows, so the kernels' read-ahead of later rows and
// the shorter last group are exercised), unsorted, on pools of 1 to 3 threads: still bitwise
// MatVec's result for every active row, inactive rows untouched.
TEST(GatherRowsTest, LongShuffledListsOnPoolsEqualMatVec) {
  std::mt19937 rng(15);
  ThreadPool pool2(2), pool3(3);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : AllDTypes()) {
      const int64_t rows = 517,
                    cols = IsBlockQuantized(t) ? testing::ValidCols(t, 1056) : 1063;
      Weights w = RandomWeights(rng, t, rows, cols);
      std::vector<float> x = RandomFloats(rng, cols, -2, 2);
      std::vector<float> dense(static_cast<size_t>(rows));
      MatVec(w.view(), x.data(), dense.data(), nullptr);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        for (double density : {0.37, 0.93}) {
          std::vector<int32_t> idx = RandomIndices(rng, rows, density, true);
          std::vector<float> y(static_cast<size_t>(rows), -12345.0f);
          GatherMatVecRows(w.view(), idx.data(), static_cast<int64_t>(idx.size()), x.data(),
                           y.data(), pool);
          std::vector<bool> active(static_cast<size_t>(rows), false);
          for (int32_t i : idx) active[i] = true;
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(y[r], active[r] ? dense[r] : -12345.0f)
                << testing::Describe(isa, t, rows, cols) << " row " << r << " density " << density;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace weir::kernels
