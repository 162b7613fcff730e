#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "tensor/quantize.h"

namespace weir::model {

std::string KvTypesName(const KvTypes& types) {
  std::string k = DTypeName(types.k), v = DTypeName(types.v);
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return k == v ? k : k + "/" + v;
}

Status CheckKvType(DType t, int head_dim) {
  const DTypeTraits& tr = Traits(t);
  if (tr.quantize_row == nullptr) {
    return Status::InvalidArgument(StrFormat("KV cache type %s: weir has no quantizer for it", tr.name));
  }
  if (head_dim % tr.block_size != 0) {
    return Status::InvalidArgument(StrFormat(
        "KV cache type %s: its blocks of %d values do not divide the head dimension %d", tr.name,
        tr.block_size, head_dim));
  }
  return Status::Ok();
}

// Rounded up to a multiple of 16: keys in blocks of 16 positions (kernels/attention.h) never
// straddle the ring's end.
int KVCache::RowsFor(const format::LlamaConfig& config, int layer, int ctx, int n_batch) {
  int64_t rows = ctx;
  if (config.IsSliding(layer)) {
    rows = std::min<int64_t>(ctx, int64_t{config.sliding_window} + std::max(n_batch, 1) - 1);
  }
  return static_cast<int>((rows + 15) / 16 * 16);
}

uint64_t KVCache::BytesFor(const format::LlamaConfig& config, int ctx, int n_batch, KvTypes types) {
  uint64_t total = 0;
  const uint64_t head_k = RowBytes(types.k, config.head_dim);
  const uint64_t head_v = RowBytes(types.v, config.head_dim);
  for (size_t l = 0; l < config.layers.size(); ++l) {
    const int rows = RowsFor(config, static_cast<int>(l), ctx, n_batch);
    total += static_cast<uint64_t>(rows) * static_cast<uint64_t>(config.layers[l].n_head_kv) *
             (head_k + head_v);
  }
  return total;
}

uint64_t KVCache::BytesPerPosition(const format::LlamaConfig& config, KvTypes types) {
  uint64_t total = 0;
  const uint64_t head = RowBytes(types.k, config.head_dim) + RowBytes(types.v, config.head_dim);
  for (size_t l = 0; l < config.layers.size(); ++l) {
    if (config.IsSliding(static_cast<int>(l))) continue;
    total += static_cast<uint64_t>(config.layers[l].n_head_kv) * head;
  }
  return total;
}

Status KVCache::Init(const format::LlamaConfig& config, int ctx, int n_batch, KvTypes types) {
  if (ctx <= 0) return Status::InvalidArgument(StrFormat("context size %d must be positive", ctx));
  WEIR_RETURN_IF_ERROR(CheckKvType(types.k, config.head_dim));
  WEIR_RETURN_IF_ERROR(CheckKvType(types.v, config.head_dim));
  ctx_ = ctx;
  head_dim_ = config.head_dim;
  types_ = types;
  const bool rotatable = config.head_dim % 64 == 0;
  rotate_k_ = rotatable && IsBlockQuantized(types.k) ? 64 : 0;
  rotate_v_ = rotatable && IsBlockQuantized(types.v) ? 64 : 0;
  kv_dim_.clear();
  rows_.clear();
  k_.clear();
  v_.clear();
  k_rows_.clear();
  v_rows_.clear();
  const size_t head_k = RowBytes(types.k, config.head_dim);
  const size_t head_v = RowBytes(types.v, config.head_dim);
  for (size_t l = 0; l < config.layers.size(); ++l) {
    const int n_kv = config.layers[l].n_head_kv;
    const int rows = RowsFor(config, static_cast<int>(l), ctx, n_batch);
    kv_dim_.push_back(n_kv * config.head_dim);
    rows_.push_back(rows);
    const size_t row_k = head_k * static_cast<size_t>(n_kv), row_v = head_v * static_cast<size_t>(n_kv);
    AlignedBuffer kb, vb;
    if (!kb.Reset(static_cast<size_t>(rows) * row_k) || !vb.Reset(static_cast<size_t>(rows) * row_v)) {
      return Status::OutOfMemory(StrFormat("KV cache: cannot allocate %zu + %zu bytes for context %d",
                                           static_cast<size_t>(rows) * row_k,
                                           static_cast<size_t>(rows) * row_v, ctx));
    }
    // Zeroed, so the unused positions of a block of 16 hold numbers, and the whole cache is
    // resident from the start (what the budget counted).
    std::memset(kb.data(), 0, static_cast<size_t>(rows) * row_k);
    std::memset(vb.data(), 0, static_cast<size_t>(rows) * row_v);
    const bool tiled = !IsBlockQuantized(types.k);  // float keys: blocks of 16 positions
    k_rows_.push_back({kb.data<uint8_t>(), types.k, row_k, head_k, rows, tiled});
    v_rows_.push_back({vb.data<uint8_t>(), types.v, row_v, head_v, rows, false});
    k_.push_back(std::move(kb));
    v_.push_back(std::move(vb));
  }
  bytes_ = BytesFor(config, ctx, n_batch, types);
  return Status::Ok();
}

void KVCache::Store(int layer, int pos, const float* k, const float* v) {
  const size_t l = static_cast<size_t>(layer);
  const int n_kv = kv_dim_[l] / head_dim_;
  for (int h = 0; h < n_kv; ++h) {
    const size_t at = static_cast<size_t>(h) * static_cast<size_t>(head_dim_);
    kernels::WriteKvHead(k_rows_[l], k_[l].data<uint8_t>(), pos, h, head_dim_, k + at);
    kernels::WriteKvHead(v_rows_[l], v_[l].data<uint8_t>(), pos, h, head_dim_, v + at);
  }
}

}  // namespace weir::model
