#include "kernels/tiled.h"

#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/internal/dispatch.h"
#include "kernels/internal/isa_kernels.h"
#include "kernels/matvec.h"

namespace weir::kernels {
namespace {

constexpr int64_t kScaleBytes = 2;

// Bytes of one (block, 16 rows) of quants: Q4_0 16 bytes per row, Q8_0 32.
int64_t QuantTileBytes(DType t) { return t == DType::kQ4_0 ? 16 * kTileRows : 32 * kTileRows; }

// Offset within a group's quants of (block b, row r, qs byte j) (j < 16 for Q4_0, < 32 for Q8_0).
int64_t QuantOffset(DType t, int64_t b, int64_t r, int64_t j) {
  return b * QuantTileBytes(t) + (j / 4) * 64 + r * 4 + j % 4;
}

// The signed integer weight (block b, row r, input j) of group g.
int32_t WeightAt(DType t, const uint8_t* quants, int64_t b, int64_t r, int64_t j) {
  if (t == DType::kQ8_0) return static_cast<int8_t>(quants[QuantOffset(t, b, r, j)]);
  const uint8_t byte = quants[QuantOffset(t, b, r, j % 16)];
  return static_cast<int32_t>(j < 16 ? (byte & 15) : (byte >> 4)) - 8;
}

}  // namespace

bool HasFastTiledProduct() { return internal::ActiveKernels().dot_tiled != nullptr; }

bool CanTile(const TensorView& w) {
  return (w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0) && w.shape.ndim == 2 &&
         w.layout == Layout::kRowMajor && w.rows() > 0 && w.rows() % kTileRows == 0;
}

TensorView TileRows(const TensorView& w, void* dst) {
  WEIR_CHECK(CanTile(w));
  const DType t = w.dtype;
  const int64_t nb = w.cols() / kQK, qb = t == DType::kQ4_0 ? 16 : 32;
  const size_t block_bytes = BlockBytes(t), group_bytes = static_cast<size_t>(kTileRows) * w.row_bytes();
  for (int64_t g = 0; g < w.rows() / kTileRows; ++g) {
    auto* scales = static_cast<uint8_t*>(dst) + static_cast<size_t>(g) * group_bytes;
    uint8_t* quants = scales + nb * kTileRows * kScaleBytes;
    for (int64_t r = 0; r < kTileRows; ++r) {
      const uint8_t* row = w.row(g * kTileRows + r);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* block = row + static_cast<size_t>(b) * block_bytes;
        std::memcpy(scales + (b * kTileRows + r) * kScaleBytes, block, kScaleBytes);
        for (int64_t j = 0; j < qb; j += 4) {
          std::memcpy(quants + QuantOffset(t, b, r, j), block + kScaleBytes + j, 4);
        }
      }
    }
  }
  TensorView v = w;
  v.data = dst;
  v.layout = Layout::kTiled16;
  return v;
}

void UntileRow(const TensorView& tiled, int64_t r, void* out) {
  WEIR_CHECK(tiled.layout == Layout::kTiled16 && r >= 0 && r < tiled.rows());
  const DType t = tiled.dtype;
  const int64_t nb = tiled.cols() / kQK, qb = t == DType::kQ4_0 ? 16 : 32;
  const size_t block_bytes = BlockBytes(t);
  const int64_t g = r / kTileRows, rr = r % kTileRows;
  const auto* scales = static_cast<const uint8_t*>(tiled.data) +
                       static_cast<size_t>(g) * static_cast<size_t>(kTileRows) * tiled.row_bytes();
  const uint8_t* quants = scales + nb * kTileRows * kScaleBytes;
  for (int64_t b = 0; b < nb; ++b) {
    auto* block = static_cast<uint8_t*>(out) + static_cast<size_t>(b) * block_bytes;
    std::memcpy(block, scales + (b * kTileRows + rr) * kScaleBytes, kScaleBytes);
    for (int64_t j = 0; j < qb; ++j) block[kScaleBytes + j] = quants[QuantOffset(t, b, rr, j)];
  }
}

namespace internal {

void ScalarPrepTiled(DType t, const float* x, int64_t cols, void* out) {
  const int32_t offset = t == DType::kQ4_0 ? 8 : 128;
  for (int64_t b = 0; b < cols / kQK; ++b) {
    uint8_t* rec = static_cast<uint8_t*>(out) + static_cast<size_t>(b) * kTiledRecordBytes;
    auto* q = reinterpret_cast<int8_t*>(rec);
    float d;
    ref::QuantizeActivation(x + b * kQK, kQK, q, &d);
    int32_t sum = 0;
    for (int j = 0; j < kQK; ++j) sum += q[j];
    const int32_t bias = -offset * sum;
    std::memcpy(rec + 32, &bias, 4);
    std::memcpy(rec + 36, &d, 4);
    std::memset(rec + 40, 0, kTiledRecordBytes - 40);
  }
}

void ScalarDotTiled(DType t, const uint8_t* groups, const TiledGeometry& geo, const void* xp,
                    size_t xp_stride, int64_t n_tok, float* y, size_t y_stride) {
  for (int64_t g = 0; g < geo.n_groups; ++g) {
    const uint8_t* group = groups + static_cast<size_t>(g) * geo.group_bytes;
    for (int64_t tok = 0; tok < n_tok; ++tok) {
      const uint8_t* x = static_cast<const uint8_t*>(xp) + static_cast<size_t>(tok) * xp_stride;
      for (int64_t r = 0; r < kTileRows; ++r) {
        float acc = 0;
        for (int64_t b = 0; b < geo.nb; ++b) {
          const uint8_t* rec = x + static_cast<size_t>(b) * kTiledRecordBytes;
          const auto* q = reinterpret_cast<const int8_t*>(rec);
          const uint8_t* scales = group + static_cast<size_t>(b) * geo.scale_stride;
          const uint8_t* quants = group + geo.quant_offset + static_cast<size_t>(b) * geo.quant_stride;
          int32_t isum = 0;
          for (int64_t j = 0; j < kQK; ++j) isum += WeightAt(t, quants, 0, r, j) * q[j];
          uint16_t dw_bits;
          float dx;
          std::memcpy(&dw_bits, scales + r * kScaleBytes, 2);
          std::memcpy(&dx, rec + 36, 4);
          const float scale = F16ToF32(dw_bits) * dx;
          acc = std::fma(static_cast<float>(isum), scale, acc);
        }
        y[static_cast<size_t>(tok) * y_stride + static_cast<size_t>(g * kTileRows + r)] = acc;
      }
    }
  }
}

internal::TiledGeometry TensorGeometry(const TensorView& tiled, int64_t n_groups) {
  internal::TiledGeometry g;
  g.nb = tiled.cols() / kQK;
  g.n_groups = n_groups;
  g.group_bytes = static_cast<size_t>(kTileRows) * tiled.row_bytes();
  g.scale_stride = static_cast<size_t>(kTileRows * kScaleBytes);
  g.quant_offset = static_cast<size_t>(g.nb) * g.scale_stride;
  g.quant_stride = static_cast<size_t>(QuantTileBytes(tiled.dtype));
  return g;
}

}  // namespace internal

size_t TiledPrepBytes(int64_t cols) { return static_cast<size_t>(cols / kQK) * kTiledRecordBytes; }

void PrepareTiled(DType t, const float* x, int64_t cols, void* out) {
  const internal::IsaKernels& k = internal::ActiveKernels();
  (k.prep_tiled ? k.prep_tiled : internal::ScalarPrepTiled)(t, x, cols, out);
}

void DotTiledPrepared(const TensorView& tiled, const void* xp, float* y) {
  WEIR_CHECK(tiled.layout == Layout::kTiled16);
  const internal::IsaKernels& k = internal::ActiveKernels();
  (k.dot_tiled ? k.dot_tiled : internal::ScalarDotTiled)(
      tiled.dtype, static_cast<const uint8_t*>(tiled.data),
      internal::TensorGeometry(tiled, tiled.rows() / kTileRows), xp, 0, 1, y, 0);
}

void DotTiledChunks(DType t, const uint8_t* first, size_t chunk_stride, int64_t n_chunks,
                    int64_t rows, const void* hp, float* y) {
  WEIR_CHECK((t == DType::kQ8_0 || t == DType::kQ4_0) && rows % kTileRows == 0);
  internal::TiledGeometry g;
  g.nb = n_chunks;
  g.n_groups = rows / kTileRows;
  g.group_bytes = static_cast<size_t>(kTileRows) * BlockBytes(t);
  g.scale_stride = chunk_stride;
  g.quant_offset = static_cast<size_t>(kTileRows * kScaleBytes);
  g.quant_stride = chunk_stride;
  const internal::IsaKernels& k = internal::ActiveKernels();
  (k.dot_tiled ? k.dot_tiled : internal::ScalarDotTiled)(t, first, g, hp, 0, 1, y, 0);
}

namespace ref {

void PrepTiled(DType t, const float* x, int64_t cols, void* out) {
  internal::ScalarPrepTiled(t, x, cols, out);
}

void DotTiled(const TensorView& tiled, int64_t group_begin, int64_t group_end, const void* xp,
              size_t xp_stride, int64_t n_tok, float* y, size_t y_stride) {
  WEIR_CHECK(tiled.layout == Layout::kTiled16);
  const internal::TiledGeometry g = internal::TensorGeometry(tiled, group_end - group_begin);
  internal::ScalarDotTiled(tiled.dtype,
                           static_cast<const uint8_t*>(tiled.data) + static_cast<size_t>(group_begin) * g.group_bytes,
                           g, xp, xp_stride, n_tok, y + group_begin * kTileRows, y_stride);
}

}  // namespace ref
}  // namespace weir::kernels
