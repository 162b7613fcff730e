// ArchSpec: what a model architecture is, as data. One row per GGUF `general.architecture` weir
// runs; the GGUF loader, the validator (ValidateLlama), the weight binding (model/llama_weights),
// the GGUF writer and `weir gen` read the row instead of naming Llama's tensors themselves.
//
// A row holds
//   - the GGUF name, which is also the metadata key prefix ("gemma3" -> gemma3.block_count),
//   - the tensor table: each tensor's name, what it is to the forward pass (TensorRole), its
//     shape in terms of the config's symbols (Dim), whether it is per layer and whether it is
//     required (an optional tensor that is absent binds to nothing: output.weight -> tied head,
//     attn_q.bias -> no bias), and for a part of a fused tensor the file tensor that holds it
//     (fused_in: Phi-3 stores q, k and v as the rows of one attn_qkv, gate and up as the rows of
//     one ffn_up),
//   - the switches in which the decoder block differs between architectures: RoPE pairing (and
//     whether linear RoPE scaling reaches the sliding layers),
//     QK-norm, post-norms, MLP activation, embedding scale, the sliding-window layer pattern and
//     the RoPE base of sliding layers, whether attention and final logit soft-caps may be stated.
// Values that differ between files of one architecture (the window size, the soft-cap, per-layer
// bases) are read by the loader into LlamaConfig (model_file.h); the row says which keys exist.
//
// Adding an architecture whose block is made of the switches below is one row in arch_spec.cc.
//
//   arch    RoPE         act        QK-norm  post-norms  emb. scale  sliding layers  q/k/v bias
//   llama   adjacent     SiLU       -        -           1           -               optional
//   qwen2   rotate-half  SiLU       -        -           1           -               optional
//   qwen3   rotate-half  SiLU       yes      -           1           -               optional
//   gemma2  rotate-half  GELU-tanh  -        yes         sqrt(d)     even (1 of 2)   optional
//   gemma3  rotate-half  GELU-tanh  yes      yes         sqrt(d)     5 of every 6    optional
// Soft-caps (cap * tanh(x / cap)): gemma2 on the attention scores and the final logits (files
// that leave the keys out get llama.cpp's 50 and 30), gemma3 on the final logits when stated.
// gemma2's sliding layers share the global RoPE base (gemma3's have their own, 10000); its
// head is always token_embd (the converter writes no output.weight).
//
// RoPE scaling: linear (<name>.rope.scaling.type "linear", .factor; LlamaConfig::
// rope_scaling_factor) on every row, on the sliding layers only where rope_scale_sliding says so
// (gemma3: no); Llama 3.1's per-pair frequency factors rope_freqs.weight (TensorRole::
// kRopeFreqs, [rope_dim / 2]) in the tables of llama and mixtral only, as llama.cpp reads it.
// YaRN, LongRoPE and other types are refused by the loaders.
//   phi3    rotate-half  SiLU       -        -           1           - (see below)   optional
//
// Fused tensors (TensorSpec::fused_in): the rows of a part are consecutive rows of the file's
// fused tensor, the parts in table order. The loader (SplitFusedTensors, model_file.h) checks the
// fused tensor's shape against the sum of its parts and replaces it by one zero-copy view per
// part under the part's own name (a row range of a row-major matrix is contiguous, whole blocks
// for the quantized types), so the forward pass, the sparsity policies and everything else see
// ordinary tensors; the GGUF writer writes the parts back as the fused tensor. A file without
// the fused tensor may store each part under its own name instead (llama.cpp reads phi3's
// attn_q/k/v so), except where the fused tensor has a part's name (ffn_up holding gate and up).
//   phi3    attn_qkv.weight = attn_q, attn_k, attn_v   [n_head*hd + 2 * n_head_kv*hd, d_model]
//           attn_qkv.bias   = attn_q, attn_k, attn_v biases (optional)
//           ffn_up.weight   = ffn_gate, ffn_up          [2 * d_ff, d_model] (gate first: the
//                             first half goes through SiLU, as in llama.cpp's swiglu and Hugging
//                             Face's Phi3MLP gate_up_proj.chunk(2))
//   phi3.attention.sliding_window (Phi-3-mini-4k states 2047) is ignored, as llama.cpp ignores it
//   (its phi3 graph disables SWA): the phi3 row has no sliding layers. LongRoPE factors
//   (rope_factors_long/short.weight: Phi-3-128k, Phi-3.5, Phi-4-mini) are refused.
//
// Mixture-of-experts rows (`moe`): the MLP is n_expert experts of width d_ff stacked in 3-D
// tensors ([n_expert, d_ff, d_model] ...), and a router (ffn_gate_inp, [n_expert, d_model]) picks
// n_expert_used of them per token (model/moe.h computes it):
//   mixtral   GGUF "llama" with <prefix>.expert_count > 0 (Mixtral 8x7B); Llama's attention
//   qwen3moe  GGUF "qwen3moe" (Qwen3-30B-A3B); Qwen3's attention (QK-norm)
// A row's `name` is weir's name for it (`weir gen --arch`, messages); `gguf_name` is the file's
// general.architecture and key prefix, shared by llama and mixtral.
//
// Hugging Face checkpoints (safetensors + config.json) name the same tensors differently; the HF
// table (HfArch, below the rows in arch_spec.cc) binds each config.json `architectures` value to
// its row and gives the checkpoint's name of every role, so one file says what an architecture
// is in both formats:
//   architectures        row       names                          differences at load
//   LlamaForCausalLM     llama     model.layers.N.self_attn.q_proj -
//   MistralForCausalLM   llama     as Llama                       sliding_window: every layer
//   Qwen2ForCausalLM     qwen2     + self_attn.q/k/v_proj.bias    -
//   Qwen3ForCausalLM     qwen3     + self_attn.q_norm/k_norm      -
//   Gemma3ForCausalLM    gemma3    + pre/post_feedforward_layernorm  norms stored as w: 1 + w
//   MixtralForCausalLM   mixtral   block_sparse_moe.experts.E.w1  experts stacked at load
//   Qwen3MoeForCausalLM  qwen3moe  mlp.experts.E.gate_proj        experts stacked at load
//   Gemma2ForCausalLM    gemma2    as Gemma 3 (no q_norm/k_norm)  norms stored as w: 1 + w
//   Phi3ForCausalLM      phi3      self_attn.qkv_proj, mlp.gate_up_proj  fused: split at load
// Gemma 2's config.json states attn_logit_softcapping and final_logit_softcapping (absent: its
// config class's 50 and 30, the row's defaults; null: off), sliding_window with layer_types or,
// without them, every other layer sliding from layer 0 (transformers' Gemma2Config and llama.cpp
// agree), and no rope_local_base_freq (sliding layers use rope_theta). Phi-3's
// partial_rotary_factor gives rope_dim = head_dim * factor (Phi-4-mini); its rope_scaling
// longrope/su/yarn is refused and its sliding_window ignored, as by the GGUF phi3 row.
// Every HF checkpoint keeps q and k in the layout of RoPE on halves (transformers' rotate_half),
// so its config gets RopeStyle::kRotateHalf whatever the row says: llama.cpp's converter permutes
// Llama's q/k rows into adjacent pairs for GGUF, weir instead keeps the rows and rotates halves.
//
// Thread safety: the rows are immutable statics.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/rope_style.h"
#include "tensor/tensor_view.h"

namespace weir::format {

struct LlamaConfig;

enum class Activation : uint8_t {
  kSilu,      // SwiGLU: silu(g) * u
  kGeluTanh,  // GeGLU: gelu(g) * u with gelu's tanh approximation (Gemma)
};
const char* ActivationName(Activation a);

// A tensor dimension in terms of the config's symbols (the layer's own values for per-layer
// tensors).
enum class Dim : uint8_t {
  kNone,     // no second dimension (1-D tensor)
  kDModel,   // d_model
  kVocab,    // vocab_size
  kQDim,     // n_head * head_dim
  kKvDim,    // n_head_kv * head_dim
  kDff,      // d_ff
  kHeadDim,  // head_dim
  kExperts,  // n_expert (MoE rows)
  kRopeHalf,  // rope_dim / 2: one entry per rotated pair (rope_freqs)
};
// "d_model", "n_head * head_dim", ... (the symbols of error messages).
const char* DimName(Dim d);

// What a tensor is to the forward pass; model/llama_weights.cc binds each role to one field.
enum class TensorRole : uint8_t {
  kTokenEmbd,
  kOutputNorm,
  kOutput,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kAttnQNorm,
  kAttnKNorm,
  kAttnOutput,
  kPostAttnNorm,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  kPostFfnNorm,
  // Mixture of experts (ArchSpec::moe).
  kFfnGateInp,   // router [n_expert, d_model]
  kFfnGateExps,  // [n_expert, d_ff, d_model]
  kFfnUpExps,    // [n_expert, d_ff, d_model]
  kFfnDownExps,  // [n_expert, d_model, d_ff]
  // RoPE frequency factors (Llama 3.1's rope_freqs.weight, global, F32 [rope_dim / 2], finite
  // and > 0): pair i turns by pos * base^(-2i/rope_dim) / factor[i].
  kRopeFreqs,
};

struct TensorSpec {
  TensorRole role;
  const char* name;  // "attn_q.weight"; a per-layer tensor is "blk.N." + name
  bool per_layer;
  bool required;
  Dim outer;  // shape outermost first: [outer, inner], or [outer] when inner is kNone
  Dim inner;
  // kExperts for the stacked expert tensors: the shape is [n_expert, outer, inner].
  Dim stack = Dim::kNone;
  // A part of a fused tensor: files store this tensor as `outer` consecutive rows of the tensor
  // named fused_in ("attn_qkv.weight"; "blk.N." prefixed like `name`), whose parts are the
  // consecutive rows of the table with the same fused_in, in the order of their rows. nullptr:
  // stored on its own.
  const char* fused_in = nullptr;
  // 1-D tensors (norms, biases) are F32; 2-D and 3-D ones are weights of any type.
  bool vector() const { return inner == Dim::kNone; }
};

struct ArchSpec {
  const char* name;       // weir's name of the row (`weir gen --arch`, messages); unique
  const char* gguf_name;  // GGUF general.architecture and metadata key prefix
  RopeStyle rope_style;
  Activation activation;
  bool qk_norm;             // RMSNorm (weights attn_q_norm / attn_k_norm) over each head's q, k
  bool post_norms;          // RMSNorm (post_attention_norm / post_ffw_norm) on each block's output
  bool embed_scale_sqrt_d;  // embeddings are multiplied by sqrt(d_model)
  // Sliding-window attention, when the file states <name>.attention.sliding_window: layer l is
  // global when l % period == period - 1, sliding otherwise (0: the architecture has none).
  // <name>.attention.sliding_window_pattern (a period or one bool per layer) overrides it.
  int sliding_window_period;
  // RoPE base of sliding layers unless <name>.rope.freq_base_swa; 0: the global base.
  float rope_theta_sliding;
  bool logit_softcap;        // <name>.final_logit_softcapping may be stated
  bool qkv_bias;             // its converter writes q/k/v biases (`weir gen` writes them too)
  // Mixture of experts: the MLP is the router and stacked experts (model/moe.h), and the file
  // states <gguf_name>.expert_count and .expert_used_count.
  bool moe;
  std::span<const TensorSpec> tensors;
  // Fields added after the first rows (a row that leaves them out gets these defaults):
  // Attention logit soft-capping: <gguf_name>.attn_logit_softcapping may be stated
  // (LlamaConfig::attn_logit_softcap: scores = cap * tanh(scores / cap) before the softmax).
  bool attn_softcap = false;
  // The converter writes no output.weight and llama.cpp reads token_embd as the head, so
  // `weir gen` writes the head tied (a stated output.weight is still read).
  bool tied_head = false;
  // What llama.cpp assumes when a file of this architecture leaves a key out (0: the switch is
  // off): <gguf_name>.attn_logit_softcapping, .final_logit_softcapping and
  // .attention.sliding_window.
  float attn_softcap_default = 0.0f;
  float final_softcap_default = 0.0f;
  int sliding_window_default = 0;
  // Linear RoPE scaling (<gguf_name>.rope.scaling.factor, LlamaConfig::rope_scaling_factor)
  // applies to the sliding-window layers too. llama.cpp: Gemma 3 keeps its sliding layers
  // unscaled (only the global ones are stretched, as in Hugging Face's Gemma3), Gemma 2 and
  // Cohere 2 scale both.
  bool rope_scale_sliding = false;
};

// ---- Hugging Face checkpoints ----

// A checkpoint's name of the tensor of `role`. Global tensors are named in full
// ("model.norm.weight"); a per-layer tensor is "model.layers.N." + name; a stacked expert tensor
// (TensorSpec::stack == kExperts) is stored as one 2-D tensor per expert, "{E}" in the name
// standing for the expert's number ("mlp.experts.{E}.gate_proj.weight"). The parts of a fused
// tensor (TensorSpec::fused_in) that the checkpoint stores fused too are named once, on the
// role of the first part ({kAttnQ, "self_attn.qkv_proj.weight"}): the reader stores it under
// the fused GGUF name, checks it against the sum of its parts and splits it like the GGUF loader
// (SplitFusedTensors); the other parts have no entry.
struct HfTensorName {
  TensorRole role;
  const char* name;
};

// How config.json's sliding_window is read (transformers differs per model class).
enum class HfSlidingWindow : uint8_t {
  kIgnored,     // the model class does not read it (Llama; Qwen's needs use_sliding_window)
  kEveryLayer,  // when not null, every layer sees the last sliding_window positions (Mistral)
  kRowPattern,  // the row's sliding layers (layer_types / sliding_window_pattern: Gemma)
};

// One config.json `architectures` value weir reads, bound to its row.
struct HfArch {
  const char* architecture;  // "Qwen2ForCausalLM"
  const char* model_type;    // config.json model_type, used when `architectures` is absent
  const ArchSpec* arch;
  // The checkpoint's tensors: one entry per role the checkpoint has, each required except
  // kOutput (lm_head, absent when tied). A role of the row without an entry (an optional bias)
  // is never bound; an entry whose role the row lacks is never read, so one family's table can
  // serve several rows (Gemma's names for a Gemma row without QK-norm).
  std::span<const HfTensorName> tensors;
  bool norm_plus_one;  // RMSNorm computes x * (1 + w) (Gemma): the loader stores 1 + w
  HfSlidingWindow sliding_window;
  // Mixture of experts: norm_topk_prob's default when config.json omits it (Mixtral always
  // renormalises the chosen experts' weights; Qwen3-MoE's config class defaults to false).
  bool expert_norm_default = true;
};

// Every HF architecture weir reads.
std::span<const HfArch> AllHfArchs();
// The entry of a config.json `architectures` value, or nullptr.
const HfArch* FindHfArch(std::string_view architecture);
// The entry of a config.json model_type ("qwen2"), or nullptr.
const HfArch* FindHfModelType(std::string_view model_type);
// "LlamaForCausalLM, MistralForCausalLM, ..." (for messages).
std::string HfArchNameList();
// The checkpoint's name of `role` in the entry, or nullptr when the checkpoint has none.
const HfTensorName* FindHfTensorName(const HfArch& hf, TensorRole role);
// The tensor's name in a checkpoint: "model.norm.weight",
// "model.layers.3.mlp.experts.7.gate_proj.weight" (layer, expert ignored where not used).
std::string HfName(const HfTensorName& t, bool per_layer, int layer, int expert);
// Whether the role is an RMSNorm weight (Gemma's 1 + w applies to exactly these).
bool IsNormRole(TensorRole role);

// Every architecture weir runs.
std::span<const ArchSpec* const> AllArchs();
// The row named `name` (weir's name: "mixtral", not "llama"), or nullptr.
const ArchSpec* FindArch(std::string_view name);
// The row of a GGUF file's general.architecture: `has_experts` (the file states
// <gguf_name>.expert_count > 0) picks the MoE row where one GGUF name has both (llama ->
// mixtral). nullptr when weir has no such row.
const ArchSpec* FindGgufArch(std::string_view gguf_name, bool has_experts);
// "llama, qwen2, qwen3, gemma3, mixtral, qwen3moe, gemma2, phi3" (for --arch help and messages).
std::string ArchNameList();
// The distinct GGUF names: "llama, qwen2, qwen3, gemma3, qwen3moe, gemma2, phi3".
std::string GgufArchNameList();
// The default row of configs that do not say otherwise (llama2.c, safetensors Llama, synthetic).
const ArchSpec& LlamaArch();

// The row's spec of `role`, or nullptr when the architecture has no such tensor.
const TensorSpec* FindTensorSpec(const ArchSpec& arch, TensorRole role);
// The tensor's name in a file: "token_embd.weight" or "blk.3.attn_q.weight".
std::string TensorName(const TensorSpec& t, int layer);
// The tensor's shape for `config` (layer's own head counts and d_ff for per-layer tensors).
Shape ExpectedShape(const TensorSpec& t, const LlamaConfig& config, int layer);
// The query scale GGUF does not state but llama.cpp infers from the layer count: Gemma 2 27B
// (46 layers) and Gemma 3 27B (62) scale queries by 1/sqrt(d_model / n_head), their
// query_pre_attn_scalar, instead of 1/sqrt(head_dim). 0 for every other model. The GGUF loader
// sets it; the GGUF writer accepts it (any other scale has no key).
float InferredAttnScale(std::string_view gguf_name, const LlamaConfig& config);
// "[n_head * head_dim, d_model]", "[n_expert, d_ff, d_model]": how the expected shape is
// derived, for messages.
std::string ShapeDerivation(const TensorSpec& t);

// A tensor as a GGUF file of the architecture stores it: one row of the table, or a fused tensor
// whose rows are `parts` (consecutive rows of the table with the same fused_in).
struct StoredTensor {
  const char* name;                   // fused_in, or the row's own name
  std::span<const TensorSpec> parts;  // one row unless fused
  bool fused() const { return parts.front().fused_in != nullptr; }
  bool per_layer() const { return parts.front().per_layer; }
};
// The architecture's stored tensors in table order (a fused tensor where its first part is).
std::vector<StoredTensor> StoredTensors(const ArchSpec& arch);
// "blk.3.attn_qkv.weight".
std::string StoredTensorName(const StoredTensor& s, int layer);
// The fused tensor's shape: the sum of its parts' rows by their common row length.
Shape StoredShape(const StoredTensor& s, const LlamaConfig& config, int layer);
// "[n_head * head_dim + n_head_kv * head_dim + n_head_kv * head_dim, d_model]".
std::string StoredShapeDerivation(const StoredTensor& s);

}  // namespace weir::format
