// The decoder forward pass, one function per block, in the order of the paper. Shapes use
// n = tokens in this call, d = d_model, hd = head_dim, nh / nkv = query / key-value heads.
//
// One pass serves every architecture of format/arch_spec.h: Llama's block is the default, and
// the switches of the config's row add what the others have -- q/k/v biases (Qwen2), QK-norm
// (Gemma 3, Qwen3), post-norms on each block's output, GeGLU, the embedding scale, sliding-window
// layers with their own RoPE base, attention logit soft-capping (Gemma 2) and final logit
// soft-capping (Gemma 2/3); RoPE takes linear scaling (positions / rope.scaling.factor) and Llama
// 3.1's per-pair frequency factors. A switch that is off costs a null-pointer test. A
// mixture-of-experts row's MLP is the MoE provider (moe_mlp.cc over model/moe.h's MoeMlp).
//
// Dynamic activation sparsity enters only through Project (the input columns of a linear layer
// chosen per token) and the MLP's provider (mlp_provider.h: the sparse one selects units and
// down columns, DIP §3 / docs/sparsity.md); without a policy both are the dense batched
// products. A weir pack's MLP is the streamed provider's (docs/streaming.md).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/llama_limits.h"
#include "kernels/gather.h"
#include "kernels/matvec.h"
#include "kernels/ops.h"
#include "model/session.h"
#include "tensor/quantize.h"

namespace weir::model {

using sparsity::Site;

// x[t] = token_embd[token[t]] * embed_scale   (embed_scale: 1, or sqrt(d_model) for Gemma)
// A streamed pack may read the table's rows instead of holding it (StreamingWeights::
// EmbeddingRows, a batch of tokens at a time).
Status Session::Embed(std::span<const int32_t> tokens) {
  const auto& w = model_.weights();
  const auto& c = model_.config();
  const int d = c.d_model;
  float* x = x_.data<float>();  // [n, d]
  if (streamed_ != nullptr && streamed_->embedding_streamed()) {
    const size_t batch = StreamPlan::kEmbeddingBatchRows;
    for (size_t t0 = 0; t0 < tokens.size(); t0 += batch) {
      const std::span<const int32_t> part = tokens.subspan(t0, std::min(batch, tokens.size() - t0));
      WEIR_ASSIGN_OR_RETURN(const std::byte* rows, streamed_->EmbeddingRows(part));
      const TensorView view{w.token_embd.dtype,
                            Shape{static_cast<int64_t>(part.size()), w.token_embd.cols()}, rows};
      for (size_t k = 0; k < part.size(); ++k)
        DequantizeRow(view, static_cast<int64_t>(k), x + (t0 + k) * d);
    }
  } else {
    for (size_t t = 0; t < tokens.size(); ++t) DequantizeRow(w.token_embd, tokens[t], x + t * d);
  }
  if (c.embed_scale != 1.0f) {
    for (size_t i = 0; i < tokens.size() * d; ++i) x[i] *= c.embed_scale;
  }
  traffic_.output_bytes += tokens.size() * w.token_embd.row_bytes();
  return Status::Ok();
}

// x += PostNorm(Wo · softmax(SoftCap(scale · q·Kᵀ)) · V), with q = RoPE(QkNorm(Wq·xb + bq)), k
// likewise, xb = RMSNorm(x), K and V appended to the cache; SoftCap(s) = cap · tanh(s / cap)
// (Gemma 2) or s. A sliding-window layer attends to the last `sliding_window` positions only (its
// own included) and has its own RoPE base (and, Gemma 3, no linear RoPE scaling:
// LlamaConfig::RopeFreqScale).
// Token t's keys and values are those of its sequence, seq_[t]: this session's cache at
// pos() + t, or in a batched decode (DecodeBatch) the cache and position of the t-th session.
Status Session::Attention(int layer, int n) {
  const auto& c = model_.config();
  const LayerWeights& w = model_.weights().layers[static_cast<size_t>(layer)];
  const LayerTransposed* wt = transposed_ ? &transposed_->layer(layer) : nullptr;
  const int d = c.d_model, hd = c.head_dim;
  const int nh = c.layers[static_cast<size_t>(layer)].n_head;
  const int nkv = c.layers[static_cast<size_t>(layer)].n_head_kv;
  const int q_dim = nh * hd, kv_dim = nkv * hd;
  const float theta = c.RopeTheta(layer);
  const float rope_scale = c.RopeFreqScale(layer);        // linear scaling: 1 / factor, or 1
  const float* rope_freqs = model_.weights().rope_freqs;  // [rope_dim / 2] or null
  float* x = x_.data<float>();     // [n, d]
  float* xb = xb_.data<float>();   // [n, d]
  float* q = q_.data<float>();     // [n, q_dim]
  float* k = k_.data<float>();     // [n, kv_dim]
  float* v = v_.data<float>();     // [n, kv_dim]
  float* att = att_.data<float>(); // [n, q_dim]

  if (observer_) observer_->OnLayerBegin(layer, n);
  // A streamed pack pins this layer's attention weights (w.wq .. w.wo point into them) until
  // the end of the block.
  if (streamed_) WEIR_RETURN_IF_ERROR(streamed_->AcquireAttention(layer));
  for (int t = 0; t < n; ++t) kernels::RmsNorm(xb + t * d, x + t * d, w.attn_norm, d, c.rms_eps);
  Observe(layer, Site::kAttnIn, xb, d, n);
  Project(layer, Site::kAttnIn, xb, d, n,
          {{&w.wq, wt ? &wt->wq_t : nullptr, q}, {&w.wk, wt ? &wt->wk_t : nullptr, k},
           {&w.wv, wt ? &wt->wv_t : nullptr, v}},
          &traffic_.attn_used, &traffic_.attn_dense);
  for (int t = 0; t < n; ++t) {
    float* qt = q + t * q_dim;    // [nh, hd]
    float* kt = k + t * kv_dim;   // [nkv, hd]
    float* vt = v + t * kv_dim;   // [nkv, hd]
    if (w.bq) AddBias(qt, w.bq, q_dim);
    if (w.bk) AddBias(kt, w.bk, kv_dim);
    if (w.bv) AddBias(vt, w.bv, kv_dim);
    if (w.attn_q_norm) {  // QK-norm: RMSNorm over each head's hd dims, one weight for all heads
      for (int h = 0; h < nh; ++h) kernels::RmsNorm(qt + h * hd, qt + h * hd, w.attn_q_norm, hd, c.rms_eps);
    }
    if (w.attn_k_norm) {
      for (int h = 0; h < nkv; ++h) kernels::RmsNorm(kt + h * hd, kt + h * hd, w.attn_k_norm, hd, c.rms_eps);
    }
    KVCache& cache = *seq_[static_cast<size_t>(t)].kv;
    const int pos = seq_[static_cast<size_t>(t)].pos;
    kernels::Rope(qt, nh, hd, c.rope_dim, pos, theta, c.rope_style, rope_scale, rope_freqs);
    kernels::Rope(kt, nkv, hd, c.rope_dim, pos, theta, c.rope_style, rope_scale, rope_freqs);
    // A quantized cache holds rotated heads (kv_cache.h): q.k is unchanged when both turn, and
    // the output turns back below.
    if (cache.rotate_k() > 0) {
      kernels::HadamardRotate(qt, q_dim, cache.rotate_k());
      kernels::HadamardRotate(kt, kv_dim, cache.rotate_k());
    }
    if (cache.rotate_v() > 0) kernels::HadamardRotate(vt, kv_dim, cache.rotate_v());
    cache.Store(layer, pos, kt, vt);
  }

  // att = softmax(SoftCap(scale · q·Kᵀ)) · V for every (token, head), over the cache in its
  // types (kernels/attention.h). Query head h reads key-value head h / (nh / nkv); token t at
  // position p sees positions [first, p]: all of them, or the window's. Queries are ordered by
  // key-value head, then token, then head of the group, so a prefill call's queries of one
  // key-value head share each pass over its keys and values.
  const int group = nh / nkv;
  const int window = c.IsSliding(layer) ? c.sliding_window : 0;
  size_t n_queries = 0;
  for (int kvh = 0; kvh < nkv; ++kvh) {
    for (int t = 0; t < n; ++t) {
      const Seq& sq = seq_[static_cast<size_t>(t)];
      const int first = window > 0 ? std::max(0, sq.pos + 1 - window) : 0;
      for (int g = 0; g < group; ++g) {
        const int h = kvh * group + g;
        queries_[n_queries++] = kernels::AttnQuery{q + t * q_dim + h * hd, &sq.kv->keys(layer),
                                                   &sq.kv->values(layer), kvh, first, sq.pos,
                                                   att + t * q_dim + h * hd};
      }
    }
  }
  kernels::Attend(std::span<const kernels::AttnQuery>(queries_.data(), n_queries),
                  kernels::AttnShape{hd, c.AttnScale(), c.attn_logit_softcap}, &attn_ws_, pool_);
  for (int t = 0; t < n; ++t) {
    const int rot = seq_[static_cast<size_t>(t)].kv->rotate_v();
    if (rot > 0) kernels::HadamardRotate(att + t * q_dim, q_dim, rot);
  }

  Observe(layer, Site::kAttnOut, att, q_dim, n);
  Project(layer, Site::kAttnOut, att, q_dim, n, {{&w.wo, wt ? &wt->wo_t : nullptr, xb}},
          &traffic_.attn_used, &traffic_.attn_dense);  // xb = Wo · att
  if (w.post_attn_norm) {
    for (int t = 0; t < n; ++t) kernels::RmsNorm(xb + t * d, xb + t * d, w.post_attn_norm, d, c.rms_eps);
  }
  for (int i = 0; i < n * d; ++i) x[i] += xb[i];
  if (streamed_) streamed_->ReleaseAttention();
  return Status::Ok();
}

// x += PostNorm(MLP(RMSNorm(x))), where the layer's provider (mlp_provider.h) computes
// MLP(x) = W_down · (act(W_gate · x) ⊙ (W_up · x)), act = SiLU or GELU: dense, sparse (the
// policy's columns per token) or streamed from a weir pack.
Status Session::Mlp(int layer, int n) {
  const auto& c = model_.config();
  const LayerWeights& w = model_.weights().layers[static_cast<size_t>(layer)];
  const int d = c.d_model;
  float* x = x_.data<float>();    // [n, d]
  float* xb = xb_.data<float>();  // [n, d]

  for (int t = 0; t < n; ++t) kernels::RmsNorm(xb + t * d, x + t * d, w.ffn_norm, d, c.rms_eps);
  Observe(layer, Site::kMlpIn, xb, d, n);
  WEIR_RETURN_IF_ERROR(mlp_of_layer_[static_cast<size_t>(layer)]->Forward(layer, xb, n));
  if (observer_ != nullptr && moe_ != nullptr) {
    const int k = moe_->n_expert_used();
    std::span<const ExpertChoice> r = moe_->routing();
    int32_t ids[format::limits::kMaxExperts];
    for (int t = 0; t < n; ++t) {
      for (int j = 0; j < k; ++j) ids[j] = r[static_cast<size_t>(t) * k + j].expert;
      observer_->OnExperts(layer, ids, k);
    }
  }
  if (w.post_ffn_norm) {
    for (int t = 0; t < n; ++t) kernels::RmsNorm(xb + t * d, xb + t * d, w.post_ffn_norm, d, c.rms_eps);
  }
  for (int i = 0; i < n * d; ++i) x[i] += xb[i];
  return Status::Ok();
}

// logits = SoftCap(W_out · RMSNorm(x)), for every token or only the last.
void Session::Output(int n, LogitsFor which) {
  const auto& c = model_.config();
  const auto& w = model_.weights();
  const int d = c.d_model;
  float* x = x_.data<float>();
  float* xb = xb_.data<float>();
  float* logits = logits_.data<float>();  // [n or 1, vocab]
  const int first = which == LogitsFor::kAll ? 0 : n - 1;
  const int count = n - first;
  for (int t = 0; t < count; ++t) kernels::RmsNorm(xb + t * d, x + (first + t) * d, w.output_norm, d, c.rms_eps);
  kernels::MatMul(w.output, xb, count, logits, pool_);
  if (c.final_logit_softcap > 0) {
    kernels::SoftCap(logits, static_cast<int64_t>(count) * c.vocab_size, c.final_logit_softcap);
  }
  traffic_.output_bytes += w.output.nbytes();
}

// ---------------------------------------------------------------------------------------------
// Sparse helpers.

// y = W · x for every projection in `outs` (they share the input x [n, cols]). With a policy that
// prunes `site`, the active input columns are chosen per token and only those columns of W are
// read (gathered product over W's transposed copy).
void Session::Project(int layer, Site site, const float* x, int64_t cols, int n,
                      std::initializer_list<Projection> outs, uint64_t* used, uint64_t* dense) {
  uint64_t dense_bytes = 0;
  for (const auto& o : outs) dense_bytes += o.w->nbytes();
  *dense += dense_bytes * static_cast<uint64_t>(n);
  if (!Prunes(site)) {
    const TensorView* ws[4];
    float* ys[4];
    size_t count = 0;
    WEIR_CHECK(outs.size() <= 4);
    for (const auto& o : outs) {
      ws[count] = o.w;
      ys[count++] = o.y;
    }
    kernels::MatMulShared(std::span<const TensorView* const>(ws, count), x, n, ys, pool_);
    *used += dense_bytes * static_cast<uint64_t>(n);
    return;
  }
  for (int t = 0; t < n; ++t) {
    const float* xt = x + t * cols;
    policy_->SelectInput(layer, site, std::span<const float>(xt, static_cast<size_t>(cols)), nullptr, &sel_in_);
    for (const auto& o : outs) {
      float* yt = o.y + static_cast<int64_t>(t) * o.w->rows();
      if (sel_in_.all()) {
        kernels::MatVec(*o.w, xt, yt, pool_);
        *used += o.w->nbytes();
      } else {
        auto idx = sel_in_.indices();
        kernels::GatherMatVecCols(*o.w_t, idx.data(), static_cast<int64_t>(idx.size()), xt, yt, pool_);
        *used += idx.size() * o.w_t->row_bytes();
      }
    }
  }
}

void Session::AddBias(float* y, const float* bias, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += bias[i];
}

void Session::Observe(int layer, Site site, const float* x, int64_t dim, int n) {
  if (!observer_) return;
  for (int t = 0; t < n; ++t) observer_->OnInput(layer, site, x + t * dim, dim);
}

}  // namespace weir::model
