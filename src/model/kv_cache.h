// KVCache: keys and values of past positions, per layer, each in its cache type (KvTypes: F32,
// F16, BF16, Q8_0, Q4_0, Q5_0, ... any type with a quantizer whose block divides the head
// dimension). The library's default is F32, the exact cache the oracle tests check the forward
// pass with; the commands default to F16, as llama.cpp does (tools/common/model_flags.h). Each head of a row is stored on its own (its blocks never span two
// heads), so attention reads one head's keys as rows of that type; keys of a float type are kept
// in blocks of 16 positions instead (kernels/attention.h, KvRows), and every ring holds a
// multiple of 16 rows.
//   k[l]: [rows(l), n_head_kv(l) * head_dim] in types.k   v[l]: same in types.v
// A global layer keeps every position of the context (rows = ctx). A sliding-window layer
// (LlamaConfig::IsSliding) attends only to the last `sliding_window` positions, so it keeps a
// ring of rows = min(ctx, window + n_batch - 1), rounded up to 16: a forward call appends up to n_batch positions
// before its first token reads its window, so the ring must hold the window of the call's first
// token plus the call's other tokens. Position p lives in row p % rows.
// Allocated once for the session's context length.
//
// Thread safety: none; owned by one Session.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "format/model_file.h"
#include "kernels/attention.h"
#include "tensor/dtype.h"

namespace weir::model {

// The types of the cached keys and values.
struct KvTypes {
  DType k = DType::kF32;
  DType v = DType::kF32;
};

// "f16", or "q8_0/f16" style names for messages and tables: the key type, then the value type
// when it differs.
std::string KvTypesName(const KvTypes& types);
// Whether `t` can hold keys or values of heads of head_dim values; the reason when not.
Status CheckKvType(DType t, int head_dim);

class KVCache {
 public:
  // Fails with a clear message when the allocation would not fit or a type cannot hold the
  // heads. n_batch: the most positions one forward call appends (sizes the sliding layers' rings).
  Status Init(const format::LlamaConfig& config, int ctx, int n_batch = 1, KvTypes types = {});

  int ctx() const { return ctx_; }
  const KvTypes& types() const { return types_; }
  // Block of the Walsh-Hadamard rotation (kernels::HadamardRotate) applied to each head's keys
  // (and the queries), or values (and the attention output), before they are stored, or 0 for
  // none: 64 for a quantized type when the head dimension is a multiple of 64, so a head's
  // outlier dimensions share their block's scale with the others (llama.cpp rotates its
  // quantized caches too). Float types are stored as they are.
  int rotate_k() const { return rotate_k_; }
  int rotate_v() const { return rotate_v_; }
  int kv_dim(int layer) const { return kv_dim_[static_cast<size_t>(layer)]; }
  // Rows layer `layer` keeps: ctx, or its ring's size.
  int rows(int layer) const { return rows_[static_cast<size_t>(layer)]; }
  // Stores position `pos` of layer `layer`: k[kv_dim], v[kv_dim] converted to the cache types.
  void Store(int layer, int pos, const float* k, const float* v);
  // The layer's keys / values as attention reads them (valid until the next Init).
  const kernels::KvRows& keys(int layer) const { return k_rows_[static_cast<size_t>(layer)]; }
  const kernels::KvRows& values(int layer) const { return v_rows_[static_cast<size_t>(layer)]; }
  uint64_t bytes() const { return bytes_; }
  // Bytes Init would allocate, for budgeting before allocating.
  static uint64_t BytesFor(const format::LlamaConfig& config, int ctx, int n_batch = 1,
                           KvTypes types = {});
  // Bytes one more position of context costs (every layer that keeps all positions; a sliding
  // layer's ring does not grow), for "how many tokens fit" answers.
  static uint64_t BytesPerPosition(const format::LlamaConfig& config, KvTypes types = {});

 private:
  static int RowsFor(const format::LlamaConfig& config, int layer, int ctx, int n_batch);

  int ctx_ = 0;
  int head_dim_ = 0;
  int rotate_k_ = 0, rotate_v_ = 0;
  KvTypes types_;
  std::vector<int> kv_dim_;
  std::vector<int> rows_;
  std::vector<AlignedBuffer> k_, v_;
  std::vector<kernels::KvRows> k_rows_, v_rows_;
  uint64_t bytes_ = 0;
};

}  // namespace weir::model
