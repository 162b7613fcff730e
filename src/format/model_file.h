// ModelFile: what every model reader (GGUF, safetensors + config.json, llama2.c) produces, in one
// shape the engine understands: a Llama config, a tokenizer spec and named weight views.
//
// Tensor names are canonical GGUF names, whatever the source format:
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
// Shapes are outermost first (see tensor/tensor_view.h).
//
// Thread safety: immutable after loading; views stay valid while the ModelFile lives.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
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
};

// Anything a ModelFile must keep alive (a mapping, converted buffers).
struct Backing {
  virtual ~Backing() = default;
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

  const TensorView* Find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
};

struct LoadOptions {
  // Tokenizer file to use instead of the one found beside the model (tokenizer.bin for
  // llama2.c checkpoints, tokenizer.json for safetensors).
  std::string tokenizer_path;
};

// Opens a model by sniffing its content: GGUF magic, a directory or .safetensors file (with
// config.json beside it), or a llama2.c checkpoint. Validates the config and that every
// required tensor exists with the right shape.
Result<ModelFile> LoadModel(const std::string& path, const LoadOptions& options = {});

// Checks config consistency and every tensor's presence and shape. Readers call it last.
Status ValidateLlama(const ModelFile& model);

}  // namespace weir::format
