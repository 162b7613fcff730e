// PackFile: opens and validates a weir pack (layout in weir_pack_format.h) and describes it:
// the Llama config and tokenizer, where each static tensor lies in the file, and the geometry
// of every layer group's bundle tensor. It does not load weights: the streaming engine reads
// them through a BlockDevice (model/streaming_weights.h), and `weir inspect` prints this.
//
// Validation, on top of the GGUF reader's (offsets, sizes, alignment of the container): the
// weir.pack.* keys (version, layout, group arrays of equal length covering layers 0..n-1 in
// order, each group within --group's size and of one d_ff); general.alignment 4096 and every
// tensor page-aligned; each bundle tensor present with a supported type and shape
// [d_ff * n * 3, d_model] (column layout: ffn_down [d_ff * n, d_model] and ffn_in
// [d_model * n * 2, d_ff] of one type); the static tensors with ValidateLlama's shape and type rules.
//
// Thread safety: immutable after Open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/gguf_reader.h"
#include "format/model_file.h"
#include "format/tokenizer_spec.h"
#include "format/weir_pack_format.h"

namespace weir::format {

// Where one static tensor lies in the file.
struct PackTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t offset = 0;  // absolute file offset (page-aligned)
  uint64_t nbytes = 0;
  Layout layout = Layout::kRowMajor;  // kTiled16 when stored tiled (weir.pack.tiled_static)
};

class PackFile {
 public:
  // Maps the file to parse it. The mapping is kept until the PackFile goes (views of its header
  // only are ever touched, so it costs no more resident memory than the header's pages).
  static Result<PackFile> Open(const std::string& path);
  // Validates an already parsed GGUF file as a pack.
  static Result<PackFile> FromGguf(GgufFile file);
  // True when `file` says it is a pack (has weir.pack.version), whatever its validity.
  static bool IsPack(const GgufFile& file);

  const std::string& path() const { return gguf_.path(); }
  uint64_t file_size() const { return gguf_.file_size(); }
  const LlamaConfig& config() const { return config_; }
  const TokenizerSpec& tokenizer() const { return tokenizer_; }
  // Static tensors in file order, by canonical name.
  const std::vector<PackTensor>& static_tensors() const { return statics_; }
  const PackTensor* FindStatic(const std::string& name) const;
  const std::vector<PackGroup>& groups() const { return groups_; }
  // The group holding `layer`'s MLP.
  const PackGroup& GroupOf(int layer) const {
    return groups_[static_cast<size_t>(group_of_[static_cast<size_t>(layer)])];
  }
  int group_size() const { return group_size_; }         // --group as asked
  PackLayout layout() const { return layout_; }
  // kExperts with channel records (kPackLayoutExpertColumns, `weir pack --layout
  // experts-columns`).
  bool expert_columns() const { return expert_columns_; }
  const std::string& down_t() const { return down_t_; }  // "exact" or "requantized"
  const std::string& source() const { return source_; }
  // (key, value as text) for every metadata entry, for `weir inspect --metadata`.
  std::vector<std::pair<std::string, std::string>> RenderMetadata() const {
    return gguf_.RenderMetadata();
  }

  // Adds to `file` the MLP tensors the pack's groups replace (ffn_gate/up/down, or an experts
  // pack's stacks) as views with their shapes and types and no data, for what needs the model's
  // shape but computes the MLP elsewhere (the streaming engine, `weir plan`, `weir sim`).
  void AddMlpStandIns(ModelFile* file) const;

  uint64_t static_bytes() const;  // sum of the static tensors' bytes
  uint64_t bundle_bytes() const;  // sum of the MLP tensors' bytes (bundles, or in + down)
  const GgufFile& gguf() const { return gguf_; }

 private:
  explicit PackFile(GgufFile f) : gguf_(std::move(f)) {}
  Status Parse();
  Status ParseExperts(const std::vector<int64_t>& firsts, const std::vector<int64_t>& counts);

  GgufFile gguf_;
  LlamaConfig config_;
  TokenizerSpec tokenizer_;
  std::vector<PackTensor> statics_;
  std::vector<PackGroup> groups_;
  std::vector<int> group_of_;  // per layer
  int group_size_ = 0;
  PackLayout layout_ = PackLayout::kBundles;
  bool expert_columns_ = false;
  std::string down_t_, source_;
};

}  // namespace weir::format
