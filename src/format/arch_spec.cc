// The architecture table. The tensor names are llama.cpp's GGUF names (they are the file format);
// each row lists the tensors its forward pass reads, in the order weir writes them.
#include "format/arch_spec.h"

#include <cmath>
#include <iterator>

#include "base/status.h"
#include "format/model_file.h"

namespace weir::format {

namespace {

using R = TensorRole;
using D = Dim;
constexpr bool kLayer = true, kGlobal = false, kReq = true, kOpt = false;

// clang-format off
// Each table spells out its tensors in the order weir writes them, so that a row reads on its
// own. Columns: role, name, per layer, required, shape [outer, inner].
constexpr TensorSpec kLlamaTensors[] = {
    {R::kTokenEmbd,  "token_embd.weight",  kGlobal, kReq, D::kVocab,  D::kDModel},
    {R::kAttnNorm,   "attn_norm.weight",   kLayer,  kReq, D::kDModel, D::kNone},
    {R::kAttnQ,      "attn_q.weight",      kLayer,  kReq, D::kQDim,   D::kDModel},
    {R::kAttnK,      "attn_k.weight",      kLayer,  kReq, D::kKvDim,  D::kDModel},
    {R::kAttnV,      "attn_v.weight",      kLayer,  kReq, D::kKvDim,  D::kDModel},
    {R::kAttnQBias,  "attn_q.bias",        kLayer,  kOpt, D::kQDim,   D::kNone},
    {R::kAttnKBias,  "attn_k.bias",        kLayer,  kOpt, D::kKvDim,  D::kNone},
    {R::kAttnVBias,  "attn_v.bias",        kLayer,  kOpt, D::kKvDim,  D::kNone},
    {R::kAttnOutput, "attn_output.weight", kLayer,  kReq, D::kDModel, D::kQDim},
    {R::kFfnNorm,    "ffn_norm.weight",    kLayer,  kReq, D::kDModel, D::kNone},
    {R::kFfnGate,    "ffn_gate.weight",    kLayer,  kReq, D::kDff,    D::kDModel},
    {R::kFfnUp,      "ffn_up.weight",      kLayer,  kReq, D::kDff,    D::kDModel},
    {R::kFfnDown,    "ffn_down.weight",    kLayer,  kReq, D::kDModel, D::kDff},
    {R::kOutputNorm, "output_norm.weight", kGlobal, kReq, D::kDModel, D::kNone},
    {R::kOutput,     "output.weight",      kGlobal, kOpt, D::kVocab,  D::kDModel},  // absent: tied
    {R::kRopeFreqs,  "rope_freqs.weight",  kGlobal, kOpt, D::kRopeHalf, D::kNone},  // Llama 3.1
};

// Qwen2: Llama's tensors without rope_freqs (llama.cpp reads rope_freqs.weight for the "llama"
// family only, not for qwen2, qwen3 or gemma3).
constexpr TensorSpec kQwen2Tensors[] = {
    {R::kTokenEmbd,  "token_embd.weight",  kGlobal, kReq, D::kVocab,  D::kDModel},
    {R::kAttnNorm,   "attn_norm.weight",   kLayer,  kReq, D::kDModel, D::kNone},
    {R::kAttnQ,      "attn_q.weight",      kLayer,  kReq, D::kQDim,   D::kDModel},
    {R::kAttnK,      "attn_k.weight",      kLayer,  kReq, D::kKvDim,  D::kDModel},
    {R::kAttnV,      "attn_v.weight",      kLayer,  kReq, D::kKvDim,  D::kDModel},
    {R::kAttnQBias,  "attn_q.bias",        kLayer,  kOpt, D::kQDim,   D::kNone},
    {R::kAttnKBias,  "attn_k.bias",        kLayer,  kOpt, D::kKvDim,  D::kNone},
    {R::kAttnVBias,  "attn_v.bias",        kLayer,  kOpt, D::kKvDim,  D::kNone},
    {R::kAttnOutput, "attn_output.weight", kLayer,  kReq, D::kDModel, D::kQDim},
    {R::kFfnNorm,    "ffn_norm.weight",    kLayer,  kReq, D::kDModel, D::kNone},
    {R::kFfnGate,    "ffn_gate.weight",    kLayer,  kReq, D::kDff,    D::kDModel},
    {R::kFfnUp,      "ffn_up.weight",      kLayer,  kReq, D::kDff,    D::kDModel},
    {R::kFfnDown,    "ffn_down.weight",    kLayer,  kReq, D::kDModel, D::kDff},
    {R::kOutputNorm, "output_norm.weight", kGlobal, kReq, D::kDModel, D::kNone},
    {R::kOutput,     "output.weight",      kGlobal, kOpt, D::kVocab,  D::kDModel},
};

// Qwen3: Llama's tensors plus QK-norm.
constexpr TensorSpec kQwen3Tensors[] = {
    {R::kTokenEmbd,  "token_embd.weight",  kGlobal, kReq, D::kVocab,   D::kDModel},
    {R::kAttnNorm,   "attn_norm.weight",   kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kAttnQ,      "attn_q.weight",      kLayer,  kReq, D::kQDim,    D::kDModel},
    {R::kAttnK,      "attn_k.weight",      kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnV,      "attn_v.weight",      kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnQBias,  "attn_q.bias",        kLayer,  kOpt, D::kQDim,    D::kNone},
    {R::kAttnKBias,  "attn_k.bias",        kLayer,  kOpt, D::kKvDim,   D::kNone},
    {R::kAttnVBias,  "attn_v.bias",        kLayer,  kOpt, D::kKvDim,   D::kNone},
    {R::kAttnQNorm,  "attn_q_norm.weight", kLayer,  kReq, D::kHeadDim, D::kNone},
    {R::kAttnKNorm,  "attn_k_norm.weight", kLayer,  kReq, D::kHeadDim, D::kNone},
    {R::kAttnOutput, "attn_output.weight", kLayer,  kReq, D::kDModel,  D::kQDim},
    {R::kFfnNorm,    "ffn_norm.weight",    kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kFfnGate,    "ffn_gate.weight",    kLayer,  kReq, D::kDff,     D::kDModel},
    {R::kFfnUp,      "ffn_up.weight",      kLayer,  kReq, D::kDff,     D::kDModel},
    {R::kFfnDown,    "ffn_down.weight",    kLayer,  kReq, D::kDModel,  D::kDff},
    {R::kOutputNorm, "output_norm.weight", kGlobal, kReq, D::kDModel,  D::kNone},
    {R::kOutput,     "output.weight",      kGlobal, kOpt, D::kVocab,   D::kDModel},
};

// Gemma 3: QK-norm, and a norm on the output of each block before the residual add. The GGUF
// converter stores Gemma's RMSNorm scale (1 + w) as the norm weight, so every norm here is an
// ordinary RMSNorm.
constexpr TensorSpec kGemma3Tensors[] = {
    {R::kTokenEmbd,    "token_embd.weight",          kGlobal, kReq, D::kVocab,   D::kDModel},
    {R::kAttnNorm,     "attn_norm.weight",           kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kAttnQ,        "attn_q.weight",              kLayer,  kReq, D::kQDim,    D::kDModel},
    {R::kAttnK,        "attn_k.weight",              kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnV,        "attn_v.weight",              kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnQBias,    "attn_q.bias",                kLayer,  kOpt, D::kQDim,    D::kNone},
    {R::kAttnKBias,    "attn_k.bias",                kLayer,  kOpt, D::kKvDim,   D::kNone},
    {R::kAttnVBias,    "attn_v.bias",                kLayer,  kOpt, D::kKvDim,   D::kNone},
    {R::kAttnQNorm,    "attn_q_norm.weight",         kLayer,  kReq, D::kHeadDim, D::kNone},
    {R::kAttnKNorm,    "attn_k_norm.weight",         kLayer,  kReq, D::kHeadDim, D::kNone},
    {R::kAttnOutput,   "attn_output.weight",         kLayer,  kReq, D::kDModel,  D::kQDim},
    {R::kPostAttnNorm, "post_attention_norm.weight", kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kFfnNorm,      "ffn_norm.weight",            kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kFfnGate,      "ffn_gate.weight",            kLayer,  kReq, D::kDff,     D::kDModel},
    {R::kFfnUp,        "ffn_up.weight",              kLayer,  kReq, D::kDff,     D::kDModel},
    {R::kFfnDown,      "ffn_down.weight",            kLayer,  kReq, D::kDModel,  D::kDff},
    {R::kPostFfnNorm,  "post_ffw_norm.weight",       kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kOutputNorm,   "output_norm.weight",         kGlobal, kReq, D::kDModel,  D::kNone},
    {R::kOutput,       "output.weight",              kGlobal, kOpt, D::kVocab,   D::kDModel},
};

// Gemma 2: Gemma 3's block without QK-norm (llama.cpp's gemma2 graph; its converter writes no
// output.weight, the head is token_embd).
constexpr TensorSpec kGemma2Tensors[] = {
    {R::kTokenEmbd,    "token_embd.weight",          kGlobal, kReq, D::kVocab,   D::kDModel},
    {R::kAttnNorm,     "attn_norm.weight",           kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kAttnQ,        "attn_q.weight",              kLayer,  kReq, D::kQDim,    D::kDModel},
    {R::kAttnK,        "attn_k.weight",              kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnV,        "attn_v.weight",              kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnQBias,    "attn_q.bias",                kLayer,  kOpt, D::kQDim,    D::kNone},
    {R::kAttnKBias,    "attn_k.bias",                kLayer,  kOpt, D::kKvDim,   D::kNone},
    {R::kAttnVBias,    "attn_v.bias",                kLayer,  kOpt, D::kKvDim,   D::kNone},
    {R::kAttnOutput,   "attn_output.weight",         kLayer,  kReq, D::kDModel,  D::kQDim},
    {R::kPostAttnNorm, "post_attention_norm.weight", kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kFfnNorm,      "ffn_norm.weight",            kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kFfnGate,      "ffn_gate.weight",            kLayer,  kReq, D::kDff,     D::kDModel},
    {R::kFfnUp,        "ffn_up.weight",              kLayer,  kReq, D::kDff,     D::kDModel},
    {R::kFfnDown,      "ffn_down.weight",            kLayer,  kReq, D::kDModel,  D::kDff},
    {R::kPostFfnNorm,  "post_ffw_norm.weight",       kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kOutputNorm,   "output_norm.weight",         kGlobal, kReq, D::kDModel,  D::kNone},
    {R::kOutput,       "output.weight",              kGlobal, kOpt, D::kVocab,   D::kDModel},
};

// Mixtral: Llama's attention; the MLP is a router and 3-D stacks of experts (GGUF ne
// [d_model, d_ff, n_expert] etc., innermost first).
constexpr TensorSpec kMixtralTensors[] = {
    {R::kTokenEmbd,    "token_embd.weight",    kGlobal, kReq, D::kVocab,   D::kDModel},
    {R::kAttnNorm,     "attn_norm.weight",     kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kAttnQ,        "attn_q.weight",        kLayer,  kReq, D::kQDim,    D::kDModel},
    {R::kAttnK,        "attn_k.weight",        kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnV,        "attn_v.weight",        kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnOutput,   "attn_output.weight",   kLayer,  kReq, D::kDModel,  D::kQDim},
    {R::kFfnNorm,      "ffn_norm.weight",      kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kFfnGateInp,   "ffn_gate_inp.weight",  kLayer,  kReq, D::kExperts, D::kDModel},
    {R::kFfnGateExps,  "ffn_gate_exps.weight", kLayer,  kReq, D::kDff,     D::kDModel, D::kExperts},
    {R::kFfnUpExps,    "ffn_up_exps.weight",   kLayer,  kReq, D::kDff,     D::kDModel, D::kExperts},
    {R::kFfnDownExps,  "ffn_down_exps.weight", kLayer,  kReq, D::kDModel,  D::kDff,    D::kExperts},
    {R::kOutputNorm,   "output_norm.weight",   kGlobal, kReq, D::kDModel,  D::kNone},
    {R::kOutput,       "output.weight",        kGlobal, kOpt, D::kVocab,   D::kDModel},
    {R::kRopeFreqs,    "rope_freqs.weight",    kGlobal, kOpt, D::kRopeHalf, D::kNone},
};

// Qwen3 MoE: Qwen3's attention (QK-norm) and Mixtral's MLP; d_ff is the expert's width
// (qwen3moe.expert_feed_forward_length).
constexpr TensorSpec kQwen3MoeTensors[] = {
    {R::kTokenEmbd,    "token_embd.weight",    kGlobal, kReq, D::kVocab,   D::kDModel},
    {R::kAttnNorm,     "attn_norm.weight",     kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kAttnQ,        "attn_q.weight",        kLayer,  kReq, D::kQDim,    D::kDModel},
    {R::kAttnK,        "attn_k.weight",        kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnV,        "attn_v.weight",        kLayer,  kReq, D::kKvDim,   D::kDModel},
    {R::kAttnQNorm,    "attn_q_norm.weight",   kLayer,  kReq, D::kHeadDim, D::kNone},
    {R::kAttnKNorm,    "attn_k_norm.weight",   kLayer,  kReq, D::kHeadDim, D::kNone},
    {R::kAttnOutput,   "attn_output.weight",   kLayer,  kReq, D::kDModel,  D::kQDim},
    {R::kFfnNorm,      "ffn_norm.weight",      kLayer,  kReq, D::kDModel,  D::kNone},
    {R::kFfnGateInp,   "ffn_gate_inp.weight",  kLayer,  kReq, D::kExperts, D::kDModel},
    {R::kFfnGateExps,  "ffn_gate_exps.weight", kLayer,  kReq, D::kDff,     D::kDModel, D::kExperts},
    {R::kFfnUpExps,    "ffn_up_exps.weight",   kLayer,  kReq, D::kDff,     D::kDModel, D::kExperts},
    {R::kFfnDownExps,  "ffn_down_exps.weight", kLayer,  kReq, D::kDModel,  D::kDff,    D::kExperts},
    {R::kOutputNorm,   "output_norm.weight",   kGlobal, kReq, D::kDModel,  D::kNone},
    {R::kOutput,       "output.weight",        kGlobal, kOpt, D::kVocab,   D::kDModel},
};

// Phi-3 (Phi-3-mini/medium, Phi-3.5-mini, Phi-4-mini): Llama's block with q, k and v stored as
// the rows of one attn_qkv and the MLP's gate and up as the rows of one ffn_up (gate first). A
// file without attn_qkv may store attn_q/k/v (and their biases) on their own.
constexpr const char* kQkv = "attn_qkv.weight";
constexpr const char* kQkvBias = "attn_qkv.bias";
constexpr const char* kGateUp = "ffn_up.weight";
constexpr TensorSpec kPhi3Tensors[] = {
    {R::kTokenEmbd,  "token_embd.weight",  kGlobal, kReq, D::kVocab,  D::kDModel},
    {R::kAttnNorm,   "attn_norm.weight",   kLayer,  kReq, D::kDModel, D::kNone},
    {R::kAttnQ,      "attn_q.weight",      kLayer,  kReq, D::kQDim,   D::kDModel, D::kNone, kQkv},
    {R::kAttnK,      "attn_k.weight",      kLayer,  kReq, D::kKvDim,  D::kDModel, D::kNone, kQkv},
    {R::kAttnV,      "attn_v.weight",      kLayer,  kReq, D::kKvDim,  D::kDModel, D::kNone, kQkv},
    {R::kAttnQBias,  "attn_q.bias",        kLayer,  kOpt, D::kQDim,   D::kNone,   D::kNone, kQkvBias},
    {R::kAttnKBias,  "attn_k.bias",        kLayer,  kOpt, D::kKvDim,  D::kNone,   D::kNone, kQkvBias},
    {R::kAttnVBias,  "attn_v.bias",        kLayer,  kOpt, D::kKvDim,  D::kNone,   D::kNone, kQkvBias},
    {R::kAttnOutput, "attn_output.weight", kLayer,  kReq, D::kDModel, D::kQDim},
    {R::kFfnNorm,    "ffn_norm.weight",    kLayer,  kReq, D::kDModel, D::kNone},
    {R::kFfnGate,    "ffn_gate.weight",    kLayer,  kReq, D::kDff,    D::kDModel, D::kNone, kGateUp},
    {R::kFfnUp,      "ffn_up.weight",      kLayer,  kReq, D::kDff,    D::kDModel, D::kNone, kGateUp},
    {R::kFfnDown,    "ffn_down.weight",    kLayer,  kReq, D::kDModel, D::kDff},
    {R::kOutputNorm, "output_norm.weight", kGlobal, kReq, D::kDModel, D::kNone},
    {R::kOutput,     "output.weight",      kGlobal, kOpt, D::kVocab,  D::kDModel},
};

// One row per architecture.
//                          name        gguf_name   RoPE pairing               activation
//                          qk_norm post_norms emb_sqrt_d swa_period theta_swa softcap qkv_bias moe    tensors
// llama and mixtral have sliding layers only from a Hugging Face Mistral / Mixtral config (a
// window on every layer), whose RoPE scaling transformers applies to every layer.
constexpr ArchSpec kLlama{   "llama",    "llama",    RopeStyle::kAdjacentPairs, Activation::kSilu,
                            false,  false,     false,     0,         0.0f,     false,  false,   false, kLlamaTensors,
                            false,       false,    0.0f,                0.0f,                 0,
                            /*rope_scale_sliding=*/true};
constexpr ArchSpec kQwen2{   "qwen2",    "qwen2",    RopeStyle::kRotateHalf,    Activation::kSilu,
                            false,  false,     false,     0,         0.0f,     false,  true,    false, kQwen2Tensors};
constexpr ArchSpec kQwen3{   "qwen3",    "qwen3",    RopeStyle::kRotateHalf,    Activation::kSilu,
                            true,   false,     false,     0,         0.0f,     false,  false,   false, kQwen3Tensors};
constexpr ArchSpec kGemma3{  "gemma3",   "gemma3",   RopeStyle::kRotateHalf,    Activation::kGeluTanh,
                            true,   true,      true,      6,         10000.0f, true,   false,   false, kGemma3Tensors};
constexpr ArchSpec kMixtral{ "mixtral",  "llama",    RopeStyle::kAdjacentPairs, Activation::kSilu,
                            false,  false,     false,     0,         0.0f,     false,  false,   true,  kMixtralTensors,
                            false,       false,    0.0f,                0.0f,                 0,
                            /*rope_scale_sliding=*/true};
constexpr ArchSpec kQwen3Moe{"qwen3moe", "qwen3moe", RopeStyle::kRotateHalf,    Activation::kSilu,
                            true,   false,     false,     0,         0.0f,     false,  false,   true,  kQwen3MoeTensors};
// Gemma 2 (llama.cpp's gemma2): every other layer slides (layer 0 first) with the global RoPE base
// (theta_swa 0); the attention scores are soft-capped; the fields after `tensors` are
//                          attn_softcap tied_head attn_softcap_default final_softcap_default window_default
constexpr ArchSpec kGemma2{  "gemma2",   "gemma2",   RopeStyle::kRotateHalf,    Activation::kGeluTanh,
                            false,  true,      true,      2,         0.0f,     true,   false,   false, kGemma2Tensors,
                            true,        true,     50.0f,               30.0f,                4096,
                            /*rope_scale_sliding=*/true};
constexpr ArchSpec kPhi3{    "phi3",     "phi3",     RopeStyle::kRotateHalf,    Activation::kSilu,
                            false,  false,     false,     0,         0.0f,     false,  false,   false, kPhi3Tensors};
// clang-format on

constexpr const ArchSpec* kArchs[] = {&kLlama,   &kQwen2,    &kQwen3,  &kGemma3,
                                      &kMixtral, &kQwen3Moe, &kGemma2, &kPhi3};

// ---- Hugging Face checkpoints: each role's name in transformers' state dict ----
// Names of per-layer tensors follow "model.layers.N."; "{E}" is the expert's number.
// clang-format off
constexpr HfTensorName kHfLlamaNames[] = {
    {R::kTokenEmbd,  "model.embed_tokens.weight"},
    {R::kAttnNorm,   "input_layernorm.weight"},
    {R::kAttnQ,      "self_attn.q_proj.weight"},
    {R::kAttnK,      "self_attn.k_proj.weight"},
    {R::kAttnV,      "self_attn.v_proj.weight"},
    {R::kAttnOutput, "self_attn.o_proj.weight"},
    {R::kFfnNorm,    "post_attention_layernorm.weight"},
    {R::kFfnGate,    "mlp.gate_proj.weight"},
    {R::kFfnUp,      "mlp.up_proj.weight"},
    {R::kFfnDown,    "mlp.down_proj.weight"},
    {R::kOutputNorm, "model.norm.weight"},
    {R::kOutput,     "lm_head.weight"},
};

// Qwen2: Llama's names, and q/k/v always have biases.
constexpr HfTensorName kHfQwen2Names[] = {
    {R::kTokenEmbd,  "model.embed_tokens.weight"},
    {R::kAttnNorm,   "input_layernorm.weight"},
    {R::kAttnQ,      "self_attn.q_proj.weight"},
    {R::kAttnK,      "self_attn.k_proj.weight"},
    {R::kAttnV,      "self_attn.v_proj.weight"},
    {R::kAttnQBias,  "self_attn.q_proj.bias"},
    {R::kAttnKBias,  "self_attn.k_proj.bias"},
    {R::kAttnVBias,  "self_attn.v_proj.bias"},
    {R::kAttnOutput, "self_attn.o_proj.weight"},
    {R::kFfnNorm,    "post_attention_layernorm.weight"},
    {R::kFfnGate,    "mlp.gate_proj.weight"},
    {R::kFfnUp,      "mlp.up_proj.weight"},
    {R::kFfnDown,    "mlp.down_proj.weight"},
    {R::kOutputNorm, "model.norm.weight"},
    {R::kOutput,     "lm_head.weight"},
};

// Qwen3: Llama's names plus QK-norm.
constexpr HfTensorName kHfQwen3Names[] = {
    {R::kTokenEmbd,  "model.embed_tokens.weight"},
    {R::kAttnNorm,   "input_layernorm.weight"},
    {R::kAttnQ,      "self_attn.q_proj.weight"},
    {R::kAttnK,      "self_attn.k_proj.weight"},
    {R::kAttnV,      "self_attn.v_proj.weight"},
    {R::kAttnQNorm,  "self_attn.q_norm.weight"},
    {R::kAttnKNorm,  "self_attn.k_norm.weight"},
    {R::kAttnOutput, "self_attn.o_proj.weight"},
    {R::kFfnNorm,    "post_attention_layernorm.weight"},
    {R::kFfnGate,    "mlp.gate_proj.weight"},
    {R::kFfnUp,      "mlp.up_proj.weight"},
    {R::kFfnDown,    "mlp.down_proj.weight"},
    {R::kOutputNorm, "model.norm.weight"},
    {R::kOutput,     "lm_head.weight"},
};

// Gemma 3: post_attention_layernorm is the norm on the attention's output (GGUF
// post_attention_norm), not the MLP's input norm (pre_feedforward_layernorm). A Gemma row
// without QK-norm can use this table as it is (its q_norm / k_norm names are then not read).
constexpr HfTensorName kHfGemma3Names[] = {
    {R::kTokenEmbd,    "model.embed_tokens.weight"},
    {R::kAttnNorm,     "input_layernorm.weight"},
    {R::kAttnQ,        "self_attn.q_proj.weight"},
    {R::kAttnK,        "self_attn.k_proj.weight"},
    {R::kAttnV,        "self_attn.v_proj.weight"},
    {R::kAttnQNorm,    "self_attn.q_norm.weight"},
    {R::kAttnKNorm,    "self_attn.k_norm.weight"},
    {R::kAttnOutput,   "self_attn.o_proj.weight"},
    {R::kPostAttnNorm, "post_attention_layernorm.weight"},
    {R::kFfnNorm,      "pre_feedforward_layernorm.weight"},
    {R::kFfnGate,      "mlp.gate_proj.weight"},
    {R::kFfnUp,        "mlp.up_proj.weight"},
    {R::kFfnDown,      "mlp.down_proj.weight"},
    {R::kPostFfnNorm,  "post_feedforward_layernorm.weight"},
    {R::kOutputNorm,   "model.norm.weight"},
    {R::kOutput,       "lm_head.weight"},
};

// Mixtral: w1 is the gate, w3 the up and w2 the down projection of each expert.
constexpr HfTensorName kHfMixtralNames[] = {
    {R::kTokenEmbd,   "model.embed_tokens.weight"},
    {R::kAttnNorm,    "input_layernorm.weight"},
    {R::kAttnQ,       "self_attn.q_proj.weight"},
    {R::kAttnK,       "self_attn.k_proj.weight"},
    {R::kAttnV,       "self_attn.v_proj.weight"},
    {R::kAttnOutput,  "self_attn.o_proj.weight"},
    {R::kFfnNorm,     "post_attention_layernorm.weight"},
    {R::kFfnGateInp,  "block_sparse_moe.gate.weight"},
    {R::kFfnGateExps, "block_sparse_moe.experts.{E}.w1.weight"},
    {R::kFfnUpExps,   "block_sparse_moe.experts.{E}.w3.weight"},
    {R::kFfnDownExps, "block_sparse_moe.experts.{E}.w2.weight"},
    {R::kOutputNorm,  "model.norm.weight"},
    {R::kOutput,      "lm_head.weight"},
};

constexpr HfTensorName kHfQwen3MoeNames[] = {
    {R::kTokenEmbd,   "model.embed_tokens.weight"},
    {R::kAttnNorm,    "input_layernorm.weight"},
    {R::kAttnQ,       "self_attn.q_proj.weight"},
    {R::kAttnK,       "self_attn.k_proj.weight"},
    {R::kAttnV,       "self_attn.v_proj.weight"},
    {R::kAttnQNorm,   "self_attn.q_norm.weight"},
    {R::kAttnKNorm,   "self_attn.k_norm.weight"},
    {R::kAttnOutput,  "self_attn.o_proj.weight"},
    {R::kFfnNorm,     "post_attention_layernorm.weight"},
    {R::kFfnGateInp,  "mlp.gate.weight"},
    {R::kFfnGateExps, "mlp.experts.{E}.gate_proj.weight"},
    {R::kFfnUpExps,   "mlp.experts.{E}.up_proj.weight"},
    {R::kFfnDownExps, "mlp.experts.{E}.down_proj.weight"},
    {R::kOutputNorm,  "model.norm.weight"},
    {R::kOutput,      "lm_head.weight"},
};

// Phi-3: q, k and v as the rows of one qkv_proj, the MLP's gate and up as the rows of one
// gate_up_proj (gate first: Phi3MLP's gate_up_proj(x).chunk(2)); each fused tensor is named on
// the first of its parts (see HfTensorName), no bias (Phi3Attention's qkv_proj has none).
constexpr HfTensorName kHfPhi3Names[] = {
    {R::kTokenEmbd,  "model.embed_tokens.weight"},
    {R::kAttnNorm,   "input_layernorm.weight"},
    {R::kAttnQ,      "self_attn.qkv_proj.weight"},
    {R::kAttnOutput, "self_attn.o_proj.weight"},
    {R::kFfnNorm,    "post_attention_layernorm.weight"},
    {R::kFfnGate,    "mlp.gate_up_proj.weight"},
    {R::kFfnDown,    "mlp.down_proj.weight"},
    {R::kOutputNorm, "model.norm.weight"},
    {R::kOutput,     "lm_head.weight"},
};

// One entry per config.json `architectures` value.
//   architectures          model_type     row         names             1 + w  sliding_window                    expert norm default
constexpr HfArch kHfArchs[] = {
    {"LlamaForCausalLM",    "llama",       &kLlama,    kHfLlamaNames,    false, HfSlidingWindow::kIgnored},
    {"MistralForCausalLM",  "mistral",     &kLlama,    kHfLlamaNames,    false, HfSlidingWindow::kEveryLayer},
    {"Qwen2ForCausalLM",    "qwen2",       &kQwen2,    kHfQwen2Names,    false, HfSlidingWindow::kIgnored},
    {"Qwen3ForCausalLM",    "qwen3",       &kQwen3,    kHfQwen3Names,    false, HfSlidingWindow::kIgnored},
    {"Gemma3ForCausalLM",   "gemma3_text", &kGemma3,   kHfGemma3Names,   true,  HfSlidingWindow::kRowPattern},
    {"MixtralForCausalLM",  "mixtral",     &kMixtral,  kHfMixtralNames,  false, HfSlidingWindow::kEveryLayer, true},
    {"Qwen3MoeForCausalLM", "qwen3_moe",   &kQwen3Moe, kHfQwen3MoeNames, false, HfSlidingWindow::kIgnored,    false},
    {"Gemma2ForCausalLM",   "gemma2",      &kGemma2,   kHfGemma3Names,   true,  HfSlidingWindow::kRowPattern},
    {"Phi3ForCausalLM",     "phi3",        &kPhi3,     kHfPhi3Names,     false, HfSlidingWindow::kIgnored},
};
// clang-format on

}  // namespace

const char* ActivationName(Activation a) { return a == Activation::kSilu ? "silu" : "gelu-tanh"; }

const char* DimName(Dim d) {
  switch (d) {
    case Dim::kNone:
      return "";
    case Dim::kDModel:
      return "d_model";
    case Dim::kVocab:
      return "vocab_size";
    case Dim::kQDim:
      return "n_head * head_dim";
    case Dim::kKvDim:
      return "n_head_kv * head_dim";
    case Dim::kDff:
      return "d_ff";
    case Dim::kHeadDim:
      return "head_dim";
    case Dim::kExperts:
      return "n_expert";
    case Dim::kRopeHalf:
      return "rope_dim / 2";
  }
  return "?";
}

std::span<const ArchSpec* const> AllArchs() { return kArchs; }

const ArchSpec* FindArch(std::string_view name) {
  for (const ArchSpec* a : kArchs) {
    if (name == a->name) return a;
  }
  return nullptr;
}

const ArchSpec* FindGgufArch(std::string_view gguf_name, bool has_experts) {
  const ArchSpec* any = nullptr;
  for (const ArchSpec* a : kArchs) {
    if (gguf_name != a->gguf_name) continue;
    if (a->moe == has_experts) return a;
    if (any == nullptr) any = a;
  }
  // One row for the name: the loader then checks the file against that row (a qwen3moe file
  // without experts is an error about its expert_count, not an unknown architecture).
  return any;
}

std::string GgufArchNameList() {
  std::string s;
  for (size_t i = 0; i < std::size(kArchs); ++i) {
    bool first = true;  // the first row with this GGUF name
    for (size_t j = 0; j < i; ++j) {
      first = first && std::string_view(kArchs[j]->gguf_name) != kArchs[i]->gguf_name;
    }
    if (first) s += (s.empty() ? "" : ", ") + std::string(kArchs[i]->gguf_name);
  }
  return s;
}

std::string ArchNameList() {
  std::string s;
  for (const ArchSpec* a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a->name);
  return s;
}

const ArchSpec& LlamaArch() { return kLlama; }

std::span<const HfArch> AllHfArchs() { return kHfArchs; }

const HfArch* FindHfArch(std::string_view architecture) {
  for (const HfArch& h : kHfArchs) {
    if (architecture == h.architecture) return &h;
  }
  return nullptr;
}

const HfArch* FindHfModelType(std::string_view model_type) {
  for (const HfArch& h : kHfArchs) {
    if (model_type == h.model_type) return &h;
  }
  return nullptr;
}

std::string HfArchNameList() {
  std::string s;
  for (const HfArch& h : kHfArchs) s += (s.empty() ? "" : ", ") + std::string(h.architecture);
  return s;
}

const HfTensorName* FindHfTensorName(const HfArch& hf, TensorRole role) {
  for (const HfTensorName& t : hf.tensors) {
    if (t.role == role) return &t;
  }
  return nullptr;
}

std::string HfName(const HfTensorName& t, bool per_layer, int layer, int expert) {
  std::string name = t.name;
  if (const size_t at = name.find("{E}"); at != std::string::npos) {
    name.replace(at, 3, std::to_string(expert));
  }
  return per_layer ? StrFormat("model.layers.%d.%s", layer, name.c_str()) : name;
}

bool IsNormRole(TensorRole r) {
  switch (r) {
    case TensorRole::kOutputNorm:
    case TensorRole::kAttnNorm:
    case TensorRole::kAttnQNorm:
    case TensorRole::kAttnKNorm:
    case TensorRole::kPostAttnNorm:
    case TensorRole::kFfnNorm:
    case TensorRole::kPostFfnNorm:
      return true;
    default:
      return false;
  }
}

const TensorSpec* FindTensorSpec(const ArchSpec& arch, TensorRole role) {
  for (const TensorSpec& t : arch.tensors) {
    if (t.role == role) return &t;
  }
  return nullptr;
}

std::string TensorName(const TensorSpec& t, int layer) {
  return t.per_layer ? StrFormat("blk.%d.%s", layer, t.name) : std::string(t.name);
}

Shape ExpectedShape(const TensorSpec& t, const LlamaConfig& c, int layer) {
  LayerDims L{c.n_head, c.n_head_kv, c.d_ff};
  if (t.per_layer && layer >= 0 && static_cast<size_t>(layer) < c.layers.size()) {
    L = c.layers[static_cast<size_t>(layer)];
  }
  auto size = [&](Dim d) -> int64_t {
    switch (d) {
      case Dim::kNone:
        return 0;
      case Dim::kDModel:
        return c.d_model;
      case Dim::kVocab:
        return c.vocab_size;
      case Dim::kQDim:
        return int64_t{L.n_head} * c.head_dim;
      case Dim::kKvDim:
        return int64_t{L.n_head_kv} * c.head_dim;
      case Dim::kDff:
        return L.d_ff;
      case Dim::kHeadDim:
        return c.head_dim;
      case Dim::kExperts:
        return c.n_expert;
      case Dim::kRopeHalf:
        return (c.rope_dim > 0 ? c.rope_dim : c.head_dim) / 2;
    }
    return 0;
  };
  if (t.vector()) return Shape{size(t.outer)};
  if (t.stack != Dim::kNone) return Shape{size(t.stack), size(t.outer), size(t.inner)};
  return Shape{size(t.outer), size(t.inner)};
}

float InferredAttnScale(std::string_view gguf_name, const LlamaConfig& c) {
  const bool big = (gguf_name == "gemma2" && c.n_layers == 46) ||
                   (gguf_name == "gemma3" && c.n_layers == 62);
  if (!big || c.n_head <= 0) return 0.0f;
  return 1.0f / std::sqrt(static_cast<float>(c.d_model / c.n_head));
}

std::string ShapeDerivation(const TensorSpec& t) {
  if (t.vector()) return StrFormat("[%s]", DimName(t.outer));
  if (t.stack != Dim::kNone) {
    return StrFormat("[%s, %s, %s]", DimName(t.stack), DimName(t.outer), DimName(t.inner));
  }
  return StrFormat("[%s, %s]", DimName(t.outer), DimName(t.inner));
}

std::vector<StoredTensor> StoredTensors(const ArchSpec& arch) {
  std::vector<StoredTensor> out;
  const std::span<const TensorSpec> t = arch.tensors;
  for (size_t i = 0; i < t.size();) {
    size_t end = i + 1;
    if (t[i].fused_in != nullptr) {
      while (end < t.size() && t[end].fused_in != nullptr &&
             std::string_view(t[end].fused_in) == t[i].fused_in) {
        ++end;
      }
    }
    out.push_back({t[i].fused_in != nullptr ? t[i].fused_in : t[i].name, t.subspan(i, end - i)});
    i = end;
  }
  return out;
}

std::string StoredTensorName(const StoredTensor& s, int layer) {
  return s.per_layer() ? StrFormat("blk.%d.%s", layer, s.name) : std::string(s.name);
}

Shape StoredShape(const StoredTensor& s, const LlamaConfig& config, int layer) {
  Shape shape = ExpectedShape(s.parts.front(), config, layer);
  for (size_t i = 1; i < s.parts.size(); ++i) {
    shape.dims[0] += ExpectedShape(s.parts[i], config, layer)[0];
  }
  return shape;
}

std::string StoredShapeDerivation(const StoredTensor& s) {
  if (!s.fused()) return ShapeDerivation(s.parts.front());
  std::string rows;
  for (const TensorSpec& p : s.parts)
    rows += (rows.empty() ? "" : " + ") + std::string(DimName(p.outer));
  const TensorSpec& first = s.parts.front();
  return first.vector() ? StrFormat("[%s]", rows.c_str())
                        : StrFormat("[%s, %s]", rows.c_str(), DimName(first.inner));
}

}  // namespace weir::format
