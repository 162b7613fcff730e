// Element types of weight tensors: one table (DTypeTraits) that says, for every type weir
// computes with, its name, its GGUF/ggml id, its block geometry and how to turn a row of it into
// f32 and back. Everything that needs to know a type's shape or numerics indexes this table; code
// paths that compute a type directly (the SIMD kernels) say which types they cover, and every
// other type runs through `dequantize_row` + the F32 kernels (kernels/matvec.h), so a type a path
// does not know is never fed to another type's kernel.
//
// The ids and byte layouts are ggml's, so a GGUF tensor's bytes are used as they are. Blocks
// (all little-endian; "f16" is an IEEE half):
//   F32  : 4-byte float                F16 : 2-byte half          BF16 : upper half of an F32
//   Q4_0 : 32 values { f16 d; u8 qs[16]; }             18 B  x = d * (q - 8)
//   Q4_1 : 32 values { f16 d; f16 m; u8 qs[16]; }      20 B  x = d * q + m
//   Q5_0 : 32 values { f16 d; u8 qh[4]; u8 qs[16]; }   22 B  x = d * (q - 16), q = nibble | bit << 4
//   Q5_1 : 32 values { f16 d; f16 m; u8 qh[4]; u8 qs[16]; } 24 B  x = d * q + m
//   Q8_0 : 32 values { f16 d; i8 qs[32]; }             34 B  x = d * q
//     In the 32-value types value j (0..15) is the low nibble of qs[j] and value j+16 its high
//     nibble; the fifth bit of value j is bit j of the u32 qh.
//   Q2_K .. Q6_K: super-blocks of 256 values split into sub-blocks with quantized scales
//     (quant_kquants.h documents each layout byte by byte).
//   IQ4_NL, IQ4_XS: 4-bit codes into a table of 16 non-linear levels, per 32 values or per
//     256 with 6-bit sub-block scales (quant_iq4.h).
// A row of a blocked type must hold a whole number of blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

namespace weir {

// Numeric values are the ggml type ids.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
};

constexpr int kQK = 32;    // values per block of the 32-value types (Q4_0 ... Q8_0)
constexpr int kQK_K = 256;  // values per super-block of the K types

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 minimum (offset)
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // fifth bits, bit j for value j
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Converts n values (a multiple of the block size) of one row.
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);

// How the dense kernels multiply a row of this type with an activation.
enum class DotKind : uint8_t {
  kFloat,      // weights widened to f32 against the f32 activation (F32, F16, BF16)
  kInt8Block,  // integer dot against the activation quantized to blocks of 32 int8 (every
               // block-quantized type): per weight sub-block d_w * d_x * isum
               // (+ m_w * d_x * sum(x_q) for types with a min); kernels/reference.cc
  kDequant,    // the row is dequantized to f32 and multiplied like F32 (no type today; a new
               // type may start here before it has an int8 reference)
};

struct DTypeTraits {
  DType type;
  const char* name;       // "Q4_1": ggml's spelling; lowercase is accepted on the command line
  int block_size;         // values per block (1 for float types)
  size_t block_bytes;     // bytes per block
  DotKind dot;
  DequantizeRowFn dequantize_row;
  QuantizeRowFn quantize_row;  // weir's quantizer (round to nearest, ggml's reference scheme)
  uint32_t file_type;     // GGUF general.file_type of a model whose matrices are of this type
                          // (llama.cpp's ftype ids: 0 F32, 1 F16, 2 Q4_0, 15 Q4_K_M, ...)
};

// Every type weir computes with, in ggml id order.
std::span<const DTypeTraits> AllDTypeTraits();
// The row of t (t is always a valid enumerator).
const DTypeTraits& Traits(DType t);

// Maps a GGUF/ggml type id to a supported DType; nullopt for types weir does not handle.
std::optional<DType> DTypeFromGgmlId(uint32_t id);
inline uint32_t GgmlId(DType t) { return static_cast<uint32_t>(t); }
// "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", ...
const char* DTypeName(DType t);
// Name of any ggml type id, including unsupported ones ("IQ2_XS", ...), for messages.
std::string GgmlTypeName(uint32_t id);
// Parses "f32", "F16", "q8_0", "q4_k", ... (case-insensitive).
std::optional<DType> DTypeFromName(const std::string& name);
// The names of every type, lowercase, separated by '|' (for --help and errors).
std::string DTypeNameList();

// Values per block (1 for float types) and bytes per block.
inline int BlockSize(DType t) { return Traits(t).block_size; }
inline size_t BlockBytes(DType t) { return Traits(t).block_bytes; }
// Whether the type is stored in blocks with scales (everything but F32, F16, BF16).
inline bool IsBlockQuantized(DType t) { return Traits(t).block_size > 1; }
// Q8_0 and Q4_0: the 32-value types whose SIMD kernels (tiled, gathered, chunked) run on the
// int8 activation with a signed, offset-free block. Paths that need this exact form check it.
inline bool IsQuantized(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }
// Bytes for n values; n must be a multiple of BlockSize(t).
inline size_t RowBytes(DType t, int64_t n) {
  return static_cast<size_t>(n / BlockSize(t)) * BlockBytes(t);
}

// IEEE half <-> float, exact for all finite values, inf and nan.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round to nearest even
inline float BF16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t F32ToBF16(float f);  // round to nearest even

}  // namespace weir
