// GGUF reader: parses and validates a GGUF v2/v3 file held in memory (normally a MappedFile),
// gives typed access to its metadata and tensor directory, and loads a Llama model from it.
//
// Byte layout (every integer little-endian; v2 and v3 differ only in that v3 may also be written
// big-endian, which weir rejects as a bad version number; v1 used u32 counts and is rejected):
//
//   offset  size     field
//   0       4        magic        "GGUF" (47 47 55 46)
//   4       4        u32 version  2 or 3
//   8       8        u64 n_tensors
//   16      8        u64 n_kv
//   24      ...      n_kv metadata entries, each:
//                      str  key          str = u64 byte length, then the bytes (no terminator)
//                      u32  value type   GgufType, 0..12 (format/gguf_format.h)
//                      ...  value        u8/i8/bool 1 byte; u16/i16 2; u32/i32/f32 4;
//                                        u64/i64/f64 8; string: str;
//                                        array: u32 element type, u64 count, count values
//                                        (an element may itself be an array)
//           ...      n_tensors tensor infos, each:
//                      str  name
//                      u32  n_dims       1..4
//                      u64  ne[n_dims]   dimensions, innermost (contiguous) first
//                      u32  type         ggml type id (GgmlTypeName / GgmlLayout)
//                      u64  offset       from the start of the data section; a multiple of the
//                                        alignment
//           ...      zero padding to the next multiple of the alignment: the u32 metadata value
//                    general.alignment, default 32, a power of two
//   data    ...      the data section: tensor bytes. A tensor is ne[1]*ne[2]*ne[3] rows of
//                    ne[0] values; a row is ne[0]/block_size blocks of block_bytes each.
//
// Everything read from the file is validated before use, overflow-safe: string lengths and
// array counts against the bytes left (so a hostile count never allocates), array nesting depth,
// bool bytes, duplicate keys and tensor names, n_dims, dims > 0, element and byte counts,
// whole blocks per row, alignment a power of two, each tensor's offset aligned and its bytes
// inside the file. Metadata values are decoded lazily from the mapping; only the directory
// (keys, value positions, tensor infos) is copied.
//
// Thread safety: a GgufFile is immutable after parsing; its methods may be called from any
// thread. It keeps its bytes alive (shared ownership of the backing).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/gguf_format.h"
#include "format/model_file.h"
#include "format/tokenizer_spec.h"
#include "tensor/dtype.h"
#include "tensor/tensor_view.h"

namespace weir::format {

// One metadata entry: where its value lies in the file. Scalars and arrays are decoded on
// demand by GgufFile's getters.
struct GgufKv {
  std::string key;
  GgufType type = GgufType::kUint8;
  uint64_t value_offset = 0;  // absolute file offset of the value (just after the type tag)
  uint64_t value_bytes = 0;   // encoded size of the value
  // Arrays only: element type and count; value_offset then points at the first element.
  GgufType elem_type = GgufType::kUint8;
  uint64_t count = 0;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;      // ggml type id as stored
  std::optional<DType> dtype;  // nullopt when weir cannot compute with this type (e.g. Q4_K)
  Shape shape;                 // outermost first (ne[] reversed)
  uint64_t offset = 0;         // absolute file offset of the first byte
  uint64_t nbytes = 0;         // bytes of data
};

class GgufFile {
 public:
  // Maps and parses the file at `path`.
  static Result<GgufFile> Open(const std::string& path);
  // Parses `size` bytes at `data`, which `keepalive` owns (may be null when the caller keeps
  // the bytes alive itself). `name` is used in messages.
  static Result<GgufFile> Parse(std::string name, const uint8_t* data, uint64_t size,
                                std::shared_ptr<Backing> keepalive);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section
  const uint8_t* data() const { return data_; }
  const std::shared_ptr<Backing>& backing() const { return keepalive_; }

  // ---- metadata ----
  const std::vector<GgufKv>& kvs() const { return kvs_; }
  const GgufKv* FindKv(std::string_view key) const;
  bool Has(std::string_view key) const { return FindKv(key) != nullptr; }

  // Typed getters: NotFound when the key is absent, InvalidArgument when its type does not fit.
  // Integer getters accept any integer type whose value is in range; GetF32 accepts f32 and f64.
  Result<std::string> GetString(std::string_view key) const;
  Result<uint32_t> GetU32(std::string_view key) const;
  Result<int32_t> GetI32(std::string_view key) const;
  Result<uint64_t> GetU64(std::string_view key) const;
  Result<int64_t> GetI64(std::string_view key) const;
  Result<float> GetF32(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<float>> GetF32Array(std::string_view key) const;    // f32 or f64 elements
  Result<std::vector<int32_t>> GetI32Array(std::string_view key) const;  // integer elements
  Result<std::vector<int64_t>> GetI64Array(std::string_view key) const;  // integer elements

  // The value as one line of text for `weir inspect`: numbers, true/false, strings (control
  // characters escaped, long ones cut with their length noted), arrays summarised as
  // "[string x 32000]" (numeric arrays of up to 16 elements also list their values).
  std::string RenderValue(const GgufKv& kv) const;
  // (key, RenderValue) for every entry, in file order.
  std::vector<std::pair<std::string, std::string>> RenderMetadata() const;

  // ---- tensors ----
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  const uint8_t* TensorData(const GgufTensorInfo& t) const { return data_ + t.offset; }

 private:
  class Parser;
  GgufFile() = default;

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::shared_ptr<Backing> keepalive_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Reads the hyperparameters of the file's architecture (general.architecture names a row of
// format/arch_spec.h, whose name prefixes the keys: llama.*, gemma3.*, ...; per-layer arrays
// allowed for head_count, head_count_kv and feed_forward_length). vocab_size comes from
// token_embd.weight's shape, else the token list, else <arch>.vocab_size.
Result<LlamaConfig> ReadGgufLlamaConfig(const GgufFile& file);

// Reads the tokenizer.ggml.* keys. Kind::kNone when the file has no tokenizer (or "no_vocab").
Result<TokenizerSpec> ReadGgufTokenizer(const GgufFile& file);

// Loads a model: config, tokenizer, tensor views into the mapping (which the ModelFile
// keeps alive), rendered metadata; then ValidateLlama. A tensor the model needs whose type weir
// cannot compute with is an error ("unsupported type Q4_K in tensor blk.0.ffn_down.weight");
// other tensors of such types are left out.
Result<ModelFile> LoadGgufModel(const std::string& path);
Result<ModelFile> LoadGgufModel(const GgufFile& file);

}  // namespace weir::format
