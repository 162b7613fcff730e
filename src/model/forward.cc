// The Llama forward pass, one function per block, in the order of the paper. Shapes use
// n = tokens in this call, d = d_model, hd = head_dim, nh / nkv = query / key-value heads.
#include <cmath>
#include <cstring>

#include "kernels/matvec.h"
#include "kernels/ops.h"
#include "model/session.h"
#include "tensor/quantize.h"

namespace weir::model {

// x[t] = token_embd[token[t]]
void Session::Embed(std::span<const int32_t> tokens) {
  const auto& w = model_.weights();
  const int d = model_.config().d_model;
  float* x = x_.data<float>();  // [n, d]
  for (size_t t = 0; t < tokens.size(); ++t) DequantizeRow(w.token_embd, tokens[t], x + t * d);
}

// x += Wo · softmax(q·Kᵀ/√hd) · V, with q, k rotated by RoPE and K, V appended to the cache.
void Session::Attention(int layer, int n) {
  const auto& c = model_.config();
  const LayerWeights& w = model_.weights().layers[static_cast<size_t>(layer)];
  const int d = c.d_model, hd = c.head_dim;
  const int nh = c.layers[static_cast<size_t>(layer)].n_head;
  const int nkv = c.layers[static_cast<size_t>(layer)].n_head_kv;
  const int q_dim = nh * hd, kv_dim = nkv * hd;
  float* x = x_.data<float>();     // [n, d]
  float* xb = xb_.data<float>();   // [n, d]
  float* q = q_.data<float>();     // [n, q_dim]
  float* k = k_.data<float>();     // [n, kv_dim]
  float* v = v_.data<float>();     // [n, kv_dim]
  float* att = att_.data<float>(); // [n, q_dim]

  for (int t = 0; t < n; ++t) kernels::RmsNorm(xb + t * d, x + t * d, w.attn_norm, d, c.rms_eps);
  kernels::MatMul(w.wq, xb, n, q, pool_);
  kernels::MatMul(w.wk, xb, n, k, pool_);
  kernels::MatMul(w.wv, xb, n, v, pool_);
  for (int t = 0; t < n; ++t) {
    kernels::Rope(q + t * q_dim, nh, hd, c.rope_dim, pos_ + t, c.rope_theta, c.rope_style);
    kernels::Rope(k + t * kv_dim, nkv, hd, c.rope_dim, pos_ + t, c.rope_theta, c.rope_style);
    std::memcpy(kv_.k(layer, pos_ + t), k + t * kv_dim, sizeof(float) * kv_dim);
    std::memcpy(kv_.v(layer, pos_ + t), v + t * kv_dim, sizeof(float) * kv_dim);
  }

  // One (token, head) pair per work item; query head h reads key-value head h / (nh / nkv).
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int group = nh / nkv;
  ParallelFor(pool_, static_cast<size_t>(n * nh), [&](size_t begin, size_t end, int thread) {
    float* scores = scores_.data<float>() + static_cast<size_t>(thread) * kv_.ctx();
    for (size_t item = begin; item < end; ++item) {
      const int t = static_cast<int>(item) / nh, h = static_cast<int>(item) % nh;
      const int kvh = h / group, n_pos = pos_ + t + 1;  // causal: positions 0..pos+t
      const float* qh = q + t * q_dim + h * hd;
      for (int p = 0; p < n_pos; ++p) {
        const float* kp = kv_.k(layer, p) + kvh * hd;
        float s = 0;
        for (int i = 0; i < hd; ++i) s += qh[i] * kp[i];
        scores[p] = s * scale;
      }
      kernels::Softmax(scores, n_pos);
      float* out = att + t * q_dim + h * hd;
      std::memset(out, 0, sizeof(float) * hd);
      for (int p = 0; p < n_pos; ++p) {
        const float* vp = kv_.v(layer, p) + kvh * hd;
        const float a = scores[p];
        for (int i = 0; i < hd; ++i) out[i] += a * vp[i];
      }
    }
  });

  kernels::MatMul(w.wo, att, n, xb, pool_);  // xb = Wo · att
  for (int i = 0; i < n * d; ++i) x[i] += xb[i];
}

// x += W_down · (silu(W_gate · RMSNorm(x)) ⊙ (W_up · RMSNorm(x)))
void Session::Mlp(int layer, int n) {
  const auto& c = model_.config();
  const LayerWeights& w = model_.weights().layers[static_cast<size_t>(layer)];
  const int d = c.d_model, d_ff = c.layers[static_cast<size_t>(layer)].d_ff;
  float* x = x_.data<float>();      // [n, d]
  float* xb = xb_.data<float>();    // [n, d]
  float* gate = gate_.data<float>();  // [n, d_ff]
  float* up = up_.data<float>();      // [n, d_ff]

  for (int t = 0; t < n; ++t) kernels::RmsNorm(xb + t * d, x + t * d, w.ffn_norm, d, c.rms_eps);
  kernels::MatMul(w.w_gate, xb, n, gate, pool_);
  kernels::MatMul(w.w_up, xb, n, up, pool_);
  kernels::SiluMul(gate, up, static_cast<int64_t>(n) * d_ff);
  kernels::MatMul(w.w_down, gate, n, xb, pool_);  // xb = W_down · h
  for (int i = 0; i < n * d; ++i) x[i] += xb[i];
}

// logits = W_out · RMSNorm(x), for every token or only the last.
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
}

}  // namespace weir::model
