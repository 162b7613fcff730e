// TensorView: a non-owning view of a tensor's bytes with its element type and shape.
// Shapes are written outermost first: a weight `[d_ff, d_model]` has d_ff rows of d_model
// contiguous elements (GGUF's ne[] lists the same dimensions innermost first).
//
// Thread safety: a view is a value; the bytes it points to are owned elsewhere (a mapped file,
// a cache block, an AlignedBuffer) and must outlive it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/check.h"
#include "tensor/dtype.h"

namespace weir {

struct Shape {
  int ndim = 0;
  std::array<int64_t, 4> dims{};  // outermost first

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : ndim(static_cast<int>(d.size())) {
    int i = 0;
    for (int64_t v : d) dims[i++] = v;
  }
  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= dims[i];
    return n;
  }
  // Innermost dimension (elements per row) and product of the others.
  int64_t cols() const { return ndim == 0 ? 1 : dims[ndim - 1]; }
  int64_t rows() const { return ndim == 0 ? 1 : numel() / dims[ndim - 1]; }
  bool operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i) if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string ToString() const;  // "[2048, 5632]"
};

// How a 2-D weight's bytes are ordered.
//   kRowMajor : row r at data + r * row_bytes() (GGUF's order; every reader produces this).
//   kTiled16  : Q8_0 / Q4_0 only, rows a multiple of 16: each group of 16 rows is stored block
//               column by block column so that one vector load holds the same 4 inputs of 16
//               rows (kernels/tiled.h has the byte layout). Only the dense products (MatVec,
//               MatMul) read it; row() and everything that indexes rows must not be used.
enum class Layout : uint8_t { kRowMajor = 0, kTiled16 = 1 };

struct TensorView {
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;
  Layout layout = Layout::kRowMajor;

  int64_t rows() const { return shape.rows(); }
  int64_t cols() const { return shape.cols(); }
  size_t row_bytes() const { return RowBytes(dtype, cols()); }
  size_t nbytes() const { return row_bytes() * static_cast<size_t>(rows()); }
  const uint8_t* row(int64_t r) const {
    WEIR_DCHECK(layout == Layout::kRowMajor);
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_bytes();
  }
  const float* f32() const { return static_cast<const float*>(data); }
  bool valid() const { return data != nullptr; }
};

}  // namespace weir
