#include "model/llama_weights.h"

#include <string>

namespace weir::model {

namespace {

Result<TensorView> Get(const format::ModelFile& file, const std::string& name) {
  const TensorView* v = file.Find(name);
  if (v == nullptr) return Status::NotFound(StrFormat("%s: missing tensor %s", file.path.c_str(), name.c_str()));
  return *v;
}

Result<const float*> GetNorm(const format::ModelFile& file, const std::string& name) {
  WEIR_ASSIGN_OR_RETURN(TensorView v, Get(file, name));
  if (v.dtype != DType::kF32) {
    return Status::Unsupported(StrFormat("%s: norm tensor %s has type %s, expected F32", file.path.c_str(),
                                         name.c_str(), DTypeName(v.dtype)));
  }
  return v.f32();
}

}  // namespace

Result<LlamaWeights> BindWeights(const format::ModelFile& file) {
  LlamaWeights w;
  WEIR_ASSIGN_OR_RETURN(w.token_embd, Get(file, "token_embd.weight"));
  WEIR_ASSIGN_OR_RETURN(w.output_norm, GetNorm(file, "output_norm.weight"));
  if (file.config.tied_output || file.Find("output.weight") == nullptr) {
    w.output = w.token_embd;
  } else {
    WEIR_ASSIGN_OR_RETURN(w.output, Get(file, "output.weight"));
  }
  w.layers.resize(static_cast<size_t>(file.config.n_layers));
  for (int l = 0; l < file.config.n_layers; ++l) {
    std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    WEIR_ASSIGN_OR_RETURN(L.attn_norm, GetNorm(file, p + "attn_norm.weight"));
    WEIR_ASSIGN_OR_RETURN(L.wq, Get(file, p + "attn_q.weight"));
    WEIR_ASSIGN_OR_RETURN(L.wk, Get(file, p + "attn_k.weight"));
    WEIR_ASSIGN_OR_RETURN(L.wv, Get(file, p + "attn_v.weight"));
    WEIR_ASSIGN_OR_RETURN(L.wo, Get(file, p + "attn_output.weight"));
    WEIR_ASSIGN_OR_RETURN(L.ffn_norm, GetNorm(file, p + "ffn_norm.weight"));
    WEIR_ASSIGN_OR_RETURN(L.w_gate, Get(file, p + "ffn_gate.weight"));
    WEIR_ASSIGN_OR_RETURN(L.w_up, Get(file, p + "ffn_up.weight"));
    WEIR_ASSIGN_OR_RETURN(L.w_down, Get(file, p + "ffn_down.weight"));
  }
  return w;
}

}  // namespace weir::model
