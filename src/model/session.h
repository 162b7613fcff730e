// Session: one sequence being decoded: the KV cache, the position, and every buffer the forward
// pass needs, allocated once when the session is created (no allocation per token).
//
// The forward pass (forward.cc) reads top to bottom like the Llama paper:
//   x = embed(token)
//   for each layer:  x += Attention(RMSNorm(x))   -- RoPE, grouped-query, causal, KV cache
//                    x += SwiGLU-MLP(RMSNorm(x))
//   logits = Output(RMSNorm(x))
// Prompts go through as a batch (matrix-matrix products); decode is the same code with n = 1.
//
// Thread safety: a Session is used by one thread at a time; it borrows the Model (read-only,
// shareable between sessions) and a ThreadPool.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace weir::model {

struct SessionOptions {
  int ctx = 0;       // context length; 0 = the model's (capped at 4096)
  int n_batch = 32;  // tokens per forward call during prefill
};

enum class LogitsFor { kLast, kAll };

class Session {
 public:
  static Result<std::unique_ptr<Session>> Create(const Model& model, ThreadPool* pool,
                                                 const SessionOptions& options);

  // Runs tokens[0..n) at positions pos()..pos()+n, n <= n_batch(), appends them to the KV cache
  // and returns their logits: [n, vocab] for kAll, [vocab] of the last token for kLast.
  // The pointer stays valid until the next call.
  Result<const float*> Forward(std::span<const int32_t> tokens, LogitsFor which);

  // Feeds any number of tokens in n_batch chunks; returns the logits of the last one.
  Result<const float*> Prefill(std::span<const int32_t> tokens);

  // Forgets the sequence (the KV cache is reused from position 0).
  void Reset() { pos_ = 0; }
  int pos() const { return pos_; }
  int ctx() const { return kv_.ctx(); }
  int n_batch() const { return n_batch_; }
  const Model& model() const { return model_; }
  // Bytes this session allocated (KV cache + activations).
  uint64_t allocated_bytes() const;

 private:
  Session(const Model& model, ThreadPool* pool) : model_(model), pool_(pool) {}
  Status Allocate(const SessionOptions& options);

  // forward.cc: one function per block, in the order of the paper.
  void Embed(std::span<const int32_t> tokens);
  void Attention(int layer, int n);
  void Mlp(int layer, int n);
  void Output(int n, LogitsFor which);

  const Model& model_;
  ThreadPool* pool_;
  KVCache kv_;
  int pos_ = 0;
  int n_batch_ = 0;

  // Activations for up to n_batch tokens, row-major [token, dim].
  AlignedBuffer x_;       // [n_batch, d_model] residual stream
  AlignedBuffer xb_;      // [n_batch, d_model] normalized input of a block
  AlignedBuffer q_;       // [n_batch, max q_dim]
  AlignedBuffer k_;       // [n_batch, max kv_dim]
  AlignedBuffer v_;       // [n_batch, max kv_dim]
  AlignedBuffer att_;     // [n_batch, max q_dim] attention output (heads concatenated)
  AlignedBuffer scores_;  // [pool size, ctx] attention scores, one row per thread
  AlignedBuffer gate_;    // [n_batch, max d_ff]
  AlignedBuffer up_;      // [n_batch, max d_ff]
  AlignedBuffer logits_;  // [n_batch, vocab]
};

}  // namespace weir::model
