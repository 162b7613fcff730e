// The chunked product (the bundle pack's down projection): every path equals the reference on
// every type, awkward row counts (tails of the 16-row passes), chunk counts past one kernel call,
// narrow float chunks and accumulation, with the chunks stored apart or read in place from a
// row-major matrix (bitwise the same); and the reference over a matrix cut into chunks equals
// the dense MatVec over the whole matrix.
#include "kernels/chunked_matvec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"

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

// w [rows, n_chunks * width] cut into chunks: chunk k holds columns [k width, (k + 1) width) as a
// [rows, width] matrix, chunks `stride` bytes apart (a gap after each, filled with junk).
std::vector<uint8_t> Chunks(const Weights& w, int64_t n_chunks, int width, size_t stride) {
  const size_t piece = RowBytes(w.dtype, width);
  std::vector<uint8_t> out(stride * static_cast<size_t>(n_chunks), 0xA5);
  for (int64_t k = 0; k < n_chunks; ++k) {
    for (int64_t r = 0; r < w.rows; ++r) {
      std::memcpy(out.data() + static_cast<size_t>(k) * stride + static_cast<size_t>(r) * piece,
                  w.view().row(r) + RowBytes(w.dtype, k * width), piece);
    }
  }
  return out;
}

TEST(ChunkedMatVecTest, PathsMatchReferenceAndDenseMatVec) {
  std::mt19937 rng(11);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : AllDTypes()) {
      for (int width : {32, 8}) {
        if (width % BlockSize(t) != 0) continue;
        for (int64_t rows : {1, 15, 16, 17, 100, 257}) {
          for (int64_t n_chunks : {1, 3, 66}) {
            for (bool raw : {false, true}) {
              if (raw && !IsQuantized(t)) continue;
              const int64_t cols = n_chunks * width;
              SCOPED_TRACE(Describe(isa, t, rows, cols) + " width " + std::to_string(width) +
                           (raw ? " raw" : ""));
              const Weights w =
                  raw ? RawQuantWeights(rng, t, rows, cols) : RandomWeights(rng, t, rows, cols);
              const size_t stride = RowBytes(t, width) * static_cast<size_t>(rows) + 64;
              const std::vector<uint8_t> chunks = Chunks(w, n_chunks, width, stride);
              const std::vector<float> x = RandomFloats(rng, cols);
              const std::vector<float> xe = EffectiveX(t, x.data(), cols);
              const std::vector<float> y0 = RandomFloats(rng, rows);
              std::vector<float> dense(static_cast<size_t>(rows));
              if (isa == Isa::kScalar) ref::MatVec(w.view(), x.data(), dense.data());
              for (bool accumulate : {false, true}) {
                std::vector<float> got = y0, want = y0;
                const size_t piece = RowBytes(t, width);
                ChunkedMatVec(t, chunks.data(), piece, stride, n_chunks, width, rows, x.data(),
                              got.data(), accumulate);
                ref::ChunkedMatVec(t, chunks.data(), piece, stride, n_chunks, width, rows,
                                   x.data(), want.data(), accumulate);
                // The same chunks read in place from the row-major matrix.
                std::vector<float> strided = y0;
                ChunkedMatVec(t, w.bytes.data(), w.view().row_bytes(), piece, n_chunks, width,
                              rows, x.data(), strided.data(), accumulate);
                for (int64_t r = 0; r < rows; ++r) {
                  const double base = accumulate ? y0[r] : 0.0;
                  const double bound =
                      kRel * (AbsDot(w.values.data() + r * cols, xe.data(), cols) +
                              std::fabs(base)) +
                      1e-30;
                  ASSERT_NEAR(got[r], want[r], bound) << "row " << r << " accumulate " << accumulate;
                  ASSERT_EQ(strided[r], got[r]) << "row " << r << " in place";
                  if (isa == Isa::kScalar) {
                    ASSERT_NEAR(want[r], base + dense[r], bound) << "row " << r << " vs MatVec";
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(ChunkedMatVecTest, NoChunks) {
  std::vector<float> y = {1, 2, 3};
  ChunkedMatVec(DType::kQ4_0, nullptr, 18, 0, 0, 32, 3, nullptr, y.data(), true);
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3}));
  ChunkedMatVec(DType::kQ4_0, nullptr, 18, 0, 0, 32, 3, nullptr, y.data(), false);
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0}));
}

}  // namespace
}  // namespace weir::kernels
