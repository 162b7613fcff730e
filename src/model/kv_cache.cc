#include "model/kv_cache.h"

#include <algorithm>

namespace weir::model {

int KVCache::RowsFor(const format::LlamaConfig& config, int layer, int ctx, int n_batch) {
  if (!config.IsSliding(layer)) return ctx;
  const int64_t ring = int64_t{config.sliding_window} + std::max(n_batch, 1) - 1;
  return static_cast<int>(std::min<int64_t>(ctx, ring));
}

uint64_t KVCache::BytesFor(const format::LlamaConfig& config, int ctx, int n_batch) {
  uint64_t total = 0;
  for (size_t l = 0; l < config.layers.size(); ++l) {
    const int rows = RowsFor(config, static_cast<int>(l), ctx, n_batch);
    total += 2ull * static_cast<uint64_t>(rows) *
             static_cast<uint64_t>(config.layers[l].n_head_kv) *
             static_cast<uint64_t>(config.head_dim) * sizeof(float);
  }
  return total;
}

Status KVCache::Init(const format::LlamaConfig& config, int ctx, int n_batch) {
  if (ctx <= 0) return Status::InvalidArgument(StrFormat("context size %d must be positive", ctx));
  ctx_ = ctx;
  kv_dim_.clear();
  rows_.clear();
  k_.clear();
  v_.clear();
  for (size_t l = 0; l < config.layers.size(); ++l) {
    const int dim = config.layers[l].n_head_kv * config.head_dim;
    const int rows = RowsFor(config, static_cast<int>(l), ctx, n_batch);
    kv_dim_.push_back(dim);
    rows_.push_back(rows);
    size_t n = static_cast<size_t>(rows) * static_cast<size_t>(dim) * sizeof(float);
    AlignedBuffer kb, vb;
    if (!kb.Reset(n) || !vb.Reset(n)) {
      return Status::OutOfMemory(
          StrFormat("KV cache: cannot allocate 2 x %zu bytes for context %d", n, ctx));
    }
    k_.push_back(std::move(kb));
    v_.push_back(std::move(vb));
  }
  bytes_ = BytesFor(config, ctx, n_batch);
  return Status::Ok();
}

}  // namespace weir::model
