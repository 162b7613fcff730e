// LlamaWeights: typed, named views of one Llama model's weights, bound from a ModelFile.
// Pointers are non-owning; the ModelFile (mapping or buffers) owns the bytes.
#pragma once

#include <vector>

#include "base/status.h"
#include "format/model_file.h"
#include "tensor/tensor_view.h"

namespace weir::model {

struct LayerWeights {
  const float* attn_norm;  // [d_model]
  TensorView wq;           // [n_head * head_dim, d_model]
  TensorView wk;           // [n_head_kv * head_dim, d_model]
  TensorView wv;           // [n_head_kv * head_dim, d_model]
  TensorView wo;           // [d_model, n_head * head_dim]
  const float* ffn_norm;   // [d_model]
  TensorView w_gate;       // [d_ff, d_model]
  TensorView w_up;         // [d_ff, d_model]
  TensorView w_down;       // [d_model, d_ff]
};

struct LlamaWeights {
  TensorView token_embd;      // [vocab, d_model]
  std::vector<LayerWeights> layers;
  const float* output_norm;   // [d_model]
  TensorView output;          // [vocab, d_model] (== token_embd when tied)
};

// Binds the canonical tensors of `file` (already validated by the reader).
Result<LlamaWeights> BindWeights(const format::ModelFile& file);

}  // namespace weir::model
