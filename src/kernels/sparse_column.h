// One column of a weight matrix in bitmap + packed form -- the storage of weights pruned without
// structure (the sparse column layout of a weir pack, format/weir_pack_format.h):
//   u64 bitmap[ceil(len / 64)]   bit k (word k / 64, bit k % 64) set when value k is not zero
//   the non-zero values in order, zero-padded to whole blocks of the type
// Bitmap words are read with memcpy, so a record may start at any byte.
//
// Thread safety: free functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace weir::kernels {

inline uint64_t SparseBitmapBytes(int64_t len) {
  return 8 * static_cast<uint64_t>((len + 63) / 64);
}
// Bytes of a record of `len` values with `nnz` non-zero ones.
uint64_t SparseRecordBytes(DType t, int64_t len, int64_t nnz);
// Non-zero values the record's bitmap announces.
int64_t SparseRecordCount(const std::byte* record, int64_t len);

// y[k] += x * v[k] for k < len, v the column the record holds (AVX-512: 16 positions per step
// with vexpandps; elsewhere a scalar loop over the set bits). Each y[k] gets one multiply-add,
// fused or not, so paths agree to one rounding; one path is deterministic. The caller has
// checked that the record's bytes are SparseRecordBytes(t, len, SparseRecordCount(record, len)).
void SparseColumnAxpy(DType t, const std::byte* record, int64_t len, float x, float* y);

namespace ref {
// The same by decoding the whole column first (the test oracle).
void SparseColumnAxpy(DType t, const std::byte* record, int64_t len, float x, float* y);
}  // namespace ref

}  // namespace weir::kernels
