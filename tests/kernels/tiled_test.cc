// Tiled Q8_0 / Q4_0 products (kernels/tiled.h): tiling keeps every byte (untiling gives the rows
// back), every path's MatMul over a tiled tensor equals the scalar tiled product bit for bit for
// any number of tokens, and agrees with the row-major reference within the usual bound.
#include "kernels/tiled.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/internal/isa_kernels.h"

namespace weir::kernels {
namespace {

using testing::AbsDot;
using testing::Describe;
using testing::EffectiveX;
using testing::kRel;
using testing::RandomFloats;
using testing::RandomWeights;
using testing::RawQuantWeights;
using testing::Weights;

struct Tiled {
  AlignedBuffer bytes;
  TensorView view;
};

Tiled Tile(const Weights& w) {
  Tiled t;
  t.bytes.Reset(w.bytes.size());
  t.view = TileRows(w.view(), t.bytes.data());
  return t;
}

// The scalar definition over all groups.
std::vector<float> ScalarTiled(const TensorView& tiled, const std::vector<float>& x, int64_t n) {
  const int64_t cols = tiled.cols();
  const size_t rec = static_cast<size_t>(cols / kQK) * kTiledRecordBytes;
  AlignedBuffer xp(rec * static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    ref::PrepTiled(tiled.dtype, x.data() + t * cols, cols, xp.data<uint8_t>() + t * rec);
  }
  std::vector<float> y(static_cast<size_t>(n * tiled.rows()));
  ref::DotTiled(tiled, 0, tiled.rows() / kTileRows, xp.data(), rec, n, y.data(),
                static_cast<size_t>(tiled.rows()));
  return y;
}

TEST(TiledTest, CanTileOnlyQuantizedMultiplesOf16Rows) {
  std::mt19937 rng(1);
  EXPECT_TRUE(CanTile(RandomWeights(rng, DType::kQ4_0, 16, 32).view()));
  EXPECT_TRUE(CanTile(RandomWeights(rng, DType::kQ8_0, 48, 64).view()));
  EXPECT_FALSE(CanTile(RandomWeights(rng, DType::kQ4_0, 24, 32).view()));
  EXPECT_FALSE(CanTile(RandomWeights(rng, DType::kF16, 16, 32).view()));
  EXPECT_FALSE(CanTile(RandomWeights(rng, DType::kF32, 16, 32).view()));
}

TEST(TiledTest, UntileGivesTheRowsBack) {
  std::mt19937 rng(2);
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t cols : {32, 96, 2080}) {
      const Weights w = RawQuantWeights(rng, t, 48, cols);
      const Tiled tiled = Tile(w);
      EXPECT_EQ(tiled.view.layout, Layout::kTiled16);
      EXPECT_EQ(tiled.view.nbytes(), w.view().nbytes());
      std::vector<uint8_t> row(w.view().row_bytes());
      for (int64_t r = 0; r < w.rows; ++r) {
        UntileRow(tiled.view, r, row.data());
        ASSERT_EQ(std::memcmp(row.data(), w.view().row(r), row.size()), 0)
            << DTypeName(t) << " cols " << cols << " row " << r;
      }
    }
  }
}

TEST(TiledTest, EveryPathEqualsTheScalarTiledProductBitwise) {
  std::mt19937 rng(3);
  ThreadPool pool(3);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 32}, {48, 96}, {80, 2080}, {256, 64}}) {
        const Weights w = RawQuantWeights(rng, t, rows, cols);
        const Tiled tiled = Tile(w);
        for (int64_t n : {1, 2, 3, 4, 5, 17}) {
          const std::vector<float> x = RandomFloats(rng, n * cols);
          const std::vector<float> want = ScalarTiled(tiled.view, x, n);
          std::vector<float> got(want.size(), -1.0f);
          MatMul(tiled.view, x.data(), n, got.data(), &pool);
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(got[i], want[i]) << Describe(isa, t, rows, cols) << " n " << n << " at " << i;
          }
        }
      }
    }
  }
}

TEST(TiledTest, AgreesWithTheRowMajorReference) {
  std::mt19937 rng(4);
  ThreadPool pool(2);
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    const int64_t rows = 64, cols = 1056;
    const Weights w = RandomWeights(rng, t, rows, cols);
    const Tiled tiled = Tile(w);
    const int64_t n = 3;
    const std::vector<float> x = RandomFloats(rng, n * cols);
    std::vector<float> got(static_cast<size_t>(n * rows)), want(got.size());
    MatMul(tiled.view, x.data(), n, got.data(), &pool);
    ref::MatMul(w.view(), x.data(), n, want.data());
    for (int64_t tok = 0; tok < n; ++tok) {
      const std::vector<float> xe = EffectiveX(t, x.data() + tok * cols, cols);
      for (int64_t r = 0; r < rows; ++r) {
        const double bound = kRel * AbsDot(w.values.data() + r * cols, xe.data(), cols) + 1e-30;
        const size_t i = static_cast<size_t>(tok * rows + r);
        ASSERT_NEAR(got[i], want[i], bound) << DTypeName(t) << " token " << tok << " row " << r;
      }
    }
  }
}

// The down pieces of a tiled bundle pack: chunks of [rows, 32] pieces, tiled, a stride apart.
// Every path gives the scalar path's bits, and the result agrees with the row-major pieces'
// reference product.
TEST(TiledTest, ChunkedPiecesEveryPathBitwiseAndNearTheReference) {
  std::mt19937 rng(5);
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    const int64_t rows = 48, n_chunks = 5;
    const size_t piece_bytes = static_cast<size_t>(rows) * RowBytes(t, 32);
    const size_t stride = 3 * piece_bytes + 64;  // other bytes between the pieces, as in a pack
    std::vector<uint8_t> pack(stride * n_chunks, 0xA5);
    std::vector<Weights> pieces;
    for (int64_t k = 0; k < n_chunks; ++k) {
      pieces.push_back(RandomWeights(rng, t, rows, 32));
      TileRows(pieces.back().view(), pack.data() + k * stride + 2 * piece_bytes);
    }
    const std::vector<float> h = RandomFloats(rng, n_chunks * 32);
    std::vector<float> want(static_cast<size_t>(rows), 0.0f);
    AlignedBuffer hp(TiledPrepBytes(n_chunks * 32));
    std::vector<float> scalar(static_cast<size_t>(rows));
    {
      ScopedIsaOverride use(Isa::kScalar);
      PrepareTiled(t, h.data(), n_chunks * 32, hp.data());
      DotTiledChunks(t, pack.data() + 2 * piece_bytes, stride, n_chunks, rows, hp.data(), scalar.data());
    }
    for (Isa isa : SupportedIsas()) {
      ScopedIsaOverride use(isa);
      std::vector<float> got(static_cast<size_t>(rows), -1.0f);
      PrepareTiled(t, h.data(), n_chunks * 32, hp.data());
      DotTiledChunks(t, pack.data() + 2 * piece_bytes, stride, n_chunks, rows, hp.data(), got.data());
      ASSERT_EQ(got, scalar) << IsaName(isa) << " " << DTypeName(t);
    }
    // Against the row-major pieces: sum over chunks of ref dots, within the usual bound.
    for (int64_t r = 0; r < rows; ++r) {
      double bound = 1e-30;
      double sum = 0;
      for (int64_t k = 0; k < n_chunks; ++k) {
        const std::vector<float> he = EffectiveX(t, h.data() + k * 32, 32);
        sum += ref::DotRow(pieces[k].view(), r, h.data() + k * 32);
        bound += kRel * AbsDot(pieces[k].values.data() + r * 32, he.data(), 32);
      }
      ASSERT_NEAR(scalar[r], sum, bound + 1e-6 * std::fabs(sum)) << DTypeName(t) << " row " << r;
    }
  }
}

// DotTiledPrepared: the one-token product on the calling thread equals MatMul over the tensor.
TEST(TiledTest, PreparedProductEqualsMatMul) {
  std::mt19937 rng(6);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
      const Weights w = RandomWeights(rng, t, 32, 160);
      const Tiled tiled = Tile(w);
      const std::vector<float> x = RandomFloats(rng, 160);
      AlignedBuffer xp(TiledPrepBytes(160));
      PrepareTiled(t, x.data(), 160, xp.data());
      std::vector<float> got(32), want(32);
      DotTiledPrepared(tiled.view, xp.data(), got.data());
      MatMul(tiled.view, x.data(), 1, want.data(), nullptr);
      ASSERT_EQ(got, want) << IsaName(isa) << " " << DTypeName(t);
    }
  }
}

}  // namespace
}  // namespace weir::kernels
