// Unstructured (Wanda) pruning zeroes exactly round(s * cols) weights per row, and they are the
// row's lowest-omega weights (against a full sort); the rest are untouched.
#include "prune/unstructured.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "tensor/quantize.h"

namespace weir::prune {
namespace {

TEST(UnstructuredTest, PrunedPerRow) {
  EXPECT_EQ(PrunedPerRow(0.0, 100), 0);
  EXPECT_EQ(PrunedPerRow(0.25, 100), 25);
  EXPECT_EQ(PrunedPerRow(0.333, 64), 21);
  EXPECT_EQ(PrunedPerRow(0.999, 10), 10);
  EXPECT_EQ(PrunedPerRow(-1.0, 10), 0);
}

TEST(UnstructuredTest, ZeroesTheLowestOmegaPerRowExactly) {
  const int64_t rows = 37, cols = 96;
  std::mt19937 rng(8);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.1f, 3.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols)), norm(static_cast<size_t>(cols));
  for (auto& x : w) x = d(rng);
  for (auto& x : norm) x = u(rng);
  ThreadPool pool(2);
  for (double s : {0.1, 0.25, 0.5, 0.8, 0.99}) {
    auto t = AllocateTensor(DType::kF32, rows, cols);
    ASSERT_TRUE(t.ok());
    std::memcpy(t->bytes.data(), w.data(), w.size() * 4);
    PruneUnstructured(&*t, norm.data(), s, &pool);
    const int64_t k = PrunedPerRow(s, cols);
    const float* out = t->view.f32();
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int> idx(static_cast<size_t>(cols));
      std::iota(idx.begin(), idx.end(), 0);
      const float* wr = w.data() + r * cols;
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
        return norm[a] * std::fabs(wr[a]) < norm[b] * std::fabs(wr[b]);
      });
      const std::set<int> lowest(idx.begin(), idx.begin() + k);
      int64_t zeros = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const float v = out[r * cols + j];
        zeros += v == 0.0f;
        if (lowest.count(static_cast<int>(j))) {
          EXPECT_EQ(v, 0.0f);
        } else {
          EXPECT_EQ(v, wr[j]);
        }
      }
      EXPECT_EQ(zeros, k) << "s=" << s << " row " << r;
    }
  }
}

TEST(UnstructuredTest, QuantizedRowsKeepTheirOtherValues) {
  const int64_t rows = 8, cols = 64;
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols)), norm(static_cast<size_t>(cols), 1.0f);
  for (auto& x : w) x = d(rng);
  auto t = AllocateTensor(DType::kQ8_0, rows, cols);
  ASSERT_TRUE(t.ok());
  for (int64_t r = 0; r < rows; ++r)
    QuantizeRow(DType::kQ8_0, w.data() + r * cols, t->mutable_row(r), cols);
  std::vector<float> before(static_cast<size_t>(cols)), after(static_cast<size_t>(cols));
  std::vector<std::vector<float>> orig;
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t->view, r, before.data());
    orig.push_back(before);
  }
  PruneUnstructured(&*t, norm.data(), 0.5, nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t->view, r, after.data());
    int64_t zeros = 0;
    for (int64_t j = 0; j < cols; ++j) {
      if (after[static_cast<size_t>(j)] == 0.0f) {
        ++zeros;
      } else {
        EXPECT_EQ(after[static_cast<size_t>(j)],
                  orig[static_cast<size_t>(r)][static_cast<size_t>(j)]);
      }
    }
    EXPECT_GE(zeros, 32);
  }
}

}  // namespace
}  // namespace weir::prune
