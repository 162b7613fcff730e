#include "prune/tensor_edit.h"

#include <algorithm>
#include <cstring>

#include "tensor/quantize.h"

namespace weir::prune {

Result<OwnedTensor> AllocateTensor(DType dtype, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0 || cols % BlockSize(dtype) != 0) {
    return Status::InvalidArgument(StrFormat(
        "cannot make a %s tensor of %lld x %lld (rows of whole %d-value blocks)", DTypeName(dtype),
        static_cast<long long>(rows), static_cast<long long>(cols), BlockSize(dtype)));
  }
  OwnedTensor t;
  t.view.dtype = dtype;
  t.view.shape = Shape{rows, cols};
  if (!t.bytes.Reset(t.view.nbytes())) {
    return Status::OutOfMemory(
        StrFormat("cannot allocate %zu bytes for a pruned tensor", t.view.nbytes()));
  }
  t.view.data = t.bytes.data();
  return t;
}

Result<OwnedTensor> CopyTensor(const TensorView& w) {
  WEIR_ASSIGN_OR_RETURN(OwnedTensor t, AllocateTensor(w.dtype, w.rows(), w.cols()));
  std::memcpy(t.bytes.data(), w.data, w.nbytes());
  return t;
}

void ZeroElements(DType dtype, uint8_t* row, std::span<const int32_t> cols) {
  switch (dtype) {
    case DType::kF32:
      for (int32_t j : cols) std::memset(row + static_cast<size_t>(j) * 4, 0, 4);
      return;
    case DType::kF16:
    case DType::kBF16:
      for (int32_t j : cols) std::memset(row + static_cast<size_t>(j) * 2, 0, 2);
      return;
    case DType::kQ8_0: {
      auto* blocks = reinterpret_cast<BlockQ8_0*>(row);
      for (int32_t j : cols) blocks[j / kQK].qs[j % kQK] = 0;
      return;
    }
    case DType::kQ4_0: {
      // Value i (< 16) is the low nibble of qs[i], value i + 16 the high nibble; 8 decodes to 0.
      auto* blocks = reinterpret_cast<BlockQ4_0*>(row);
      for (int32_t j : cols) {
        uint8_t& b = blocks[j / kQK].qs[(j % kQK) % (kQK / 2)];
        b = (j % kQK) < kQK / 2 ? static_cast<uint8_t>((b & 0xF0) | 0x08)
                                : static_cast<uint8_t>((b & 0x0F) | 0x80);
      }
      return;
    }
    default: {
      // Any other block type: each touched block is dequantized, its pruned values set to 0 and
      // the block quantized again (its other values may move by the type's rounding; a type
      // with a min, such as Q4_1, holds 0 only approximately).
      const DTypeTraits& tr = Traits(dtype);
      std::vector<float> block(static_cast<size_t>(tr.block_size));
      size_t i = 0;
      while (i < cols.size()) {
        const int64_t b = cols[i] / tr.block_size;
        uint8_t* bytes = row + static_cast<size_t>(b) * tr.block_bytes;
        tr.dequantize_row(bytes, block.data(), tr.block_size);
        for (; i < cols.size() && cols[i] / tr.block_size == b; ++i) {
          block[static_cast<size_t>(cols[i] % tr.block_size)] = 0.0f;
        }
        tr.quantize_row(block.data(), bytes, tr.block_size);
      }
      return;
    }
  }
}

Result<OwnedTensor> SelectRows(const TensorView& w, std::span<const int64_t> rows) {
  WEIR_ASSIGN_OR_RETURN(OwnedTensor t,
                        AllocateTensor(w.dtype, static_cast<int64_t>(rows.size()), w.cols()));
  const size_t rb = w.row_bytes();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= w.rows()) {
      return Status::InvalidArgument(StrFormat("row %lld outside [0, %lld)",
                                               static_cast<long long>(rows[i]),
                                               static_cast<long long>(w.rows())));
    }
    std::memcpy(t.mutable_row(static_cast<int64_t>(i)), w.row(rows[i]), rb);
  }
  return t;
}

Result<OwnedTensor> SelectEntries(const TensorView& v, std::span<const int64_t> idx) {
  if (v.shape.ndim != 1 || v.dtype != DType::kF32 || idx.empty()) {
    return Status::InvalidArgument(StrFormat("cannot select %zu entries of a %s tensor %s",
                                             idx.size(), DTypeName(v.dtype),
                                             v.shape.ToString().c_str()));
  }
  const int64_t n = v.shape[0];
  OwnedTensor t;
  t.view.dtype = DType::kF32;
  t.view.shape = Shape{static_cast<int64_t>(idx.size())};
  if (!t.bytes.Reset(t.view.nbytes())) {
    return Status::OutOfMemory(
        StrFormat("cannot allocate %zu bytes for a pruned tensor", t.view.nbytes()));
  }
  t.view.data = t.bytes.data();
  float* dst = t.bytes.data<float>();
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= n) {
      return Status::InvalidArgument(StrFormat("entry %lld outside [0, %lld)",
                                               static_cast<long long>(idx[i]),
                                               static_cast<long long>(n)));
    }
    dst[i] = v.f32()[idx[i]];
  }
  return t;
}

Result<OwnedTensor> SelectColumns(const TensorView& w, std::span<const int64_t> cols,
                                  ThreadPool* pool) {
  const int64_t n_in = w.cols(), n_out = static_cast<int64_t>(cols.size());
  for (size_t i = 0; i < cols.size(); ++i) {
    if (cols[i] < 0 || cols[i] >= n_in || (i > 0 && cols[i] <= cols[i - 1])) {
      return Status::InvalidArgument(
          StrFormat("column list entry %zu = %lld is not ascending within [0, %lld)", i,
                    static_cast<long long>(cols[i]), static_cast<long long>(n_in)));
    }
  }
  WEIR_ASSIGN_OR_RETURN(OwnedTensor t, AllocateTensor(w.dtype, w.rows(), n_out));
  const int64_t block = BlockSize(w.dtype);
  // Whole blocks kept (always true for float types): copy the blocks' bytes.
  bool whole_blocks = true;
  for (int64_t i = 0; i < n_out && whole_blocks; i += block) {
    const int64_t first = cols[static_cast<size_t>(i)];
    whole_blocks =
        first % block == 0 && cols[static_cast<size_t>(i + block - 1)] == first + block - 1;
  }
  const size_t block_bytes = BlockBytes(w.dtype);
  ParallelFor(pool, static_cast<size_t>(w.rows()), [&](size_t begin, size_t end, int) {
    std::vector<float> in(whole_blocks ? 0 : static_cast<size_t>(n_in)),
        out(whole_blocks ? 0 : static_cast<size_t>(n_out));
    for (size_t r = begin; r < end; ++r) {
      const uint8_t* src = w.row(static_cast<int64_t>(r));
      uint8_t* dst = t.mutable_row(static_cast<int64_t>(r));
      if (whole_blocks) {
        for (int64_t i = 0; i < n_out; i += block) {
          std::memcpy(dst + static_cast<size_t>(i / block) * block_bytes,
                      src + static_cast<size_t>(cols[static_cast<size_t>(i)] / block) * block_bytes,
                      block_bytes);
        }
      } else {
        DequantizeRow(w.dtype, src, in.data(), n_in);
        for (int64_t i = 0; i < n_out; ++i)
          out[static_cast<size_t>(i)] = in[static_cast<size_t>(cols[static_cast<size_t>(i)])];
        QuantizeRow(w.dtype, out.data(), dst, n_out);
      }
    }
  });
  return t;
}

int64_t CountNonzero(const TensorView& w, ThreadPool* pool) {
  const int threads = pool ? std::max(1, pool->size()) : 1;
  std::vector<int64_t> partial(static_cast<size_t>(threads), 0);
  ParallelFor(pool, static_cast<size_t>(w.rows()), [&](size_t begin, size_t end, int t) {
    std::vector<float> row(static_cast<size_t>(w.cols()));
    int64_t n = 0;
    for (size_t r = begin; r < end; ++r) {
      DequantizeRow(w, static_cast<int64_t>(r), row.data());
      for (float v : row) n += v != 0.0f;
    }
    partial[static_cast<size_t>(t)] += n;
  });
  int64_t total = 0;
  for (int64_t n : partial) total += n;
  return total;
}

}  // namespace weir::prune
