// Owned tensors and the edits pruning makes to weights in their stored element type:
// zeroing single elements inside encoded rows, keeping a subset of rows, keeping a subset of
// columns.
//
// Element types: zeroing is done in the encoding itself (F32/F16/BF16: zero bits; Q8_0: q = 0;
// Q4_0: nibble 8, i.e. d * (8 - 8) = 0), so the weights that stay are bit-identical and no
// requantization error is added. Row selection copies rows unchanged. Column selection copies
// whole blocks unchanged when the kept columns are whole blocks (attention heads of 32 or 64
// dims in Q8_0/Q4_0); otherwise each row is dequantized, gathered and requantized with the
// reference QuantizeRow (exact for F32, F16 and BF16; a fresh rounding for Q8_0/Q4_0).
//
// Thread safety: free functions; OwnedTensor has one owner.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "format/model_file.h"
#include "tensor/tensor_view.h"

namespace weir::prune {

struct OwnedTensor {
  AlignedBuffer bytes;
  TensorView view;  // points into bytes

  uint8_t* mutable_row(int64_t r) {
    return bytes.data<uint8_t>() + static_cast<size_t>(r) * view.row_bytes();
  }
};

// Zero-filled 2-D tensor; errors when cols is not a whole number of blocks or allocation fails.
Result<OwnedTensor> AllocateTensor(DType dtype, int64_t rows, int64_t cols);
// A writable copy of `w`.
Result<OwnedTensor> CopyTensor(const TensorView& w);

// Sets the elements at `cols` (each < row length) of one encoded row to zero.
void ZeroElements(DType dtype, uint8_t* row, std::span<const int32_t> cols);

// Rows `rows` (each in [0, w.rows())) of w: [rows.size(), cols].
Result<OwnedTensor> SelectRows(const TensorView& w, std::span<const int64_t> rows);
// Entries `idx` (each in [0, n)) of a 1-D F32 tensor [n] (a bias): [idx.size()].
Result<OwnedTensor> SelectEntries(const TensorView& v, std::span<const int64_t> idx);
// Columns `cols` (strictly ascending, in [0, w.cols())) of w: [rows, cols.size()].
// cols.size() must be a whole number of the type's blocks.
Result<OwnedTensor> SelectColumns(const TensorView& w, std::span<const int64_t> cols,
                                  ThreadPool* pool);

// Elements of w that are not exactly zero (after dequantization).
int64_t CountNonzero(const TensorView& w, ThreadPool* pool);

// A ModelFile backing that owns pruned tensors.
struct OwnedTensors : format::Backing {
  std::vector<std::unique_ptr<OwnedTensor>> tensors;
};

}  // namespace weir::prune
