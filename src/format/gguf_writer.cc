#include "format/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/checked_math.h"

namespace weir::format {

static_assert(std::endian::native == std::endian::little,
              "the GGUF writer encodes little-endian values in place");

namespace {

using ull = unsigned long long;

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}
void PutStr(std::string* out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out->append(s.data(), s.size());
}

// Chunk of tensor bytes produced and written at a time.
constexpr uint64_t kChunkBytes = 8ull << 20;

// Owns the temporary file until it is renamed into place; removes it otherwise.
class TempFile {
 public:
  TempFile(std::string tmp_path, std::string final_path)
      : tmp_(std::move(tmp_path)), final_(std::move(final_path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  Status Open() {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      return Status::IoError(
          StrFormat("%s: cannot create: %s", tmp_.c_str(), std::strerror(errno)));
    }
    return Status::Ok();
  }
  Status Write(const void* data, uint64_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n > (1ull << 30) ? (1ull << 30) : n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        return Status::IoError(StrFormat("%s: write failed after %llu bytes: %s", tmp_.c_str(),
                                         static_cast<ull>(written_),
                                         w == 0 ? "no progress" : std::strerror(errno)));
      }
      p += w;
      n -= static_cast<uint64_t>(w);
      written_ += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }
  Status WriteZeros(uint64_t n) {
    static const uint8_t kZeros[256] = {};
    while (n > 0) {
      uint64_t k = std::min<uint64_t>(n, sizeof(kZeros));
      WEIR_RETURN_IF_ERROR(Write(kZeros, k));
      n -= k;
    }
    return Status::Ok();
  }
  uint64_t written() const { return written_; }
  // Flushes to stable storage and renames over the final path.
  Status Commit() {
    if (::fdatasync(fd_) != 0) {
      return Status::IoError(
          StrFormat("%s: fdatasync failed: %s", tmp_.c_str(), std::strerror(errno)));
    }
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0)
      return Status::IoError(StrFormat("%s: close failed: %s", tmp_.c_str(), std::strerror(errno)));
    if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
      return Status::IoError(StrFormat("%s: cannot rename to %s: %s", tmp_.c_str(), final_.c_str(),
                                       std::strerror(errno)));
    }
    committed_ = true;
    return Status::Ok();
  }

 private:
  std::string tmp_, final_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
};

uint64_t PadTo(uint64_t n, uint64_t a) { return (a - n % a) % a; }

}  // namespace

// ---- GgufValue ----

#define WEIR_GGUF_SCALAR(Name, T, tag) \
  GgufValue GgufValue::Name(T v) {     \
    GgufValue g(GgufType::tag);        \
    Put<T>(&g.bytes_, v);              \
    return g;                          \
  }
WEIR_GGUF_SCALAR(U8, uint8_t, kUint8)
WEIR_GGUF_SCALAR(I8, int8_t, kInt8)
WEIR_GGUF_SCALAR(U16, uint16_t, kUint16)
WEIR_GGUF_SCALAR(I16, int16_t, kInt16)
WEIR_GGUF_SCALAR(U32, uint32_t, kUint32)
WEIR_GGUF_SCALAR(I32, int32_t, kInt32)
WEIR_GGUF_SCALAR(U64, uint64_t, kUint64)
WEIR_GGUF_SCALAR(I64, int64_t, kInt64)
WEIR_GGUF_SCALAR(F32, float, kFloat32)
WEIR_GGUF_SCALAR(F64, double, kFloat64)
#undef WEIR_GGUF_SCALAR

GgufValue GgufValue::Bool(bool v) {
  GgufValue g(GgufType::kBool);
  Put<uint8_t>(&g.bytes_, v ? 1 : 0);
  return g;
}

GgufValue GgufValue::String(std::string_view v) {
  GgufValue g(GgufType::kString);
  PutStr(&g.bytes_, v);
  return g;
}

GgufValue GgufValue::Array(GgufType elem, const std::vector<GgufValue>& elems) {
  GgufValue g(GgufType::kArray);
  g.elem_type_ = elem;
  Put<uint32_t>(&g.bytes_, static_cast<uint32_t>(elem));
  Put<uint64_t>(&g.bytes_, elems.size());
  for (size_t i = 0; i < elems.size(); ++i) {
    const GgufValue& e = elems[i];
    if (e.type_ != elem) {
      g.error_ = StrFormat("array of %s has a %s element at index %zu", GgufTypeName(elem),
                           GgufTypeName(e.type_), i);
    } else if (!e.error_.empty()) {
      g.error_ = StrFormat("element %zu: %s", i, e.error_.c_str());
    }
    // Elements carry no type tag of their own; nested arrays keep their element type + count.
    g.bytes_ += e.bytes_;
  }
  return g;
}

GgufValue GgufValue::StringArray(const std::vector<std::string>& v) {
  GgufValue g(GgufType::kArray);
  g.elem_type_ = GgufType::kString;
  Put<uint32_t>(&g.bytes_, static_cast<uint32_t>(GgufType::kString));
  Put<uint64_t>(&g.bytes_, v.size());
  for (const std::string& s : v) PutStr(&g.bytes_, s);
  return g;
}

namespace {
template <typename T>
void PutNumericArray(GgufType elem, const std::vector<T>& v, std::string* bytes) {
  Put<uint32_t>(bytes, static_cast<uint32_t>(elem));
  Put<uint64_t>(bytes, v.size());
  bytes->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
}  // namespace

GgufValue GgufValue::F32Array(const std::vector<float>& v) {
  GgufValue g(GgufType::kArray);
  g.elem_type_ = GgufType::kFloat32;
  PutNumericArray(GgufType::kFloat32, v, &g.bytes_);
  return g;
}
GgufValue GgufValue::I32Array(const std::vector<int32_t>& v) {
  GgufValue g(GgufType::kArray);
  g.elem_type_ = GgufType::kInt32;
  PutNumericArray(GgufType::kInt32, v, &g.bytes_);
  return g;
}
GgufValue GgufValue::U32Array(const std::vector<uint32_t>& v) {
  GgufValue g(GgufType::kArray);
  g.elem_type_ = GgufType::kUint32;
  PutNumericArray(GgufType::kUint32, v, &g.bytes_);
  return g;
}

// ---- GgufWriter ----

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {}

void GgufWriter::Add(std::string key, GgufValue value) {
  kvs_.push_back(Kv{std::move(key), std::move(value)});
}

void GgufWriter::AddTensor(std::string name, DType dtype, Shape shape, const void* data) {
  tensors_.push_back(Tensor{std::move(name), dtype, shape, data, nullptr});
}

void GgufWriter::AddByteTensor(std::string name, int64_t rows, int64_t row_bytes,
                               RowFiller fill) {
  tensors_.push_back(
      Tensor{std::move(name), DType::kF32, Shape{rows, row_bytes}, nullptr, std::move(fill), true});
}

uint64_t GgufWriter::RowBytesOf(const Tensor& t) {
  return t.bytes ? static_cast<uint64_t>(t.shape.cols()) : RowBytes(t.dtype, t.shape.cols());
}

void GgufWriter::AddTensor(std::string name, DType dtype, Shape shape, RowFiller fill) {
  tensors_.push_back(Tensor{std::move(name), dtype, shape, nullptr, std::move(fill)});
}

Status GgufWriter::Validate() const {
  if (alignment_ == 0 || !std::has_single_bit(alignment_)) {
    return Status::InvalidArgument(
        StrFormat("GGUF writer: alignment %u is not a power of two", alignment_));
  }
  std::set<std::string> keys;
  for (const Kv& kv : kvs_) {
    if (kv.key.empty()) return Status::InvalidArgument("GGUF writer: empty metadata key");
    if (!keys.insert(kv.key).second) {
      return Status::InvalidArgument(
          StrFormat("GGUF writer: metadata key '%s' added twice", kv.key.c_str()));
    }
    if (kv.key == "general.alignment") {
      return Status::InvalidArgument(
          "GGUF writer: general.alignment is written from the constructor's alignment; do not add "
          "it");
    }
    if (!kv.value.error().empty()) {
      return Status::InvalidArgument(
          StrFormat("GGUF writer: metadata '%s': %s", kv.key.c_str(), kv.value.error().c_str()));
    }
  }
  std::set<std::string> names;
  for (const Tensor& t : tensors_) {
    const char* n = t.name.c_str();
    if (t.name.empty() || t.name.size() > static_cast<size_t>(kGgufMaxTensorName)) {
      return Status::InvalidArgument(
          StrFormat("GGUF writer: tensor name '%s' has %zu bytes, expected 1..%d", n, t.name.size(),
                    kGgufMaxTensorName));
    }
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument(StrFormat("GGUF writer: tensor '%s' added twice", n));
    }
    if (t.shape.ndim < 1 || t.shape.ndim > kGgufMaxDims) {
      return Status::InvalidArgument(
          StrFormat("GGUF writer: tensor '%s' has %d dimensions, expected 1..%d", n, t.shape.ndim,
                    kGgufMaxDims));
    }
    uint64_t numel = 1;
    for (int d = 0; d < t.shape.ndim; ++d) {
      if (t.shape.dims[d] <= 0 ||
          !CheckedMul(numel, static_cast<uint64_t>(t.shape.dims[d]), &numel) ||
          numel > static_cast<uint64_t>(INT64_MAX)) {
        return Status::InvalidArgument(StrFormat("GGUF writer: tensor '%s' has invalid shape %s", n,
                                                 t.shape.ToString().c_str()));
      }
    }
    if (!t.bytes && t.shape.cols() % BlockSize(t.dtype) != 0) {
      return Status::InvalidArgument(StrFormat(
          "GGUF writer: tensor '%s' %s: row length %lld is not a multiple of the %s block size %d",
          n, t.shape.ToString().c_str(), static_cast<long long>(t.shape.cols()), DTypeName(t.dtype),
          BlockSize(t.dtype)));
    }
    uint64_t nbytes;
    if (!CheckedMul(RowBytesOf(t), static_cast<uint64_t>(t.shape.rows()), &nbytes)) {
      return Status::InvalidArgument(StrFormat("GGUF writer: tensor '%s' byte size overflows", n));
    }
    if (!t.data && !t.fill) {
      return Status::InvalidArgument(
          StrFormat("GGUF writer: tensor '%s' has neither data nor a row filler", n));
    }
  }
  return Status::Ok();
}

Status GgufWriter::Write(const std::string& path,
                         const std::function<void(double)>& progress) const {
  WEIR_RETURN_IF_ERROR(Validate().WithContext(path));

  // Header, metadata and tensor infos.
  std::string head;
  Put<uint32_t>(&head, kGgufMagic);
  Put<uint32_t>(&head, kGgufVersion);
  Put<uint64_t>(&head, tensors_.size());
  bool write_alignment = alignment_ != kGgufDefaultAlignment;
  Put<uint64_t>(&head, kvs_.size() + (write_alignment ? 1 : 0));
  for (const Kv& kv : kvs_) {
    PutStr(&head, kv.key);
    Put<uint32_t>(&head, static_cast<uint32_t>(kv.value.type()));
    head += kv.value.encoded();
  }
  if (write_alignment) {
    PutStr(&head, "general.alignment");
    Put<uint32_t>(&head, static_cast<uint32_t>(GgufType::kUint32));
    Put<uint32_t>(&head, alignment_);
  }
  uint64_t offset = 0;  // relative to the data section
  std::vector<uint64_t> nbytes(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    nbytes[i] = RowBytesOf(t) * static_cast<uint64_t>(t.shape.rows());
    PutStr(&head, t.name);
    Put<uint32_t>(&head, static_cast<uint32_t>(t.shape.ndim));
    for (int d = t.shape.ndim - 1; d >= 0; --d)
      Put<uint64_t>(&head, static_cast<uint64_t>(t.shape.dims[d]));
    Put<uint32_t>(&head, t.bytes ? kGgmlTypeI8 : static_cast<uint32_t>(t.dtype));
    Put<uint64_t>(&head, offset);
    uint64_t padded;
    if (!CheckedAdd(nbytes[i], PadTo(nbytes[i], alignment_), &padded) ||
        !CheckedAdd(offset, padded, &offset)) {
      return Status::InvalidArgument(StrFormat("%s: total tensor bytes overflow", path.c_str()));
    }
  }
  head.append(PadTo(head.size(), alignment_), '\0');
  const double total = static_cast<double>(head.size() + offset);

  TempFile out(path + ".tmp", path);
  WEIR_RETURN_IF_ERROR(out.Open());
  WEIR_RETURN_IF_ERROR(out.Write(head.data(), head.size()));

  uint64_t buf_bytes = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!tensors_[i].fill) continue;
    uint64_t row = RowBytesOf(tensors_[i]);
    buf_bytes = std::max(buf_bytes, std::min(nbytes[i], std::max(row, kChunkBytes / row * row)));
  }
  AlignedBuffer buf;
  if (buf_bytes > 0 && !buf.Reset(buf_bytes)) {
    return Status::OutOfMemory(StrFormat("%s: cannot allocate a %llu-byte write buffer",
                                         path.c_str(), static_cast<ull>(buf_bytes)));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    const uint64_t row_bytes = RowBytesOf(t);
    const int64_t rows = t.shape.rows();
    const int64_t rows_per_chunk =
        static_cast<int64_t>(std::max<uint64_t>(1, kChunkBytes / row_bytes));
    for (int64_t r = 0; r < rows; r += rows_per_chunk) {
      int64_t end = std::min(rows, r + rows_per_chunk);
      uint64_t n = static_cast<uint64_t>(end - r) * row_bytes;
      if (t.fill) {
        Status st = t.fill(r, end, buf.data<uint8_t>());
        if (!st.ok()) {
          return st.WithContext(StrFormat("%s: tensor %s rows [%lld, %lld)", path.c_str(),
                                          t.name.c_str(), static_cast<long long>(r),
                                          static_cast<long long>(end)));
        }
        WEIR_RETURN_IF_ERROR(out.Write(buf.data(), n));
      } else {
        WEIR_RETURN_IF_ERROR(out.Write(
            static_cast<const uint8_t*>(t.data) + static_cast<uint64_t>(r) * row_bytes, n));
      }
      if (progress) progress(static_cast<double>(out.written()) / total);
    }
    WEIR_RETURN_IF_ERROR(out.WriteZeros(PadTo(nbytes[i], alignment_)));
  }
  WEIR_CHECK(out.written() == head.size() + offset);
  WEIR_RETURN_IF_ERROR(out.Commit());
  if (progress) progress(1.0);
  return Status::Ok();
}

}  // namespace weir::format
