// Row conversions of the float types and the 32-value block types (layouts in dtype.h). The
// quantizers follow ggml's reference rounding, so files weir writes hold what llama.cpp would
// write for the same floats:
//   Q8_0: d = amax / 127, q = round(x / d)
//   Q4_0: d = max / -8 (max: the value of largest magnitude, signed), q = min(15, (int)(x/d + 8.5))
//   Q5_0: d = max / -16, q = min(31, (int)(x/d + 16.5))
//   Q4_1: d = (max - min) / 15, m = min, q = min(15, (int)((x - min)/d + 0.5))
//   Q5_1: d = (max - min) / 31, m = min, q = (int)((x - min)/d + 0.5)
// The dequantizers evaluate ggml's f32 expressions in ggml's order (bitwise equal to gguf-py).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace weir {

void DequantizeRowF32(const void* src, float* dst, int64_t n);
void DequantizeRowF16(const void* src, float* dst, int64_t n);
void DequantizeRowBF16(const void* src, float* dst, int64_t n);
void DequantizeRowQ4_0(const void* src, float* dst, int64_t n);
void DequantizeRowQ4_1(const void* src, float* dst, int64_t n);
void DequantizeRowQ5_0(const void* src, float* dst, int64_t n);
void DequantizeRowQ5_1(const void* src, float* dst, int64_t n);
void DequantizeRowQ8_0(const void* src, float* dst, int64_t n);

void QuantizeRowF32(const float* src, void* dst, int64_t n);
void QuantizeRowF16(const float* src, void* dst, int64_t n);
void QuantizeRowBF16(const float* src, void* dst, int64_t n);
void QuantizeRowQ4_0(const float* src, void* dst, int64_t n);
void QuantizeRowQ4_1(const float* src, void* dst, int64_t n);
void QuantizeRowQ5_0(const float* src, void* dst, int64_t n);
void QuantizeRowQ5_1(const float* src, void* dst, int64_t n);
void QuantizeRowQ8_0(const float* src, void* dst, int64_t n);

}  // namespace weir
