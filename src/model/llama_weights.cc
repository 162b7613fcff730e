#include "model/llama_weights.h"

#include <string>

namespace weir::model {

namespace {

using format::TensorRole;
using format::TensorSpec;

Result<TensorView> Get(const format::ModelFile& file, const std::string& name) {
  const TensorView* v = file.Find(name);
  if (v == nullptr)
    return Status::NotFound(StrFormat("%s: missing tensor %s", file.path.c_str(), name.c_str()));
  return *v;
}

Result<const float*> GetF32(const format::ModelFile& file, const std::string& name) {
  WEIR_ASSIGN_OR_RETURN(TensorView v, Get(file, name));
  if (v.dtype != DType::kF32) {
    return Status::Unsupported(StrFormat("%s: norm tensor %s has type %s, expected F32",
                                         file.path.c_str(), name.c_str(), DTypeName(v.dtype)));
  }
  return v.f32();
}

// Where a role's tensor goes: a weight view or an F32 vector (norm, bias) of a layer.
TensorView* LayerView(LayerWeights& L, TensorRole r) {
  switch (r) {
    case TensorRole::kAttnQ:
      return &L.wq;
    case TensorRole::kAttnK:
      return &L.wk;
    case TensorRole::kAttnV:
      return &L.wv;
    case TensorRole::kAttnOutput:
      return &L.wo;
    case TensorRole::kFfnGate:
      return &L.w_gate;
    case TensorRole::kFfnUp:
      return &L.w_up;
    case TensorRole::kFfnDown:
      return &L.w_down;
    case TensorRole::kFfnGateInp:
      return &L.ffn_gate_inp;
    case TensorRole::kFfnGateExps:
      return &L.w_gate_exps;
    case TensorRole::kFfnUpExps:
      return &L.w_up_exps;
    case TensorRole::kFfnDownExps:
      return &L.w_down_exps;
    default:
      return nullptr;
  }
}

const float** LayerVector(LayerWeights& L, TensorRole r) {
  switch (r) {
    case TensorRole::kAttnNorm:
      return &L.attn_norm;
    case TensorRole::kAttnQBias:
      return &L.bq;
    case TensorRole::kAttnKBias:
      return &L.bk;
    case TensorRole::kAttnVBias:
      return &L.bv;
    case TensorRole::kAttnQNorm:
      return &L.attn_q_norm;
    case TensorRole::kAttnKNorm:
      return &L.attn_k_norm;
    case TensorRole::kPostAttnNorm:
      return &L.post_attn_norm;
    case TensorRole::kFfnNorm:
      return &L.ffn_norm;
    case TensorRole::kPostFfnNorm:
      return &L.post_ffn_norm;
    default:
      return nullptr;
  }
}

}  // namespace

Result<LlamaWeights> BindWeights(const format::ModelFile& file) {
  const format::ArchSpec& arch = *file.config.arch;
  LlamaWeights w;
  WEIR_ASSIGN_OR_RETURN(w.token_embd, Get(file, "token_embd.weight"));
  WEIR_ASSIGN_OR_RETURN(w.output_norm, GetF32(file, "output_norm.weight"));
  if (file.config.tied_output || file.Find("output.weight") == nullptr) {
    w.output = w.token_embd;
  } else {
    WEIR_ASSIGN_OR_RETURN(w.output, Get(file, "output.weight"));
  }
  for (const TensorSpec& t : arch.tensors) {  // optional global vectors of the table
    if (t.per_layer || t.role != TensorRole::kRopeFreqs) continue;
    const std::string name = format::TensorName(t, -1);
    if (file.Find(name) != nullptr) {
      WEIR_ASSIGN_OR_RETURN(w.rope_freqs, GetF32(file, name));
    }
  }
  w.layers.resize(static_cast<size_t>(file.config.n_layers));
  for (int l = 0; l < file.config.n_layers; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    for (const TensorSpec& t : arch.tensors) {
      if (!t.per_layer) continue;
      const std::string name = format::TensorName(t, l);
      if (!t.required && file.Find(name) == nullptr) continue;  // absent optional: stays null
      if (TensorView* v = LayerView(L, t.role)) {
        WEIR_ASSIGN_OR_RETURN(*v, Get(file, name));
      } else if (const float** p = LayerVector(L, t.role)) {
        WEIR_ASSIGN_OR_RETURN(*p, GetF32(file, name));
      } else {
        return Status::Internal(
            StrFormat("%s: tensor role of %s has no field", file.path.c_str(), name.c_str()));
      }
    }
  }
  return w;
}

}  // namespace weir::model
