#include "tensor/quantize.h"

namespace weir {

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  Traits(t).quantize_row(src, dst, n);
}

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  Traits(t).dequantize_row(src, dst, n);
}

}  // namespace weir
