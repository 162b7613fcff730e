#include "kernels/sparse_column.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "kernels/internal/dispatch.h"
#include "kernels/internal/isa_kernels.h"
#include "tensor/quantize.h"

namespace weir::kernels {

namespace {

uint64_t Word(const std::byte* record, int64_t w) {
  uint64_t v;
  std::memcpy(&v, record + 8 * w, 8);
  return v;
}

}  // namespace

uint64_t SparseRecordBytes(DType t, int64_t len, int64_t nnz) {
  const int64_t bs = BlockSize(t);
  const int64_t padded = (nnz + bs - 1) / bs * bs;
  return SparseBitmapBytes(len) + (padded > 0 ? RowBytes(t, padded) : 0);
}

int64_t SparseRecordCount(const std::byte* record, int64_t len) {
  int64_t n = 0;
  const int64_t words = (len + 63) / 64;
  for (int64_t w = 0; w < words; ++w) {
    uint64_t v = Word(record, w);
    if (w == words - 1 && len % 64 != 0) v &= (uint64_t{1} << (len % 64)) - 1;
    n += std::popcount(v);
  }
  return n;
}

void SparseColumnAxpy(DType t, const std::byte* record, int64_t len, float x, float* y) {
  // The packed values are decoded in one call into a per-thread buffer (grown once), then
  // scattered in bitmap order.
  thread_local std::vector<float> values;
  const int64_t bs = BlockSize(t);
  const int64_t padded = (SparseRecordCount(record, len) + bs - 1) / bs * bs;
  if (padded == 0) return;
  if (values.size() < static_cast<size_t>(padded)) values.resize(static_cast<size_t>(padded));
  DequantizeRow(t, record + SparseBitmapBytes(len), values.data(), padded);
  const float* v = values.data();
  if (const auto scatter = internal::ActiveKernels().sparse_scatter) {
    scatter(v, record, len, x, y);
    return;
  }
  const int64_t words = (len + 63) / 64;
  for (int64_t w = 0; w < words; ++w) {
    uint64_t bits = Word(record, w);
    if (w == words - 1 && len % 64 != 0) bits &= (uint64_t{1} << (len % 64)) - 1;
    float* yw = y + w * 64;
    while (bits != 0) {
      yw[std::countr_zero(bits)] += x * *v++;
      bits &= bits - 1;
    }
  }
}

namespace ref {

void SparseColumnAxpy(DType t, const std::byte* record, int64_t len, float x, float* y) {
  const int64_t bs = BlockSize(t);
  const int64_t padded = (SparseRecordCount(record, len) + bs - 1) / bs * bs;
  std::vector<float> values(static_cast<size_t>(padded));
  if (padded > 0) DequantizeRow(t, record + SparseBitmapBytes(len), values.data(), padded);
  int64_t k = 0;
  for (int64_t i = 0; i < len; ++i) {
    const uint64_t word = [&] {
      uint64_t v;
      std::memcpy(&v, record + 8 * (i / 64), 8);
      return v;
    }();
    if ((word >> (i % 64)) & 1) y[i] += x * values[static_cast<size_t>(k++)];
  }
}

}  // namespace ref

}  // namespace weir::kernels
