// Constants of the GGUF container shared by the reader and the writer: the metadata value types
// and the block layout of every ggml tensor type (including those weir cannot compute with, so
// that a file holding them can still be listed and bounds-checked). The byte layout of a file is
// documented at the top of format/gguf_reader.h.
//
// Thread safety: constants and pure functions only.
#pragma once

#include <cstdint>
#include <optional>

namespace weir::format {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kGgufVersion = 3;         // what GgufWriter writes
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgmlTypeI8 = 24;         // raw bytes (weir pack sparse records)
inline constexpr int kGgufMaxDims = 4;
// Longest tensor name llama.cpp accepts (GGML_MAX_NAME is 64 including the terminator).
inline constexpr int kGgufMaxTensorName = 63;
// Deepest nesting of arrays accepted (an array of arrays of ... ). Real files use depth 1.
inline constexpr int kGgufMaxArrayDepth = 4;

// Metadata value types (u32 tag before each value).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr uint32_t kGgufTypeCount = 13;

// "u8", "i32", "f32", "bool", "string", "array", ...; "type#N" style is not needed because
// callers only pass validated tags.
const char* GgufTypeName(GgufType t);
// Encoded size of a fixed-size value type; 0 for string and array.
uint64_t GgufScalarBytes(GgufType t);
inline bool GgufIsInteger(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

// Block layout of a ggml tensor type: `block_size` values are stored in `block_bytes` bytes.
struct GgmlTypeLayout {
  int block_size;
  int block_bytes;
};
// The layout of any ggml type id a current file may hold (F32 ... BF16, TQ1_0, TQ2_0, MXFP4);
// nullopt for ids that were never assigned or were removed from the format.
std::optional<GgmlTypeLayout> GgmlLayout(uint32_t ggml_type);

}  // namespace weir::format
