// Session: one sequence being decoded: the KV cache, the position, and every buffer the forward
// pass needs, allocated once when the session is created (no allocation per token).
//
// The forward pass (forward.cc) reads top to bottom like the Llama paper:
//   x = embed(token)                              (Gemma: times sqrt(d_model))
//   for each layer:  x += Attention(RMSNorm(x))   -- RoPE, grouped-query, causal, KV cache
//                    x += MLP(RMSNorm(x))          -- SwiGLU; its layer's provider computes it
//                                                     (dense, sparse, streamed or a mixture of
//                                                     experts: mlp_provider.h)
//   logits = Output(RMSNorm(x))
// with the switches of the model's architecture (format/arch_spec.h) where others differ:
// QK-norm, a post-norm on each block's output, GeGLU, sliding-window layers, logit soft-cap.
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
#include "model/activation_observer.h"
#include "m2cache/layer_source.h"
#include "m2cache/mixed_mlp.h"
#include "m2cache/tier_memory.h"
#include "model/kv_cache.h"
#include "model/mlp_provider.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/streaming_weights.h"
#include "model/transposed_weights.h"
#include "sparsity/policy.h"

namespace weir::model {

struct SessionOptions {
  int ctx = 0;       // context length; 0 = the model's (capped at 4096)
  int n_batch = 32;  // tokens per forward call during prefill
  KvTypes kv_types;  // the KV cache's key and value types (kv_cache.h; default F32)
  // Dynamic activation sparsity (nullptr or a policy that never prunes = dense). The session
  // keeps its own Clone() and builds the transposed weight copies the policy's sites need.
  const sparsity::SparsityPolicy* sparsity = nullptr;
  // The MLP of a weir pack, streamed from storage (model/streaming_model.h); the model's MLP
  // tensors are then stand-ins without data. Not owned; one session at a time.
  StreamingWeights* streamed = nullptr;
  // M2Cache's mixed-precision MLP (m2cache/mixed_mlp.h): the model's neurons at two precisions
  // with their predictors (shared, not owned) and the run's ratios. Not with `sparsity`,
  // `streamed` or a mixture of experts.
  const m2cache::M2Weights* m2cache = nullptr;
  m2cache::MixConfig m2cache_config;
  // Where M2Cache's neuron rows come from (m2cache/layer_source.h), e.g. the SSD tier streaming a
  // store file; not owned, one session at a time. nullptr = the weights' store in DRAM.
  m2cache::LayerSource* m2cache_source = nullptr;
  // A mixture of experts: the routing bias toward cached experts (MoeMlp::set_expert_bias), a
  // gamma in (0, 1]; 1 = none. It acts only where experts can be uncached (a streamed pack):
  // with resident weights every expert is cached and the routing is the plain one. Any other
  // value on a model without experts is InvalidArgument.
  float expert_bias = 1.0f;
  // Where a mixture's experts come from instead of the model's tensors or the streamed pack's
  // reader (tests: a source that wraps or replays one). Not owned; one session at a time.
  ExpertSource* experts = nullptr;
};

// Weight bytes the linear layers read, summed over tokens ("dense" = what a dense pass would
// have read), so achieved densities are used / dense.
struct WeightTraffic {
  uint64_t attn_used = 0, attn_dense = 0;
  uint64_t mlp_used = 0, mlp_dense = 0;
  uint64_t output_bytes = 0;  // output head + embedding rows, always dense
  uint64_t tokens = 0;
  double mlp_density() const { return mlp_dense ? static_cast<double>(mlp_used) / mlp_dense : 1.0; }
  double attn_density() const { return attn_dense ? static_cast<double>(attn_used) / attn_dense : 1.0; }
  double linear_density() const {
    uint64_t d = attn_dense + mlp_dense;
    return d ? static_cast<double>(attn_used + mlp_used) / d : 1.0;
  }
  uint64_t bytes_per_token() const {
    return tokens ? (attn_used + mlp_used + output_bytes) / tokens : 0;
  }
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

  // Continuous batching: one decode step of several sequences as one forward pass. Runs
  // tokens[i] at sessions[i]->pos() and appends it to that session's KV cache; the linear
  // layers multiply all the tokens at once (one read of the weights for the batch) and each
  // token attends to its own cache. logits[i] receives sessions[i]'s [vocab], valid until that
  // session's next call. The sessions must be distinct, over one Model, of one context size,
  // each Batchable(), at most sessions[0]->n_batch() of them; sessions[0] lends its buffers.
  // The result equals each session's own Forward of its token (within float rounding: the
  // batched product sums in another order).
  static Status DecodeBatch(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                            std::span<const float*> logits);
  // Whether DecodeBatch may take this session: its MLP is the dense or mixture-of-experts one
  // over resident weights (no sparsity policy, streamed pack or M2Cache, whose per-token state
  // belongs to one sequence) and no observer watches it.
  bool Batchable() const;

  // Forgets the sequence (the KV cache is reused from position 0).
  void Reset() { pos_ = 0; }
  // Goes back to position `pos` (0 <= pos <= pos()), keeping the cached positions before it, so
  // that a sequence sharing its first `pos` tokens with the cached one prefills only the rest.
  // False, with nothing changed, when a sliding-window layer's ring no longer holds the window
  // position `pos` reads (later positions overwrote it); Reset() and a whole prefill then.
  bool Rewind(int pos);
  int pos() const { return pos_; }
  int ctx() const { return kv_.ctx(); }
  const KvTypes& kv_types() const { return kv_.types(); }
  uint64_t kv_bytes() const { return kv_.bytes(); }
  int n_batch() const { return n_batch_; }
  const Model& model() const { return model_; }
  // Bytes this session allocated (KV cache + activations + transposed copies for sparsity).
  uint64_t allocated_bytes() const;

  // Watches the inputs of every linear layer (calibration, pruning statistics); nullptr = none.
  void set_observer(ActivationObserver* observer) { observer_ = observer; }
  const WeightTraffic& traffic() const { return traffic_; }
  void ResetTraffic() { traffic_ = {}; }
  const sparsity::SparsityPolicy* sparsity() const { return policy_.get(); }
  // The mixture-of-experts MLP of an MoE model (its last routing), else nullptr.
  const MoeMlp* moe() const { return moe_.get(); }
  // The M2Cache MLP (its counters), else nullptr.
  const m2cache::MixedMlp* m2cache() const { return mixed_.get(); }
  m2cache::MixedMlp* m2cache() { return mixed_.get(); }

 private:
  Session(const Model& model, ThreadPool* pool) : model_(model), pool_(pool) {}
  Status Allocate(const SessionOptions& options);

  // forward.cc: one function per block, in the order of the paper.
  Status Embed(std::span<const int32_t> tokens);
  Status Attention(int layer, int n);  // like Mlp, fails only on streamed weights
  Status Mlp(int layer, int n);  // fails only when streamed weights cannot be read
  void Output(int n, LogitsFor which);
  // Helpers of the blocks above.
  struct Projection {
    const TensorView* w;    // [rows_out, cols_in]
    const TensorView* w_t;  // [cols_in, rows_out] (sparse path only)
    float* y;               // [n, rows_out]
  };
  void Project(int layer, sparsity::Site site, const float* x, int64_t cols, int n,
               std::initializer_list<Projection> outs, uint64_t* used, uint64_t* dense);
  static void AddBias(float* y, const float* bias, int64_t n);
  void Observe(int layer, sparsity::Site site, const float* x, int64_t dim, int n);
  bool Prunes(sparsity::Site site) const { return policy_ && policy_->MayPrune(site); }

  const Model& model_;
  ThreadPool* pool_;
  KVCache kv_;
  int pos_ = 0;
  // The sequence of each token of the current call (n_batch entries): whose KV cache it reads
  // and appends to, at which position. Forward fills it with this session's own.
  struct Seq {
    KVCache* kv;
    int pos;
  };
  std::vector<Seq> seq_;
  int n_batch_ = 0;
  ActivationObserver* observer_ = nullptr;
  std::unique_ptr<sparsity::SparsityPolicy> policy_;
  std::unique_ptr<TransposedWeights> transposed_;
  StreamingWeights* streamed_ = nullptr;
  std::unique_ptr<MoeMlp> moe_;                  // MoE models only
  std::unique_ptr<m2cache::TierMemory> top_tier_;  // M2Cache's cache units live here
  std::unique_ptr<m2cache::MixedMlp> mixed_;       // M2Cache runs only
  std::unique_ptr<ExpertSource> experts_;        // where moe_ gets the experts (resident)
  ExpertSource* expert_source_ = nullptr;        // experts_, or a streamed pack's experts
  // The MLP of each layer (mlp_provider.h), chosen in Allocate; mlp_ owns them.
  std::vector<std::unique_ptr<MlpProvider>> mlp_;
  std::vector<MlpProvider*> mlp_of_layer_;
  sparsity::IndexList sel_in_, sel_units_, sel_down_;  // capacity = widest site
  WeightTraffic traffic_;

  // Activations for up to n_batch tokens, row-major [token, dim].
  AlignedBuffer x_;       // [n_batch, d_model] residual stream
  AlignedBuffer xb_;      // [n_batch, d_model] normalized input of a block
  AlignedBuffer q_;       // [n_batch, max q_dim]
  AlignedBuffer k_;       // [n_batch, max kv_dim]
  AlignedBuffer v_;       // [n_batch, max kv_dim]
  AlignedBuffer att_;     // [n_batch, max q_dim] attention output (heads concatenated)
  kernels::AttnWorkspace attn_ws_;             // attention's scratch (segments, scores)
  std::vector<kernels::AttnQuery> queries_;    // [n_batch * max n_head] one layer's queries
  AlignedBuffer gate_;    // [n_batch, max(d_ff, d_model)] (also the streamed MLP's output)
  AlignedBuffer up_;      // [n_batch, max d_ff]
  AlignedBuffer logits_;  // [n_batch, vocab]
};

}  // namespace weir::model
