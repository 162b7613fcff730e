// GgufWriter: builds a GGUF v3 file (layout in format/gguf_reader.h) from metadata values and
// tensors. A tensor's bytes come either from memory or from a callback that fills a chunk of
// rows at a time, so a multi-GB model is written streaming with a few MiB of buffer. The file is
// written to `path + ".tmp"` and renamed over `path` only when complete, so a failure never
// leaves a half-written file at `path`. Output is deterministic: the same calls give the same
// bytes (metadata and tensors in the order added, zero padding, no timestamps).
//
// Thread safety: none; one owner builds and writes. Row callbacks run on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/gguf_format.h"
#include "tensor/dtype.h"
#include "tensor/tensor_view.h"

namespace weir::format {

// An encoded metadata value of any GGUF type, arrays (also nested) included.
class GgufValue {
 public:
  static GgufValue U8(uint8_t v);
  static GgufValue I8(int8_t v);
  static GgufValue U16(uint16_t v);
  static GgufValue I16(int16_t v);
  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue U64(uint64_t v);
  static GgufValue I64(int64_t v);
  static GgufValue F32(float v);
  static GgufValue F64(double v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string_view v);
  // An array whose elements all have type `elem` (a mismatch makes Write fail). An empty
  // array is allowed.
  static GgufValue Array(GgufType elem, const std::vector<GgufValue>& elems);
  static GgufValue StringArray(const std::vector<std::string>& v);
  static GgufValue F32Array(const std::vector<float>& v);
  static GgufValue I32Array(const std::vector<int32_t>& v);
  static GgufValue U32Array(const std::vector<uint32_t>& v);

  GgufType type() const { return type_; }
  GgufType elem_type() const { return elem_type_; }
  // Bytes after the value's type tag (for arrays: element type, count, elements).
  const std::string& encoded() const { return bytes_; }
  // Empty when valid; otherwise why not (mixed element types).
  const std::string& error() const { return error_; }

 private:
  GgufValue(GgufType t) : type_(t) {}  // NOLINT
  GgufType type_;
  GgufType elem_type_ = GgufType::kUint8;
  std::string bytes_;
  std::string error_;
};

class GgufWriter {
 public:
  // alignment must be a power of two; when it is not 32, general.alignment is written.
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  // Metadata, written in the order added. Duplicate keys make Write fail.
  void Add(std::string key, GgufValue value);
  void AddString(std::string key, std::string_view v) { Add(std::move(key), GgufValue::String(v)); }
  void AddU32(std::string key, uint32_t v) { Add(std::move(key), GgufValue::U32(v)); }
  void AddI32(std::string key, int32_t v) { Add(std::move(key), GgufValue::I32(v)); }
  void AddU64(std::string key, uint64_t v) { Add(std::move(key), GgufValue::U64(v)); }
  void AddF32(std::string key, float v) { Add(std::move(key), GgufValue::F32(v)); }
  void AddBool(std::string key, bool v) { Add(std::move(key), GgufValue::Bool(v)); }

  // Fills rows [row_begin, row_end) of a tensor, encoded in its dtype, into dst (which holds
  // exactly (row_end - row_begin) * row_bytes bytes). A row is the innermost dimension; a
  // tensor of shape [a, b, c] has a*b rows of c values. Called with increasing, contiguous
  // ranges covering every row once.
  using RowFiller = std::function<Status(int64_t row_begin, int64_t row_end, uint8_t* dst)>;

  // Tensors, written in the order added. `shape` is outermost first. Names must be unique and
  // 1..63 bytes; 1..4 dimensions, each > 0; rows a whole number of blocks. Checked by Write.
  // `data` (RowBytes * rows bytes) must stay valid until Write returns.
  void AddTensor(std::string name, DType dtype, Shape shape, const void* data);
  void AddTensor(std::string name, DType dtype, Shape shape, RowFiller fill);
  // A tensor of raw bytes, ggml type I8, shape [rows, row_bytes] (weir's own encodings, e.g. the
  // sparse column records of a weir pack); `fill` writes whole rows as for AddTensor.
  void AddByteTensor(std::string name, int64_t rows, int64_t row_bytes, RowFiller fill);

  // Writes the file. `progress`, when set, is called with the fraction of bytes written.
  Status Write(const std::string& path,
               const std::function<void(double)>& progress = nullptr) const;

 private:
  struct Kv {
    std::string key;
    GgufValue value;
  };
  struct Tensor {
    std::string name;
    DType dtype;
    Shape shape;
    const void* data = nullptr;
    RowFiller fill;
    bool bytes = false;  // ggml I8: one byte per value, dtype unused
  };
  static uint64_t RowBytesOf(const Tensor& t);
  Status Validate() const;

  uint32_t alignment_;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace weir::format
