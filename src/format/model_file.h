// ModelFile: what every model reader (GGUF, safetensors + config.json, llama2.c) produces, in one
// shape the engine understands: a config (LlamaConfig, which names its architecture's ArchSpec
// row), a tokenizer spec and named weight views.
//
// Tensor names are canonical GGUF names, whatever the source format. Which tensors a model has
// is its architecture's tensor table (format/arch_spec.h); the Llama ones are
//   token_embd.weight        [vocab, d_model]
//   output_norm.weight       [d_model]                      (F32)
//   output.weight            [vocab, d_model]               (absent when tied to token_embd)
//   blk.N.attn_norm.weight   [d_model]
//   blk.N.attn_q.weight      [n_head * head_dim, d_model]
//   blk.N.attn_k.weight      [n_head_kv * head_dim, d_model]
//   blk.N.attn_v.weight      [n_head_kv * head_dim, d_model]
//   blk.N.attn_output.weight [d_model, n_head * head_dim]
//   blk.N.ffn_norm.weight    [d_model]
//   blk.N.ffn_gate.weight    [d_ff, d_model]
//   blk.N.ffn_up.weight      [d_ff, d_model]
//   blk.N.ffn_down.weight    [d_model, d_ff]
// plus, optionally, rope_freqs.weight [rope_dim / 2] (F32 RoPE frequency factors, Llama 3.1),
// and Gemma 3 adds blk.N.attn_q_norm / attn_k_norm [head_dim], post_attention_norm and
// post_ffw_norm [d_model] (Gemma 2 the post-norms only). A file's fused tensors (Phi-3's
// attn_qkv, its ffn_up holding gate and up) are held split, as views of their parts under these
// names (SplitFusedTensors). Mixture-of-experts rows replace ffn_gate/up/down with
//   blk.N.ffn_gate_inp.weight   [n_expert, d_model]          (the router)
//   blk.N.ffn_gate_exps.weight  [n_expert, d_ff, d_model]
//   blk.N.ffn_up_exps.weight    [n_expert, d_ff, d_model]
//   blk.N.ffn_down_exps.weight  [n_expert, d_model, d_ff]
// Shapes are outermost first (see tensor/tensor_view.h).
//
// Thread safety: immutable after loading; views stay valid while the ModelFile lives.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "format/arch_spec.h"
#include "format/tokenizer_spec.h"
#include "tensor/rope_style.h"
#include "tensor/tensor_view.h"

namespace weir::format {

enum class FileFormat { kGguf, kSafetensors, kLlama2c };
const char* FileFormatName(FileFormat f);

// Per-layer dimensions. Usually equal across layers; structured pruning makes them differ.
struct LayerDims {
  int n_head = 0;
  int n_head_kv = 0;
  int d_ff = 0;
};

struct LlamaConfig {
  int d_model = 0;
  int n_layers = 0;
  int n_head = 0;     // of layer 0 / the unpruned model
  int n_head_kv = 0;
  int head_dim = 0;
  int d_ff = 0;
  int vocab_size = 0;
  int ctx_len = 0;    // training context length stated by the file (0 = unknown)
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rope_dim = 0;   // rotated dims per head (== head_dim for Llama)
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  bool tied_output = false;  // the output head is token_embd.weight
  std::vector<LayerDims> layers;  // n_layers entries

  // The architecture (format/arch_spec.h): its tensor table and fixed switches (QK-norm,
  // post-norms, activation). Never null; readers of Llama-only formats leave the default.
  const ArchSpec* arch = &LlamaArch();
  // Values of the architecture's switches that a file states. The defaults are Llama's.
  float embed_scale = 1.0f;          // x = token_embd[t] * embed_scale (Gemma: sqrt(d_model))
  float attn_scale = 0.0f;           // q.k multiplier; 0 = 1/sqrt(head_dim)
  float final_logit_softcap = 0.0f;  // logits = cap * tanh(logits / cap); 0 = none
  int sliding_window = 0;            // keys a sliding layer sees, its own included; 0 = none
  float rope_theta_sliding = 0.0f;   // RoPE base of sliding layers
  std::vector<uint8_t> layer_sliding;  // n_layers flags, 1 = sliding; empty = every layer global
  // Mixture of experts (arch->moe; 0 otherwise): each layer's MLP is n_expert experts of width
  // d_ff (the layer's), of which the router picks n_expert_used per token. Their weights are
  // softmax(router logits) over the chosen experts (expert_weights_norm, Mixtral and Qwen3's
  // norm_topk_prob) or the chosen experts' share of the softmax over all n_expert.
  int n_expert = 0;
  int n_expert_used = 0;
  bool expert_weights_norm = true;
  // Attention logit soft-capping (arch->attn_softcap, Gemma 2): each score q.k * AttnScale()
  // becomes cap * tanh(score / cap) before the softmax; 0 = none.
  float attn_logit_softcap = 0.0f;
  // Linear RoPE scaling (GGUF <arch>.rope.scaling.type "linear" with .factor; config.json
  // rope_scaling {"rope_type": "linear"}): positions are divided by this factor (llama.cpp's
  // freq_scale = 1 / factor) on the global layers, and on sliding ones when the architecture
  // says so (ArchSpec::rope_scale_sliding). 1 = none. Llama 3.1's per-pair factors are the
  // tensor rope_freqs.weight instead (TensorRole::kRopeFreqs).
  float rope_scaling_factor = 1.0f;

  bool IsSliding(int layer) const {
    return sliding_window > 0 && static_cast<size_t>(layer) < layer_sliding.size() &&
           layer_sliding[static_cast<size_t>(layer)] != 0;
  }
  float RopeTheta(int layer) const { return IsSliding(layer) ? rope_theta_sliding : rope_theta; }
  // The multiplier of positions in layer's RoPE angles: 1 / rope_scaling_factor, or 1.
  float RopeFreqScale(int layer) const {
    if (IsSliding(layer) && !arch->rope_scale_sliding) return 1.0f;
    return 1.0f / rope_scaling_factor;
  }
  float AttnScale() const {
    return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  bool IsLlama() const { return arch == &LlamaArch(); }
  bool IsMoe() const { return arch->moe; }
};
// The name says what the struct is now: the config of any architecture in format/arch_spec.h.
using ModelConfig = LlamaConfig;

// Anything a ModelFile must keep alive (a mapping, converted buffers).
struct Backing {
  virtual ~Backing() = default;
  // The caller will not read [p, p + n) through this backing again (its bytes were copied
  // elsewhere), so memory they hold may be returned; a range this backing does not hold is
  // ignored. Reading the range again stays valid (a mapping reads the file again).
  virtual void DoneReading(const void* p, uint64_t n) {
    (void)p;
    (void)n;
  }
};

struct ModelFile {
  std::string path;
  FileFormat format = FileFormat::kGguf;
  LlamaConfig config;
  TokenizerSpec tokenizer;
  std::map<std::string, TensorView> tensors;
  std::vector<std::string> tensor_order;  // as stored in the file
  // Human-readable metadata for `weir inspect` (key, value rendered as text).
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<std::shared_ptr<Backing>> backing;
  // Whether the tensors were copied into anonymous memory at load (WeightPlacement::kMemory).
  bool weights_in_memory = false;

  // Tensors stored tiled for the dense products (LoadOptions::tile_linear).
  int TiledTensorCount() const {
    int n = 0;
    for (const auto& [name, v] : tensors) n += v.layout == Layout::kTiled16;
    return n;
  }

  const TensorView* Find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
};

// Where a loaded model's weight bytes live.
enum class WeightPlacement {
  kMapped,  // read in place from the mapped file (or the reader's converted buffers)
  kMemory,  // copied at load into one anonymous region with huge pages advised: a slower start,
            // a faster decode (weights_in_memory.h)
  kAuto,    // kMemory when the weights fit comfortably in the memory available now, else kMapped
};

struct LoadOptions {
  // Tokenizer file to use instead of the one found beside the model (tokenizer.bin for
  // llama2.c checkpoints, tokenizer.json for safetensors).
  std::string tokenizer_path;
  WeightPlacement placement = WeightPlacement::kMapped;
  // When the weights are copied into memory: tile the linear layers' Q8_0 / Q4_0 weights
  // (kernels/tiled.h), if this CPU's kernels have a fast tiled product. Such a model serves
  // dense sessions only: sparsity policies index weight rows (Session refuses the combination).
  bool tile_linear = false;
  // Threads for that copy (nullptr: the caller's thread). Fresh pages are zeroed by the kernel
  // on first touch, most of a copy's time; threads touch theirs in parallel.
  ThreadPool* pool = nullptr;
};

// Opens a model by sniffing its content: GGUF magic, a directory or .safetensors file (with
// config.json beside it), or a llama2.c checkpoint. Validates the config and that every
// required tensor exists with the right shape.
Result<ModelFile> LoadModel(const std::string& path, const LoadOptions& options = {});

// Checks config consistency and the presence and shape of every tensor of the config's
// architecture (its ArchSpec tensor table). Readers call it last.
Status ValidateLlama(const ModelFile& model);

// Replaces each fused tensor of the config's architecture (TensorSpec::fused_in) that `model`
// holds by a zero-copy view of each part, under the part's own name (blk.N.attn_qkv.weight ->
// blk.N.attn_q/attn_k/attn_v.weight), in the tensor map and in tensor_order. Errors (Corrupt,
// naming the file and the tensor): a fused tensor whose shape is not its parts' rows summed by
// their row length, a part stored both inside the fused tensor and on its own, a part that
// does not start on a whole block. Readers of files that may hold fused tensors call it once,
// before ValidateLlama, which then checks the parts like any tensor (once: after the split a part
// may carry the fused tensor's name, ffn_up).
Status SplitFusedTensors(ModelFile* model);

}  // namespace weir::format
