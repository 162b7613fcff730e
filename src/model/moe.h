// The mixture-of-experts MLP (ArchSpec::moe rows: Mixtral, Qwen3 MoE), written once for every
// way of holding the experts' weights:
//   logits  = W_router · x                         [n_expert]       (ffn_gate_inp)
//   chosen  = the n_expert_used largest logits     (ties: the lower expert id)
//   w_j     = softmax over the chosen logits       (expert_weights_norm; Mixtral, Qwen3's
//             norm_topk_prob), or the chosen experts' share of the softmax over all n_expert
//   y       = Σ_j w_j · W_down,e_j · (act(W_gate,e_j · x) ⊙ (W_up,e_j · x))
// Each expert is a dense gated MLP of width d_ff (the layer's d_ff), a slice of the stacked
// tensors ffn_{gate,up,down}_exps [n_expert, rows, cols]. A batch of tokens is grouped by expert,
// so prefill reads each chosen expert once, with matrix products over the tokens that chose it.
//
// Where the experts' bytes come from is an ExpertSource: ResidentExperts slices the model's
// tensors; a streamed source (the MoE half of weir pack) will hand out experts read from storage
// into its cache. MoeMlp::Forward tells the source every expert a step needs (Prepare) before it
// asks for the first one (Acquire), and gives each back (Release) as soon as its product is done.
//
// Thread safety: RouteToken and ExpertSlice are free functions. An MoeMlp and an ExpertSource are
// used by one thread at a time (the session's); Forward runs its products on the pool it is given.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "format/model_file.h"
#include "kernels/ops.h"
#include "model/activation_observer.h"
#include "model/llama_weights.h"
#include "sparsity/index_list.h"
#include "sparsity/policy.h"
#include "tensor/tensor_view.h"

namespace weir::model {

struct ExpertChoice {
  int32_t expert = 0;
  float weight = 0;
};

// Routes one token: out[0..k) = the k experts with the largest logits[0..n_expert), in
// descending order of logit (ties: lower expert id first; a NaN logit ranks below every number),
// with their weights (see the top of this file). Requires 1 <= k <= n_expert.
// `select_bias`, when given ([n_expert]), is added to each logit for the choice only: the k
// largest logits[e] + select_bias[e] are chosen (in that order), and their weights are still
// computed from the unbiased logits. The routing bias toward cached experts passes ln(gamma) for
// the experts not cached and 0 for the others: the ranking of their probabilities scaled by gamma.
void RouteToken(const float* logits, int n_expert, int k, bool renormalize, ExpertChoice* out,
                const float* select_bias = nullptr);

// Expert e of a stacked row-major tensor [n_expert, rows, cols], as a 2-D view [rows, cols].
TensorView ExpertSlice(const TensorView& stacked, int e);

// One expert's weights.
struct ExpertWeights {
  TensorView w_gate;  // [d_ff, d_model]
  TensorView w_up;    // [d_ff, d_model]
  TensorView w_down;  // [d_model, d_ff]
  // An experts pack with channel records (`weir pack --layout experts-columns`) gives, instead
  // of w_gate and w_up, the channel records as rows of d_ff values: channel i's gate^T row
  // (column i of W_gate) at row 2 k and its up^T row at 2 k + 1, where k = i (in_compact false:
  // every channel is there) or k = i's position among the channels asked of
  // ExpertSource::AcquireChannels (in_compact true: only those are there).
  TensorView w_in_t;  // [2 * channels, d_ff]
  bool in_compact = false;
  bool channel_records() const { return w_in_t.data != nullptr; }
  uint64_t nbytes() const {
    return channel_records() ? w_in_t.nbytes() + w_down.nbytes()
                             : w_gate.nbytes() + w_up.nbytes() + w_down.nbytes();
  }
};

// Where the routed experts' weights come from (the seam the streaming half plugs into).
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // The experts the tokens of one step chose in `layer`, ascending, each once, before any
  // Acquire of that step: a streamed source starts all their reads here.
  virtual Status Prepare(int layer, std::span<const int32_t> experts) {
    (void)layer;
    (void)experts;
    return Status::Ok();
  }
  // Expert e of `layer`; its views stay valid until Release(layer, e).
  virtual Result<ExpertWeights> Acquire(int layer, int e) = 0;
  virtual void Release(int layer, int e) {
    (void)layer;
    (void)e;
  }
  // Preloading (ActiveFlow §3): a source that reads experts from storage may take a prediction
  // of the experts `layer` will choose (ascending, each once), made before that layer runs, and
  // start reading them. MoeMlp makes one per decode step when predicts() says it is wanted.
  virtual bool predicts() const { return false; }
  virtual void Predict(int layer, std::span<const int32_t> experts) {
    (void)layer;
    (void)experts;
  }
  // Channel records (ExpertWeights::w_in_t): Acquire then gives every channel's records, and
  // AcquireChannels(layer, e, channels) at least those of `channels` (ascending, distinct) and
  // W_down, reading only them from storage when the expert is not in memory. Release(layer, e)
  // after either. MoeMlp takes each token's kept channels this way when a sparsity policy runs.
  virtual bool channel_records() const { return false; }
  virtual Result<ExpertWeights> AcquireChannels(int layer, int e,
                                                std::span<const int32_t> channels) {
    (void)channels;
    return Acquire(layer, e);
  }
  // Which experts of `layer` are in memory now: bit e % 64 of word e / 64 is set when expert e
  // is cached, valid until the next call on this source; nullptr = every expert is (resident
  // weights). Not an access (no policy counts it). The routing bias toward cached experts reads
  // it once per step, before routing.
  virtual const uint64_t* CachedExperts(int layer) {
    (void)layer;
    return nullptr;
  }
};

// The experts of a resident model: slices of its ffn_*_exps tensors.
class ResidentExperts final : public ExpertSource {
 public:
  explicit ResidentExperts(const LlamaWeights& weights) : weights_(weights) {}
  Result<ExpertWeights> Acquire(int layer, int e) override;

 private:
  const LlamaWeights& weights_;
};

// The MoE MLP's computation and its buffers, allocated once for up to n_batch tokens.
class MoeMlp {
 public:
  static Result<std::unique_ptr<MoeMlp>> Create(const format::LlamaConfig& config, int n_batch);

  // y[t] = MoE(x[t]) for t < n (n <= n_batch) in `layer`, whose router is `router`
  // [n_expert, d_model]. x and y are [n, d_model] and must not overlap. Fails only when the
  // source cannot provide an expert. *bytes_per_token_sum += the weight bytes each token's
  // computation reads (router + its k experts), summed over the n tokens.
  // `next_router`, when set (the next layer's router) and n == 1, predicts the next layer's
  // experts from this layer's x (consecutive layers' inputs are similar) and hands them to
  // experts->Predict once this layer's own reads are queued.
  Status Forward(int layer, const TensorView& router, const float* x, int n, float* y,
                 ExpertSource* experts, ThreadPool* pool, uint64_t* bytes_per_token_sum,
                 const TensorView* next_router = nullptr);

  // The last Forward's routing: n_expert_used choices per token, token-major.
  std::span<const ExpertChoice> routing() const { return {choices_.data(), last_n_ * k_}; }
  // Its router logits, [n, n_expert] token-major (how close each choice was).
  std::span<const float> router_logits() const {
    return {logits_.data<float>(), last_n_ * static_cast<size_t>(n_expert_)};
  }
  // The bytes the last Forward would have read with dense experts (router + the chosen experts,
  // summed over its tokens): equal to its bytes_per_token_sum unless a sparsity policy pruned.
  uint64_t last_dense_bytes() const { return last_dense_bytes_; }
  int n_expert() const { return n_expert_; }
  int n_expert_used() const { return k_; }

  // Routing bias toward cached experts (DIP-CA's cache-aware rescaling, applied to the router;
  // docs/moe.md): with gamma < 1 each step reads experts->CachedExperts(layer) before routing and
  // chooses the top k of the router's probabilities with those of the experts not cached scaled
  // by gamma; the chosen experts' weights come from the unbiased logits. gamma = 1 (the default)
  // is the plain routing. InvalidArgument unless 0 < gamma <= 1.
  Status set_expert_bias(float gamma);
  float expert_bias() const { return gamma_; }
  // Counted over the steps in which the bias acted (gamma < 1 and a source with uncached
  // experts): the choices made, and those the unbiased routing would not have made.
  struct BiasStats {
    uint64_t choices = 0;
    uint64_t changed = 0;
  };
  const BiasStats& bias_stats() const { return bias_stats_; }

  // Sparsity inside each chosen expert (`--sparsity`): with a policy set, every chosen expert is
  // computed per token as the sparse MLP computes a dense layer's MLP (sparse_mlp.cc), with the
  // layer's policy (the layer index is the MoE layer's; every expert of a layer shares the
  // policy's state for that layer):
  //   in    = SelectInput(l, kMlpIn, x)          input columns of the expert's gate and up
  //   units = all, or SelectUnits(l, g or u)     rows of gate / up computed
  //   h     = glu(g, u) on the units, 0 elsewhere
  //   down  = SelectDown(l, h, units)            columns of the expert's down
  //   y_e   = W_down,e[:, down] · h[down]
  // The products run over the expert's row-major slices with the unselected inputs (columns of
  // gate/up) and units (columns of down) set to zero, so the numbers are those of the pruned
  // expert; the bytes counted are those the selection reads (rows times the row bytes of each
  // kept column or row). No transposed copies of the experts exist, so it is not faster than the
  // dense experts (docs/moe.md). The policy must not prune attention; null = dense experts.
  // `policy` is not owned and must outlive the MoeMlp's use of it.
  Status set_sparsity(sparsity::SparsityPolicy* policy);
  // Where each chosen expert's activations are reported, per (token, expert), as the dense MLP
  // reports a layer's (for `weir calibrate`, whose TEAL/CATS thresholds then pool a layer's
  // experts): OnGate(layer, g) with the gate pre-activation and OnInput(layer, kMlpDown, h) with
  // the GLU output. `observer` points at the session's observer slot (it may hold null).
  void set_observer(ActivationObserver* const* observer) { observer_ = observer; }
  uint64_t allocated_bytes() const;

 private:
  MoeMlp() = default;

  int n_expert_ = 0, k_ = 0, d_model_ = 0;
  bool renormalize_ = true;
  kernels::Glu glu_ = kernels::Glu::kSilu;  // the architecture's activation
  std::vector<int> d_ff_;  // per layer
  size_t last_n_ = 0;
  uint64_t last_dense_bytes_ = 0;

  AlignedBuffer logits_;               // [n_batch, n_expert]
  AlignedBuffer xg_;                   // [n_batch, d_model] the tokens routed to one expert
  AlignedBuffer yg_;                   // [n_batch, d_model] their expert outputs
  AlignedBuffer gate_, up_;            // [n_batch, max d_ff]
  std::vector<ExpertChoice> choices_;  // [n_batch * k]
  std::vector<int32_t> count_;         // [n_expert] tokens per expert in this step
  std::vector<int32_t> start_;         // [n_expert + 1] first slot of each expert
  std::vector<int32_t> slot_token_;    // [n_batch * k] token of each (expert, token) slot
  std::vector<float> slot_weight_;     // [n_batch * k] its routing weight
  std::vector<int32_t> active_;        // experts chosen by at least one token, ascending
  AlignedBuffer next_logits_;          // [n_expert] the next layer's router on this x
  std::vector<ExpertChoice> next_choices_;  // [k]
  std::vector<int32_t> predicted_;     // the next layer's predicted experts, ascending
  float gamma_ = 1.0f;                 // routing bias toward cached experts (1 = none)
  std::vector<float> select_bias_;     // [n_expert] 0 or ln(gamma_), for RouteToken
  std::vector<ExpertChoice> unbiased_; // [k] the unbiased choice, for bias_stats_
  BiasStats bias_stats_;

  // Sparsity inside experts (set_sparsity).
  Status SparseExpert(int layer, const ExpertWeights& w, const float* x, float* y, ThreadPool* pool,
                      uint64_t* bytes);
  // y = expert(x) for one token over channel records (ExpertWeights::w_in_t), DIP's dataflow as
  // the column streamer computes a dense layer (streaming_columns.h): g, u = the gathered
  // product over the channels sel_in_ keeps (all without a policy), h = glu(g, u), down =
  // SelectDown(h) (all without a policy) applied by zeroing h as SparseExpert does, y = W_down h.
  Status ChannelExpert(int layer, const ExpertWeights& w, const float* x, float* y,
                       ThreadPool* pool, uint64_t* bytes);
  // Every (token, chosen expert) of the step over channel records (Forward's loop for them).
  Status ForwardChannels(int layer, const float* x, float* y, ExpertSource* experts,
                         ThreadPool* pool, uint64_t* bytes);
  // y = W_down h for h = g with the units SelectDown left out zeroed (u: scratch); adds the
  // bytes of the kept units' share of W_down to *bytes. Both sparse expert paths end here.
  void DownProduct(const ExpertWeights& w, int d_ff, float* g, float* u, float* y, ThreadPool* pool,
                   uint64_t* bytes) const;
  std::vector<int32_t> idx_gate_, idx_up_;  // [d_model] rows of the kept channels' records
  std::vector<int32_t> all_channels_;       // [d_model] 0, 1, ... (every channel kept)
  AlignedBuffer rows_x_;                    // [2 * d_model] their coefficients, by row
  sparsity::SparsityPolicy* policy_ = nullptr;
  ActivationObserver* const* observer_ = nullptr;
  sparsity::IndexList sel_in_, sel_units_, sel_down_;
  AlignedBuffer xs_;  // [d_model] one token's input with the unselected columns zeroed
};

}  // namespace weir::model
