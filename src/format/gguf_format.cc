#include "format/gguf_format.h"

namespace weir::format {

const char* GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "u8";
    case GgufType::kInt8:
      return "i8";
    case GgufType::kUint16:
      return "u16";
    case GgufType::kInt16:
      return "i16";
    case GgufType::kUint32:
      return "u32";
    case GgufType::kInt32:
      return "i32";
    case GgufType::kFloat32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "u64";
    case GgufType::kInt64:
      return "i64";
    case GgufType::kFloat64:
      return "f64";
  }
  return "?";
}

uint64_t GgufScalarBytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

std::optional<GgmlTypeLayout> GgmlLayout(uint32_t ggml_type) {
  // Block sizes and byte counts of ggml's types, by id. K-quants and i-quants use 256-value
  // super-blocks. Ids 4, 5 (Q4_2, Q4_3) and 31..33, 36..38 (repacked variants) were removed
  // from the file format.
  switch (ggml_type) {
    case 0:
      return GgmlTypeLayout{1, 4};  // F32
    case 1:
      return GgmlTypeLayout{1, 2};  // F16
    case 2:
      return GgmlTypeLayout{32, 18};  // Q4_0
    case 3:
      return GgmlTypeLayout{32, 20};  // Q4_1
    case 6:
      return GgmlTypeLayout{32, 22};  // Q5_0
    case 7:
      return GgmlTypeLayout{32, 24};  // Q5_1
    case 8:
      return GgmlTypeLayout{32, 34};  // Q8_0
    case 9:
      return GgmlTypeLayout{32, 36};  // Q8_1
    case 10:
      return GgmlTypeLayout{256, 84};  // Q2_K
    case 11:
      return GgmlTypeLayout{256, 110};  // Q3_K
    case 12:
      return GgmlTypeLayout{256, 144};  // Q4_K
    case 13:
      return GgmlTypeLayout{256, 176};  // Q5_K
    case 14:
      return GgmlTypeLayout{256, 210};  // Q6_K
    case 15:
      return GgmlTypeLayout{256, 292};  // Q8_K
    case 16:
      return GgmlTypeLayout{256, 66};  // IQ2_XXS
    case 17:
      return GgmlTypeLayout{256, 74};  // IQ2_XS
    case 18:
      return GgmlTypeLayout{256, 98};  // IQ3_XXS
    case 19:
      return GgmlTypeLayout{256, 50};  // IQ1_S
    case 20:
      return GgmlTypeLayout{32, 18};  // IQ4_NL
    case 21:
      return GgmlTypeLayout{256, 110};  // IQ3_S
    case 22:
      return GgmlTypeLayout{256, 82};  // IQ2_S
    case 23:
      return GgmlTypeLayout{256, 136};  // IQ4_XS
    case 24:
      return GgmlTypeLayout{1, 1};  // I8
    case 25:
      return GgmlTypeLayout{1, 2};  // I16
    case 26:
      return GgmlTypeLayout{1, 4};  // I32
    case 27:
      return GgmlTypeLayout{1, 8};  // I64
    case 28:
      return GgmlTypeLayout{1, 8};  // F64
    case 29:
      return GgmlTypeLayout{256, 56};  // IQ1_M
    case 30:
      return GgmlTypeLayout{1, 2};  // BF16
    case 34:
      return GgmlTypeLayout{256, 54};  // TQ1_0
    case 35:
      return GgmlTypeLayout{256, 66};  // TQ2_0
    case 39:
      return GgmlTypeLayout{32, 17};  // MXFP4
    default:
      return std::nullopt;
  }
}

}  // namespace weir::format
