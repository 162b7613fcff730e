// GgufFile: parsing and validation of the container, typed metadata access and rendering.
// The Llama-specific loading lives in gguf_llama_loader.cc.
#include "format/gguf_reader.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <limits>

#include "base/checked_math.h"
#include "base/printable.h"
#include "format/mapped_file.h"

namespace weir::format {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader decodes little-endian values in place");

namespace {

using ull = unsigned long long;

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string Int128ToString(__int128 v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  unsigned __int128 u =
      neg ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string s;
  while (u > 0) {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  return neg ? "-" + s : s;
}

// Shortest text that reads back as the same value.
template <typename F>
std::string FloatToString(F v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Decodes an integer value of type t at p (t must be an integer type).
__int128 DecodeInt(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::kUint8:
      return Load<uint8_t>(p);
    case GgufType::kInt8:
      return Load<int8_t>(p);
    case GgufType::kUint16:
      return Load<uint16_t>(p);
    case GgufType::kInt16:
      return Load<int16_t>(p);
    case GgufType::kUint32:
      return Load<uint32_t>(p);
    case GgufType::kInt32:
      return Load<int32_t>(p);
    case GgufType::kUint64:
      return Load<uint64_t>(p);
    case GgufType::kInt64:
      return Load<int64_t>(p);
    default:
      return 0;
  }
}

double DecodeFloat(GgufType t, const uint8_t* p) {
  return t == GgufType::kFloat32 ? static_cast<double>(Load<float>(p)) : Load<double>(p);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Parser: walks the file once, validating as it goes.

class GgufFile::Parser {
 public:
  explicit Parser(GgufFile* f) : f_(f), size_(f->size_), data_(f->data_) {}

  Status Run() {
    WEIR_RETURN_IF_ERROR(ReadHeader());
    WEIR_RETURN_IF_ERROR(ReadKvs());
    WEIR_RETURN_IF_ERROR(ReadAlignment());
    WEIR_RETURN_IF_ERROR(ReadTensorInfos());
    return PlaceTensors();
  }

 private:
  const char* path() const { return f_->path_.c_str(); }
  uint64_t remaining() const { return size_ - pos_; }

  Status Truncated(const std::string& what, uint64_t need) const {
    return Status::Corrupt(StrFormat(
        "%s: %s at offset %llu needs %llu bytes but the file ends at %llu", path(), what.c_str(),
        static_cast<ull>(pos_), static_cast<ull>(need), static_cast<ull>(size_)));
  }
  // Each Read* takes a callable giving the field's name, built only when an error is reported.
  template <typename T, typename What>
  Status Read(T* out, const What& what) {
    if (!RangeInside(pos_, sizeof(T), size_)) return Truncated(what(), sizeof(T));
    *out = Load<T>(data_ + pos_);
    pos_ += sizeof(T);
    return Status::Ok();
  }
  template <typename What>
  Status ReadStr(std::string_view* out, const What& what) {
    uint64_t len = 0;
    WEIR_RETURN_IF_ERROR(Read(&len, [&] { return what() + " (string length)"; }));
    if (!RangeInside(pos_, len, size_)) {
      return Status::Corrupt(StrFormat(
          "%s: %s: string length %llu at offset %llu exceeds the %llu bytes left in the file",
          path(), what().c_str(), static_cast<ull>(len), static_cast<ull>(pos_ - 8),
          static_cast<ull>(remaining())));
    }
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }
  template <typename What>
  Status ReadValueType(GgufType* out, const What& what) {
    uint32_t raw = 0;
    WEIR_RETURN_IF_ERROR(Read(&raw, what));
    if (raw >= kGgufTypeCount) {
      return Status::Corrupt(
          StrFormat("%s: %s: unknown value type %u at offset %llu (valid: 0..%u)", path(),
                    what().c_str(), raw, static_cast<ull>(pos_ - 4), kGgufTypeCount - 1));
    }
    *out = static_cast<GgufType>(raw);
    return Status::Ok();
  }

  Status ReadHeader() {
    auto hdr = [](const char* field) { return [field] { return std::string("header ") + field; }; };
    uint32_t magic = 0;
    if (size_ < 4) {
      return Status::InvalidArgument(
          StrFormat("%s: not a GGUF file: %llu bytes is too short for the magic", path(),
                    static_cast<ull>(size_)));
    }
    WEIR_RETURN_IF_ERROR(Read(&magic, hdr("magic")));
    if (magic != kGgufMagic) {
      return Status::InvalidArgument(
          StrFormat("%s: not a GGUF file: magic is 0x%08x, expected 0x%08x (\"GGUF\")", path(),
                    magic, kGgufMagic));
    }
    WEIR_RETURN_IF_ERROR(Read(&f_->version_, hdr("version")));
    if (f_->version_ != 2 && f_->version_ != 3) {
      const char* hint = f_->version_ == 1       ? " (v1 uses 32-bit counts; re-convert the file)"
                         : f_->version_ > 0xffff ? " (a big-endian file?)"
                                                 : "";
      return Status::Unsupported(
          StrFormat("%s: header version: GGUF version %u is not supported, expected 2 or 3%s",
                    path(), f_->version_, hint));
    }
    WEIR_RETURN_IF_ERROR(Read(&n_tensors_, hdr("tensor count")));
    WEIR_RETURN_IF_ERROR(Read(&n_kv_, hdr("metadata count")));
    return Status::Ok();
  }

  // Validates the value of type `type` at pos_ and moves past it. `key` and `where` name it.
  Status SkipValue(GgufType type, int depth, const std::string& key, const char* where) {
    auto what = [&] { return StrFormat("metadata '%s' %s", Printable(key).c_str(), where); };
    switch (type) {
      case GgufType::kString: {
        std::string_view s;
        return ReadStr(&s, what);
      }
      case GgufType::kBool: {
        uint8_t b = 0;
        WEIR_RETURN_IF_ERROR(Read(&b, what));
        if (b > 1) {
          return Status::Corrupt(
              StrFormat("%s: %s: bool value is %u at offset %llu, expected 0 or 1", path(),
                        what().c_str(), b, static_cast<ull>(pos_ - 1)));
        }
        return Status::Ok();
      }
      case GgufType::kArray: {
        if (depth >= kGgufMaxArrayDepth) {
          return Status::Corrupt(StrFormat("%s: %s: arrays nested deeper than %d at offset %llu",
                                           path(), what().c_str(), kGgufMaxArrayDepth,
                                           static_cast<ull>(pos_)));
        }
        GgufType elem = GgufType::kUint8;
        uint64_t count = 0;
        WEIR_RETURN_IF_ERROR(ReadValueType(&elem, [&] { return what() + " element type"; }));
        WEIR_RETURN_IF_ERROR(Read(&count, [&] { return what() + " element count"; }));
        return SkipArrayElements(elem, count, depth + 1, key);
      }
      default: {
        uint64_t n = GgufScalarBytes(type);
        if (!RangeInside(pos_, n, size_)) return Truncated(what(), n);
        pos_ += n;
        return Status::Ok();
      }
    }
  }

  Status SkipArrayElements(GgufType elem, uint64_t count, int depth, const std::string& key) {
    // The least bytes one element can take bounds the count before anything loops on it.
    uint64_t min_bytes = elem == GgufType::kString  ? 8
                         : elem == GgufType::kArray ? 12
                                                    : GgufScalarBytes(elem);
    if (count > remaining() / min_bytes) {
      return Status::Corrupt(
          StrFormat("%s: metadata '%s': array of %llu %s elements at offset %llu cannot fit in the "
                    "%llu bytes left in the file",
                    path(), Printable(key).c_str(), static_cast<ull>(count), GgufTypeName(elem),
                    static_cast<ull>(pos_), static_cast<ull>(remaining())));
    }
    if (elem == GgufType::kString || elem == GgufType::kArray || elem == GgufType::kBool) {
      for (uint64_t i = 0; i < count; ++i) {
        WEIR_RETURN_IF_ERROR(SkipValue(elem, depth, key, "array element"));
      }
      return Status::Ok();
    }
    pos_ += count * min_bytes;  // fits: count * min_bytes <= remaining()
    return Status::Ok();
  }

  Status ReadKvs() {
    // Smallest entry: 8-byte key length, a 1-byte key, the type tag and a 1-byte value.
    constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
    if (n_kv_ > remaining() / kMinKvBytes) {
      return Status::Corrupt(StrFormat(
          "%s: header metadata count: %llu entries cannot fit in the %llu bytes after the header",
          path(), static_cast<ull>(n_kv_), static_cast<ull>(remaining())));
    }
    f_->kvs_.reserve(n_kv_);
    for (uint64_t i = 0; i < n_kv_; ++i) {
      std::string_view key;
      WEIR_RETURN_IF_ERROR(ReadStr(
          &key, [&] { return StrFormat("metadata entry #%llu key", static_cast<ull>(i)); }));
      if (key.empty()) {
        return Status::Corrupt(StrFormat("%s: metadata entry #%llu at offset %llu has an empty key",
                                         path(), static_cast<ull>(i), static_cast<ull>(pos_ - 8)));
      }
      GgufKv kv;
      kv.key = std::string(key);
      if (f_->kv_index_.count(kv.key)) {
        return Status::Corrupt(StrFormat("%s: metadata key '%s' appears twice (entry #%llu)",
                                         path(), Printable(kv.key).c_str(), static_cast<ull>(i)));
      }
      WEIR_RETURN_IF_ERROR(ReadValueType(&kv.type, [&] {
        return StrFormat("metadata '%s' value type", Printable(kv.key).c_str());
      }));
      uint64_t start = pos_;
      if (kv.type == GgufType::kArray) {
        WEIR_RETURN_IF_ERROR(ReadValueType(&kv.elem_type, [&] {
          return StrFormat("metadata '%s' array element type", Printable(kv.key).c_str());
        }));
        WEIR_RETURN_IF_ERROR(Read(&kv.count, [&] {
          return StrFormat("metadata '%s' array count", Printable(kv.key).c_str());
        }));
        kv.value_offset = pos_;
        WEIR_RETURN_IF_ERROR(SkipArrayElements(kv.elem_type, kv.count, 1, kv.key));
      } else {
        kv.value_offset = pos_;
        WEIR_RETURN_IF_ERROR(SkipValue(kv.type, 0, kv.key, "value"));
      }
      kv.value_bytes = pos_ - start;
      f_->kv_index_.emplace(kv.key, f_->kvs_.size());
      f_->kvs_.push_back(std::move(kv));
    }
    return Status::Ok();
  }

  Status ReadAlignment() {
    const GgufKv* kv = f_->FindKv("general.alignment");
    if (!kv) return Status::Ok();
    if (!GgufIsInteger(kv->type)) {
      return Status::Corrupt(StrFormat("%s: metadata general.alignment has type %s, expected u32",
                                       path(), GgufTypeName(kv->type)));
    }
    __int128 v = DecodeInt(kv->type, data_ + kv->value_offset);
    if (v <= 0 || v > std::numeric_limits<uint32_t>::max() ||
        !std::has_single_bit(static_cast<uint32_t>(v))) {
      return Status::Corrupt(
          StrFormat("%s: metadata general.alignment is %s, expected a power of two that fits u32",
                    path(), Int128ToString(v).c_str()));
    }
    f_->alignment_ = static_cast<uint32_t>(v);
    return Status::Ok();
  }

  Status ReadTensorInfos() {
    // Smallest info: name length + 1-byte name, n_dims, one dimension, type, offset.
    constexpr uint64_t kMinInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
    if (n_tensors_ > remaining() / kMinInfoBytes) {
      return Status::Corrupt(StrFormat(
          "%s: header tensor count: %llu tensors cannot fit in the %llu bytes after the metadata",
          path(), static_cast<ull>(n_tensors_), static_cast<ull>(remaining())));
    }
    f_->tensors_.reserve(n_tensors_);
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      GgufTensorInfo t;
      std::string_view name;
      WEIR_RETURN_IF_ERROR(
          ReadStr(&name, [&] { return StrFormat("tensor #%llu name", static_cast<ull>(i)); }));
      t.name = std::string(name);
      std::string pname = Printable(t.name);
      auto field = [&](const char* f) {
        return [&pname, f] { return "tensor '" + pname + "' " + f; };
      };
      if (t.name.empty()) {
        return Status::Corrupt(
            StrFormat("%s: tensor #%llu has an empty name", path(), static_cast<ull>(i)));
      }
      if (f_->tensor_index_.count(t.name)) {
        return Status::Corrupt(StrFormat("%s: tensor '%s' appears twice (tensor #%llu)", path(),
                                         pname.c_str(), static_cast<ull>(i)));
      }
      uint32_t n_dims = 0;
      WEIR_RETURN_IF_ERROR(Read(&n_dims, field("n_dims")));
      if (n_dims < 1 || n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
        return Status::Corrupt(StrFormat("%s: tensor '%s': n_dims is %u, expected 1..%d", path(),
                                         pname.c_str(), n_dims, kGgufMaxDims));
      }
      uint64_t ne[kGgufMaxDims];
      uint64_t numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        WEIR_RETURN_IF_ERROR(Read(&ne[d], field("dimension")));
        if (ne[d] == 0 || ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Status::Corrupt(StrFormat("%s: tensor '%s': ne[%u] is %llu, expected 1..2^63-1",
                                           path(), pname.c_str(), d, static_cast<ull>(ne[d])));
        }
        if (!CheckedMul(numel, ne[d], &numel) ||
            numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Status::Corrupt(
              StrFormat("%s: tensor '%s': element count overflows at ne[%u] = %llu", path(),
                        pname.c_str(), d, static_cast<ull>(ne[d])));
        }
      }
      WEIR_RETURN_IF_ERROR(Read(&t.ggml_type, field("type")));
      std::optional<GgmlTypeLayout> layout = GgmlLayout(t.ggml_type);
      if (!layout) {
        return Status::Corrupt(StrFormat("%s: tensor '%s': unknown ggml type id %u", path(),
                                         pname.c_str(), t.ggml_type));
      }
      if (ne[0] % static_cast<uint64_t>(layout->block_size) != 0) {
        return Status::Corrupt(StrFormat(
            "%s: tensor '%s': row length ne[0] = %llu is not a multiple of the %s block size %d",
            path(), pname.c_str(), static_cast<ull>(ne[0]), GgmlTypeName(t.ggml_type).c_str(),
            layout->block_size));
      }
      // numel / block_size blocks of block_bytes each (numel is a multiple of block_size).
      if (!CheckedMul(numel / static_cast<uint64_t>(layout->block_size),
                      static_cast<uint64_t>(layout->block_bytes), &t.nbytes)) {
        return Status::Corrupt(StrFormat("%s: tensor '%s': byte size of %llu %s elements overflows",
                                         path(), pname.c_str(), static_cast<ull>(numel),
                                         GgmlTypeName(t.ggml_type).c_str()));
      }
      WEIR_RETURN_IF_ERROR(Read(&t.offset, field("offset")));
      if (t.offset % f_->alignment_ != 0) {
        return Status::Corrupt(
            StrFormat("%s: tensor '%s': data offset %llu is not a multiple of the alignment %u",
                      path(), pname.c_str(), static_cast<ull>(t.offset), f_->alignment_));
      }
      t.dtype = DTypeFromGgmlId(t.ggml_type);
      t.shape.ndim = static_cast<int>(n_dims);
      for (uint32_t d = 0; d < n_dims; ++d)
        t.shape.dims[n_dims - 1 - d] = static_cast<int64_t>(ne[d]);
      f_->tensor_index_.emplace(t.name, f_->tensors_.size());
      f_->tensors_.push_back(std::move(t));
    }
    return Status::Ok();
  }

  // Turns relative offsets into absolute ones once the data section's start is known.
  Status PlaceTensors() {
    uint64_t a = f_->alignment_;
    uint64_t padded;
    if (!CheckedAdd(pos_, a - 1, &padded)) {
      return Status::Corrupt(StrFormat("%s: data section offset overflows", path()));
    }
    f_->data_offset_ = padded / a * a;
    if (f_->tensors_.empty()) return Status::Ok();  // a vocabulary-only file may end here
    if (f_->data_offset_ > size_) {
      return Status::Corrupt(
          StrFormat("%s: data section starts at %llu (tensor infos end at %llu, alignment %u) past "
                    "the end of the file (%llu bytes)",
                    path(), static_cast<ull>(f_->data_offset_), static_cast<ull>(pos_),
                    f_->alignment_, static_cast<ull>(size_)));
    }
    for (GgufTensorInfo& t : f_->tensors_) {
      uint64_t abs;
      if (!CheckedAdd(f_->data_offset_, t.offset, &abs) || !RangeInside(abs, t.nbytes, size_)) {
        return Status::Corrupt(
            StrFormat("%s: tensor '%s': data at offset %llu + %llu bytes (data section at %llu) "
                      "extends past the end of the file (%llu bytes)",
                      path(), Printable(t.name).c_str(), static_cast<ull>(t.offset),
                      static_cast<ull>(t.nbytes), static_cast<ull>(f_->data_offset_),
                      static_cast<ull>(size_)));
      }
      t.offset = abs;
    }
    return Status::Ok();
  }

  GgufFile* f_;
  uint64_t size_;
  const uint8_t* data_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
};

// ---------------------------------------------------------------------------------------------

Result<GgufFile> GgufFile::Open(const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mf, MappedFile::Open(path));
  const uint8_t* data = mf->data();
  uint64_t size = mf->size();
  return Parse(path, data, size, std::move(mf));
}

Result<GgufFile> GgufFile::Parse(std::string name, const uint8_t* data, uint64_t size,
                                 std::shared_ptr<Backing> keepalive) {
  GgufFile f;
  f.path_ = std::move(name);
  f.data_ = data;
  f.size_ = size;
  f.keepalive_ = std::move(keepalive);
  Parser p(&f);
  WEIR_RETURN_IF_ERROR(p.Run());
  return f;
}

const GgufKv* GgufFile::FindKv(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status Missing(const std::string& path, std::string_view key) {
  return Status::NotFound(StrFormat("%s: metadata key '%.*s' is missing", path.c_str(),
                                    static_cast<int>(key.size()), key.data()));
}

Status WrongType(const std::string& path, const GgufKv& kv, const char* expected) {
  std::string actual = kv.type == GgufType::kArray
                           ? StrFormat("array of %s", GgufTypeName(kv.elem_type))
                           : GgufTypeName(kv.type);
  return Status::InvalidArgument(StrFormat("%s: metadata '%s' has type %s, expected %s",
                                           path.c_str(), Printable(kv.key).c_str(), actual.c_str(),
                                           expected));
}

template <typename T>
Result<T> IntAs(const std::string& path, const std::string& key, __int128 v, const char* tname) {
  if (v < static_cast<__int128>(std::numeric_limits<T>::min()) ||
      v > static_cast<__int128>(std::numeric_limits<T>::max())) {
    return Status::InvalidArgument(StrFormat("%s: metadata '%s' = %s does not fit %s", path.c_str(),
                                             Printable(key).c_str(), Int128ToString(v).c_str(),
                                             tname));
  }
  return static_cast<T>(v);
}

}  // namespace

// The decoding helpers below trust the offsets the parser validated.

Result<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufKv* kv = FindKv(key);
  if (!kv) return Missing(path_, key);
  if (kv->type != GgufType::kString) return WrongType(path_, *kv, "string");
  uint64_t len = Load<uint64_t>(data_ + kv->value_offset);
  return std::string(reinterpret_cast<const char*>(data_ + kv->value_offset + 8), len);
}

#define WEIR_GGUF_INT_GETTER(Name, T, tname)                                               \
  Result<T> GgufFile::Name(std::string_view key) const {                                   \
    const GgufKv* kv = FindKv(key);                                                        \
    if (!kv) return Missing(path_, key);                                                   \
    if (!GgufIsInteger(kv->type)) return WrongType(path_, *kv, "an integer");              \
    return IntAs<T>(path_, kv->key, DecodeInt(kv->type, data_ + kv->value_offset), tname); \
  }
WEIR_GGUF_INT_GETTER(GetU32, uint32_t, "u32")
WEIR_GGUF_INT_GETTER(GetI32, int32_t, "i32")
WEIR_GGUF_INT_GETTER(GetU64, uint64_t, "u64")
WEIR_GGUF_INT_GETTER(GetI64, int64_t, "i64")
#undef WEIR_GGUF_INT_GETTER

Result<float> GgufFile::GetF32(std::string_view key) const {
  const GgufKv* kv = FindKv(key);
  if (!kv) return Missing(path_, key);
  if (kv->type != GgufType::kFloat32 && kv->type != GgufType::kFloat64) {
    return WrongType(path_, *kv, "f32");
  }
  return static_cast<float>(DecodeFloat(kv->type, data_ + kv->value_offset));
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufKv* kv = FindKv(key);
  if (!kv) return Missing(path_, key);
  if (kv->type != GgufType::kBool) return WrongType(path_, *kv, "bool");
  return data_[kv->value_offset] != 0;
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufKv* kv = FindKv(key);
  if (!kv) return Missing(path_, key);
  if (kv->type != GgufType::kArray || kv->elem_type != GgufType::kString) {
    return WrongType(path_, *kv, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(kv->count);  // bounded by the file size (8 bytes per element at least)
  uint64_t pos = kv->value_offset;
  for (uint64_t i = 0; i < kv->count; ++i) {
    uint64_t len = Load<uint64_t>(data_ + pos);
    out.emplace_back(reinterpret_cast<const char*>(data_ + pos + 8), len);
    pos += 8 + len;
  }
  return out;
}

Result<std::vector<float>> GgufFile::GetF32Array(std::string_view key) const {
  const GgufKv* kv = FindKv(key);
  if (!kv) return Missing(path_, key);
  if (kv->type != GgufType::kArray ||
      (kv->elem_type != GgufType::kFloat32 && kv->elem_type != GgufType::kFloat64)) {
    return WrongType(path_, *kv, "array of f32");
  }
  uint64_t step = GgufScalarBytes(kv->elem_type);
  std::vector<float> out(kv->count);
  for (uint64_t i = 0; i < kv->count; ++i) {
    out[i] = static_cast<float>(DecodeFloat(kv->elem_type, data_ + kv->value_offset + i * step));
  }
  return out;
}

Result<std::vector<int64_t>> GgufFile::GetI64Array(std::string_view key) const {
  const GgufKv* kv = FindKv(key);
  if (!kv) return Missing(path_, key);
  if (kv->type != GgufType::kArray || !GgufIsInteger(kv->elem_type)) {
    return WrongType(path_, *kv, "array of integers");
  }
  uint64_t step = GgufScalarBytes(kv->elem_type);
  std::vector<int64_t> out(kv->count);
  for (uint64_t i = 0; i < kv->count; ++i) {
    WEIR_ASSIGN_OR_RETURN(
        out[i],
        IntAs<int64_t>(path_, kv->key,
                       DecodeInt(kv->elem_type, data_ + kv->value_offset + i * step), "i64"));
  }
  return out;
}

Result<std::vector<int32_t>> GgufFile::GetI32Array(std::string_view key) const {
  const GgufKv* kv = FindKv(key);
  if (!kv) return Missing(path_, key);
  if (kv->type != GgufType::kArray || !GgufIsInteger(kv->elem_type)) {
    return WrongType(path_, *kv, "array of integers");
  }
  uint64_t step = GgufScalarBytes(kv->elem_type);
  std::vector<int32_t> out(kv->count);
  for (uint64_t i = 0; i < kv->count; ++i) {
    WEIR_ASSIGN_OR_RETURN(
        out[i],
        IntAs<int32_t>(path_, kv->key,
                       DecodeInt(kv->elem_type, data_ + kv->value_offset + i * step), "i32"));
  }
  return out;
}

namespace {

std::string RenderScalar(GgufType t, const uint8_t* p) {
  if (GgufIsInteger(t)) return Int128ToString(DecodeInt(t, p));
  switch (t) {
    case GgufType::kFloat32:
      return FloatToString(Load<float>(p));
    case GgufType::kFloat64:
      return FloatToString(Load<double>(p));
    case GgufType::kBool:
      return *p ? "true" : "false";
    default:
      return "?";
  }
}

}  // namespace

std::string GgufFile::RenderValue(const GgufKv& kv) const {
  const uint8_t* p = data_ + kv.value_offset;
  if (kv.type == GgufType::kString) {
    uint64_t len = Load<uint64_t>(p);
    return Printable(std::string_view(reinterpret_cast<const char*>(p + 8), len), 160);
  }
  if (kv.type != GgufType::kArray) return RenderScalar(kv.type, p);
  std::string out = StrFormat("[%s x %llu", GgufTypeName(kv.elem_type), static_cast<ull>(kv.count));
  uint64_t step = GgufScalarBytes(kv.elem_type);
  constexpr uint64_t kListUpTo = 16;
  if (step > 0 && kv.count > 0 && kv.count <= kListUpTo) {
    out += ":";
    for (uint64_t i = 0; i < kv.count; ++i) {
      out += (i ? ", " : " ") + RenderScalar(kv.elem_type, p + i * step);
    }
  }
  return out + "]";
}

std::vector<std::pair<std::string, std::string>> GgufFile::RenderMetadata() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(kvs_.size());
  for (const GgufKv& kv : kvs_) out.emplace_back(kv.key, RenderValue(kv));
  return out;
}

}  // namespace weir::format
