// LlamaWeights: typed, named views of one model's weights, bound from a ModelFile through its
// architecture's tensor table (format/arch_spec.h). Pointers are non-owning; the ModelFile
// (mapping or buffers) owns the bytes. Tensors an architecture does not have (or an optional one
// the file leaves out) are null pointers / invalid views, and the forward pass skips them.
#pragma once

#include <vector>

#include "base/status.h"
#include "format/model_file.h"
#include "tensor/tensor_view.h"

namespace weir::model {

struct LayerWeights {
  const float* attn_norm = nullptr;       // [d_model]
  TensorView wq;                          // [n_head * head_dim, d_model]
  TensorView wk;                          // [n_head_kv * head_dim, d_model]
  TensorView wv;                          // [n_head_kv * head_dim, d_model]
  const float* bq = nullptr;              // [n_head * head_dim]     (Qwen2; optional)
  const float* bk = nullptr;              // [n_head_kv * head_dim]
  const float* bv = nullptr;              // [n_head_kv * head_dim]
  const float* attn_q_norm = nullptr;     // [head_dim]  QK-norm (Gemma 3, Qwen3)
  const float* attn_k_norm = nullptr;     // [head_dim]
  TensorView wo;                          // [d_model, n_head * head_dim]
  const float* post_attn_norm = nullptr;  // [d_model]   (Gemma 3)
  const float* ffn_norm = nullptr;        // [d_model]
  TensorView w_gate;                      // [d_ff, d_model]
  TensorView w_up;                        // [d_ff, d_model]
  TensorView w_down;                      // [d_model, d_ff]
  const float* post_ffn_norm = nullptr;   // [d_model]   (Gemma 3)
  // Mixture of experts (ArchSpec::moe) instead of w_gate / w_up / w_down; model/moe.h.
  TensorView ffn_gate_inp;                // [n_expert, d_model]        the router
  TensorView w_gate_exps;                 // [n_expert, d_ff, d_model]
  TensorView w_up_exps;                   // [n_expert, d_ff, d_model]
  TensorView w_down_exps;                 // [n_expert, d_model, d_ff]

  // Bytes of the dense MLP's three matrices: what one token's dense MLP reads.
  uint64_t mlp_bytes() const { return w_gate.nbytes() + w_up.nbytes() + w_down.nbytes(); }
};

struct LlamaWeights {
  TensorView token_embd;  // [vocab, d_model]
  std::vector<LayerWeights> layers;
  const float* output_norm = nullptr;  // [d_model]
  TensorView output;                   // [vocab, d_model] (== token_embd when tied)
  const float* rope_freqs = nullptr;   // [rope_dim / 2] RoPE frequency factors (Llama 3.1)
};
using ModelWeights = LlamaWeights;

// Binds the tensors of `file`'s architecture table (the reader validated them).
Result<LlamaWeights> BindWeights(const format::ModelFile& file);

}  // namespace weir::model
