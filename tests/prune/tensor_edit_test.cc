// Edits in the stored encoding: zeroing leaves every other value bit-identical in every type;
// row and column selection against a dequantize-gather reference.
#include "prune/tensor_edit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "tensor/quantize.h"

namespace weir::prune {
namespace {

std::vector<float> RandomValues(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// A [rows, cols] tensor of `type` from random values.
OwnedTensor MakeTensor(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  auto t = AllocateTensor(type, rows, cols);
  EXPECT_TRUE(t.ok());
  const std::vector<float> v = RandomValues(rows * cols, seed);
  for (int64_t r = 0; r < rows; ++r)
    QuantizeRow(type, v.data() + r * cols, t->mutable_row(r), cols);
  return std::move(t).value();
}

std::vector<float> Dequantized(const TensorView& w) {
  std::vector<float> out(static_cast<size_t>(w.shape.numel()));
  for (int64_t r = 0; r < w.rows(); ++r) DequantizeRow(w, r, out.data() + r * w.cols());
  return out;
}

class ZeroTest : public ::testing::TestWithParam<DType> {};

TEST_P(ZeroTest, ZeroesExactlyTheChosenElements) {
  const DType type = GetParam();
  OwnedTensor t = MakeTensor(type, 3, 64, 9);
  const std::vector<float> before = Dequantized(t.view);
  const std::vector<int32_t> cols = {0, 5, 15, 16, 17, 31, 32, 47, 63};
  ZeroElements(type, t.mutable_row(1), cols);
  const std::vector<float> after = Dequantized(t.view);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t j = 0; j < 64; ++j) {
      const size_t i = static_cast<size_t>(r * 64 + j);
      const bool zeroed = r == 1 && std::find(cols.begin(), cols.end(), j) != cols.end();
      if (zeroed) {
        EXPECT_EQ(after[i], 0.0f) << DTypeName(type) << " col " << j;
      } else {
        EXPECT_EQ(after[i], before[i]) << DTypeName(type) << " row " << r << " col " << j;
      }
    }
  }
  EXPECT_EQ(CountNonzero(t.view, nullptr),
            static_cast<int64_t>(
                std::count_if(after.begin(), after.end(), [](float v) { return v != 0.0f; })));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ZeroTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0));

TEST(SelectTest, RowsAreCopiedUnchanged) {
  OwnedTensor t = MakeTensor(DType::kQ4_0, 6, 64, 2);
  const std::vector<int64_t> rows = {1, 4, 5};
  auto s = SelectRows(t.view, rows);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->view.rows(), 3);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(
        std::memcmp(s->view.row(static_cast<int64_t>(i)), t.view.row(rows[i]), t.view.row_bytes()),
        0);
  }
  const std::vector<int64_t> bad = {6};
  EXPECT_FALSE(SelectRows(t.view, bad).ok());
}

TEST(SelectTest, WholeBlockColumnsKeepTheirBytes) {
  ThreadPool pool(2);
  OwnedTensor t = MakeTensor(DType::kQ8_0, 5, 128, 3);
  std::vector<int64_t> cols;
  for (int64_t j = 32; j < 64; ++j) cols.push_back(j);
  for (int64_t j = 96; j < 128; ++j) cols.push_back(j);
  auto s = SelectColumns(t.view, cols, &pool);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int64_t r = 0; r < 5; ++r) {
    EXPECT_EQ(std::memcmp(s->view.row(r), t.view.row(r) + sizeof(BlockQ8_0), sizeof(BlockQ8_0)), 0);
    EXPECT_EQ(std::memcmp(s->view.row(r) + sizeof(BlockQ8_0), t.view.row(r) + 3 * sizeof(BlockQ8_0),
                          sizeof(BlockQ8_0)),
              0);
  }
}

TEST(SelectTest, ScatteredColumnsAreRequantizedFromTheGather) {
  for (DType type : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    OwnedTensor t = MakeTensor(type, 4, 96, 4);
    std::vector<int64_t> cols;
    for (int64_t j = 0; j < 96; j += 3) cols.push_back(j);  // 32 columns, not whole blocks
    auto s = SelectColumns(t.view, cols, nullptr);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const std::vector<float> src = Dequantized(t.view);
    for (int64_t r = 0; r < 4; ++r) {
      std::vector<float> gathered;
      for (int64_t j : cols) gathered.push_back(src[static_cast<size_t>(r * 96 + j)]);
      std::vector<uint8_t> want(RowBytes(type, 32));
      QuantizeRow(type, gathered.data(), want.data(), 32);
      EXPECT_EQ(std::memcmp(s->view.row(r), want.data(), want.size()), 0) << DTypeName(type);
    }
  }
  OwnedTensor t = MakeTensor(DType::kQ8_0, 2, 64, 5);
  const std::vector<int64_t> not_ascending = {3, 2};
  EXPECT_FALSE(SelectColumns(t.view, not_ascending, nullptr).ok());
  std::vector<int64_t> partial_block(20);
  std::iota(partial_block.begin(), partial_block.end(), 0);
  EXPECT_FALSE(SelectColumns(t.view, partial_block, nullptr).ok());  // 20 is not a whole Q8_0 block
}

}  // namespace
}  // namespace weir::prune
