// StreamingWeights' read-aware selection (StreamingOptions::select_blocks, `--select blocks`):
// the kept columns of a layer are chosen in whole cache blocks, so that what is read is what is
// used. DIP keeps the K columns of largest |x| (or |h|); on a column pack a block holds many
// columns (34 input channels of SmolLM2 in 64 KiB), and at 50 % density almost every block holds
// one of them, so DIP reads nearly every byte (docs/streaming.md, 3.3). Here instead:
//   1. every column that lies in resident blocks is kept (it costs no read);
//   2. the other blocks are ranked by the sum of their columns' scores and taken, best first,
//      until K columns are kept; a block's columns are all kept;
//   3. a column that straddles into a block that is neither resident nor taken is dropped,
//      so no block is read for part of one column.
// A column belongs to the block it starts in. With everything resident every column is kept
// (the dense product). The result depends on the cache's state, as DIP-CA's does.
#include <algorithm>
#include <numeric>

#include "model/streaming_weights.h"

namespace weir::model {

void StreamingWeights::SelectWholeBlocks(
    const Extent& e, int64_t columns, const float* score, int64_t k,
    const std::function<std::pair<uint64_t, uint64_t>(int64_t)>& range,
    sparsity::IndexList* out) {
  const uint64_t B = options_.block_bytes;
  cache_->ResidentMask(storage::MakeUnitId(e.slab, e.kind, 0), e.n_blocks, block_words_.data());
  auto resident = [&](uint64_t b) { return e.held || ((block_words_[b / 64] >> (b % 64)) & 1); };
  std::vector<double>& block_score = select_block_score_;
  std::vector<uint8_t>& taken = select_block_taken_;  // 1 resident, 2 taken for reading
  block_score.assign(e.n_blocks, 0.0);
  taken.assign(e.n_blocks, 0);
  int64_t kept = 0;
  for (int64_t c = 0; c < columns; ++c) {
    const auto [begin, end] = range(c);
    const uint64_t b0 = begin / B;
    block_score[b0] += std::abs(score[c]);
  }
  for (uint64_t b = 0; b < e.n_blocks; ++b) {
    if (resident(b)) taken[b] = 1;
  }
  auto keeps = [&](int64_t c) {
    const auto [begin, end] = range(c);
    for (uint64_t b = begin / B; b <= (end - 1) / B; ++b) {
      if (taken[b] == 0) return false;
    }
    return true;
  };
  for (int64_t c = 0; c < columns; ++c) kept += keeps(c);
  if (kept < k) {
    // Blocks by score, best first (index breaks ties: deterministic).
    std::vector<uint64_t>& order = select_block_order_;
    order.clear();
    for (uint64_t b = 0; b < e.n_blocks; ++b) {
      if (taken[b] == 0) order.push_back(b);
    }
    std::sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) {
      return block_score[a] != block_score[b] ? block_score[a] > block_score[b] : a < b;
    });
    // Columns starting in each block, for counting as blocks are taken.
    std::vector<int64_t>& starts = select_block_starts_;
    starts.assign(e.n_blocks, 0);
    for (int64_t c = 0; c < columns; ++c) ++starts[range(c).first / B];
    // Taken by the count of columns starting in each block, then, since a column that straddles
    // into a block not taken is dropped, block by block on the exact count until k are kept.
    size_t next = 0;
    for (; next < order.size() && kept < k; ++next) {
      taken[order[next]] = 2;
      kept += starts[order[next]];
    }
    auto exact = [&] {
      int64_t n = 0;
      for (int64_t c = 0; c < columns; ++c) n += keeps(c);
      return n;
    };
    for (kept = exact(); kept < k && next < order.size(); kept = exact()) {
      taken[order[next++]] = 2;
    }
  }
  int32_t* idx = out->BeginWrite(columns);
  int64_t n = 0;
  for (int64_t c = 0; c < columns; ++c) {
    if (keeps(c)) idx[n++] = static_cast<int32_t>(c);
  }
  out->EndWrite(n);
}

}  // namespace weir::model
