// KVCache: keys and values of every past position, per layer, in F32.
//   k[l]: [ctx, n_head_kv(l) * head_dim]   v[l]: same
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
  // Fails with a clear message when the allocation would not fit.
  Status Init(const format::LlamaConfig& config, int ctx);

  int ctx() const { return ctx_; }
  int kv_dim(int layer) const { return kv_dim_[static_cast<size_t>(layer)]; }
  float* k(int layer, int pos) { return k_[static_cast<size_t>(layer)].data<float>() + static_cast<size_t>(pos) * kv_dim(layer); }
  float* v(int layer, int pos) { return v_[static_cast<size_t>(layer)].data<float>() + static_cast<size_t>(pos) * kv_dim(layer); }
  uint64_t bytes() const { return bytes_; }
  // Bytes Init would allocate, for budgeting before allocating.
  static uint64_t BytesFor(const format::LlamaConfig& config, int ctx);

 private:
  int ctx_ = 0;
  std::vector<int> kv_dim_;
  std::vector<AlignedBuffer> k_, v_;
  uint64_t bytes_ = 0;
};

}  // namespace weir::model
