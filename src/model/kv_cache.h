// KVCache: keys and values of past positions, per layer, in F32.
//   k[l]: [rows(l), n_head_kv(l) * head_dim]   v[l]: same
// A global layer keeps every position of the context (rows = ctx). A sliding-window layer
// (LlamaConfig::IsSliding) attends only to the last `sliding_window` positions, so it keeps a
// ring of rows = min(ctx, window + n_batch - 1): a forward call appends up to n_batch positions
// before its first token reads its window, so the ring must hold the window of the call's first
// token plus the call's other tokens. Position p lives in row p % rows.
// Allocated once for the session's context length.
//
// Thread safety: none; owned by one Session.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "format/model_file.h"

namespace weir::model {

class KVCache {
 public:
  // Fails with a clear message when the allocation would not fit. n_batch: the most positions
  // one forward call appends (sizes the sliding layers' rings).
  Status Init(const format::LlamaConfig& config, int ctx, int n_batch = 1);

  int ctx() const { return ctx_; }
  int kv_dim(int layer) const { return kv_dim_[static_cast<size_t>(layer)]; }
  // Rows layer `layer` keeps: ctx, or its ring's size.
  int rows(int layer) const { return rows_[static_cast<size_t>(layer)]; }
  // The row of position `pos` (any position still in the layer's window).
  float* k(int layer, int pos) { return Row(k_, layer, pos); }
  float* v(int layer, int pos) { return Row(v_, layer, pos); }
  uint64_t bytes() const { return bytes_; }
  // Bytes Init would allocate, for budgeting before allocating.
  static uint64_t BytesFor(const format::LlamaConfig& config, int ctx, int n_batch = 1);

 private:
  static int RowsFor(const format::LlamaConfig& config, int layer, int ctx, int n_batch);
  float* Row(std::vector<AlignedBuffer>& b, int layer, int pos) {
    const size_t l = static_cast<size_t>(layer);
    return b[l].data<float>() +
           static_cast<size_t>(pos % rows_[l]) * static_cast<size_t>(kv_dim_[l]);
  }

  int ctx_ = 0;
  std::vector<int> kv_dim_;
  std::vector<int> rows_;
  std::vector<AlignedBuffer> k_, v_;
  uint64_t bytes_ = 0;
};

}  // namespace weir::model
