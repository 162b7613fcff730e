// Unstructured pruning (Wanda): in every output row of a projection, the weights with the
// smallest omega_ij = ||A_j||_2 * |W_ij| are set to zero, the same number in every row.
//
// Thread safety: free functions; `pool` is used from the calling thread only.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "prune/tensor_edit.h"

namespace weir::prune {

// Weights zeroed per row of `cols` at `sparsity`: round(sparsity * cols), within [0, cols].
int64_t PrunedPerRow(double sparsity, int64_t cols);

// Zeroes, in each row of `w` (in its encoding, see tensor_edit.h), the PrunedPerRow(sparsity)
// entries of smallest omega against `norm` ([cols]); ties go to the lower column.
void PruneUnstructured(OwnedTensor* w, const float* norm, double sparsity, ThreadPool* pool);

}  // namespace weir::prune
