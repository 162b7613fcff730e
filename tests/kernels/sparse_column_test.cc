// Sparse column records (bitmap + packed non-zero values): the kernel (AVX-512 or scalar, by
// dispatch) equals its decoding reference to one rounding and leaves unkept positions alone, and
// an F32 record equals the dense column's axpy, on awkward lengths, densities and types.
#include "kernels/sparse_column.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/quantize.h"

namespace weir::kernels {
namespace {

// A record of `column` (zeros are skipped), built independently of the pack writer.
std::vector<std::byte> Encode(DType t, const std::vector<float>& column) {
  const int64_t len = static_cast<int64_t>(column.size());
  std::vector<uint64_t> bitmap(static_cast<size_t>((len + 63) / 64), 0);
  std::vector<float> values;
  for (int64_t k = 0; k < len; ++k) {
    if (column[static_cast<size_t>(k)] == 0.0f) continue;
    bitmap[static_cast<size_t>(k / 64)] |= uint64_t{1} << (k % 64);
    values.push_back(column[static_cast<size_t>(k)]);
  }
  const int64_t nnz = static_cast<int64_t>(values.size());
  std::vector<std::byte> rec(SparseRecordBytes(t, len, nnz));
  std::memcpy(rec.data(), bitmap.data(), 8 * bitmap.size());
  values.resize(static_cast<size_t>((nnz + BlockSize(t) - 1) / BlockSize(t) * BlockSize(t)), 0.0f);
  if (!values.empty()) {
    QuantizeRow(t, values.data(), rec.data() + SparseBitmapBytes(len),
                static_cast<int64_t>(values.size()));
  }
  EXPECT_EQ(SparseRecordCount(rec.data(), len), nnz);
  return rec;
}

TEST(SparseColumnTest, MatchesReferenceAndDenseColumn) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t len : {1, 31, 63, 64, 65, 100, 257, 1000}) {
      for (double keep : {0.0, 0.1, 0.5, 0.97, 1.0}) {
        SCOPED_TRACE(std::string(DTypeName(t)) + " len " + std::to_string(len) + " keep " +
                     std::to_string(keep));
        std::vector<float> column(static_cast<size_t>(len));
        for (float& v : column) v = u(rng) < keep ? nd(rng) : 0.0f;
        const std::vector<std::byte> rec = Encode(t, column);
        std::vector<float> y(static_cast<size_t>(len)), want(y.size());
        for (size_t i = 0; i < y.size(); ++i) y[i] = want[i] = nd(rng);
        const float x = nd(rng);
        const std::vector<float> y0 = y;
        SparseColumnAxpy(t, rec.data(), len, x, y.data());
        ref::SparseColumnAxpy(t, rec.data(), len, x, want.data());
        // One multiply-add per element, fused or not: within two roundings of its terms.
        for (size_t i = 0; i < y.size(); ++i) {
          const double bound = 2.5e-7 * (std::fabs(y0[i]) + std::fabs(want[i] - y0[i])) + 1e-30;
          ASSERT_NEAR(y[i], want[i], bound) << i;
          if (want[i] == y0[i]) {
            EXPECT_EQ(y[i], y0[i]) << "position " << i << " was not kept";
          }
        }
      }
    }
  }
}

TEST(SparseColumnTest, FloatRecordEqualsDenseAxpy) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t len = 333;
  std::vector<float> column(static_cast<size_t>(len));
  for (size_t i = 0; i < column.size(); ++i) column[i] = i % 3 == 0 ? 0.0f : nd(rng);
  const std::vector<std::byte> rec = Encode(DType::kF32, column);
  EXPECT_EQ(rec.size(), SparseBitmapBytes(len) + 4 * 222u);
  std::vector<float> y(column.size()), dense(column.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = dense[i] = nd(rng);
  const std::vector<float> y0 = y;
  const float x = 0.75f;
  SparseColumnAxpy(DType::kF32, rec.data(), len, x, y.data());
  for (size_t i = 0; i < y.size(); ++i) dense[i] += x * column[i];
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(y[i], dense[i], 2.5e-7 * (std::fabs(y0[i]) + std::fabs(x * column[i]))) << i;
  }
}

TEST(SparseColumnTest, RecordSizes) {
  EXPECT_EQ(SparseBitmapBytes(1), 8u);
  EXPECT_EQ(SparseBitmapBytes(64), 8u);
  EXPECT_EQ(SparseBitmapBytes(65), 16u);
  EXPECT_EQ(SparseRecordBytes(DType::kQ4_0, 100, 0), 16u);
  EXPECT_EQ(SparseRecordBytes(DType::kQ4_0, 100, 1), 16u + 18u);   // one padded block
  EXPECT_EQ(SparseRecordBytes(DType::kQ8_0, 100, 33), 16u + 68u);  // two blocks
  EXPECT_EQ(SparseRecordBytes(DType::kF16, 100, 7), 16u + 14u);
}

}  // namespace
}  // namespace weir::kernels
