#include "model/kv_cache.h"

namespace weir::model {

uint64_t KVCache::BytesFor(const format::LlamaConfig& config, int ctx) {
  uint64_t total = 0;
  for (const auto& L : config.layers) {
    total += 2ull * static_cast<uint64_t>(ctx) * static_cast<uint64_t>(L.n_head_kv) *
             static_cast<uint64_t>(config.head_dim) * sizeof(float);
  }
  return total;
}

Status KVCache::Init(const format::LlamaConfig& config, int ctx) {
  if (ctx <= 0) return Status::InvalidArgument(StrFormat("context size %d must be positive", ctx));
  ctx_ = ctx;
  kv_dim_.clear();
  k_.clear();
  v_.clear();
  for (const auto& L : config.layers) {
    int dim = L.n_head_kv * config.head_dim;
    kv_dim_.push_back(dim);
    size_t n = static_cast<size_t>(ctx) * static_cast<size_t>(dim) * sizeof(float);
    AlignedBuffer kb, vb;
    if (!kb.Reset(n) || !vb.Reset(n)) {
      return Status::OutOfMemory(StrFormat("KV cache: cannot allocate 2 x %zu bytes for context %d", n, ctx));
    }
    k_.push_back(std::move(kb));
    v_.push_back(std::move(vb));
  }
  bytes_ = BytesFor(config, ctx);
  return Status::Ok();
}

}  // namespace weir::model
