#include "kernels/matvec.h"

#include <vector>

#include "tensor/quantize.h"

namespace weir::kernels {

namespace {
float DotRow(const TensorView& w, int64_t r, const float* x, float* scratch) {
  DequantizeRow(w, r, scratch);
  float s = 0;
  for (int64_t j = 0; j < w.cols(); ++j) s += scratch[j] * x[j];
  return s;
}
}  // namespace

namespace ref {
void MatVec(const TensorView& w, const float* x, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols()));
  for (int64_t r = 0; r < w.rows(); ++r) y[r] = DotRow(w, r, x, row.data());
}
void MatMul(const TensorView& w, const float* x, int64_t n, float* y) {
  for (int64_t t = 0; t < n; ++t) MatVec(w, x + t * w.cols(), y + t * w.rows());
}
}  // namespace ref

void MatVec(const TensorView& w, const float* x, float* y, ThreadPool* pool) {
  ParallelFor(pool, static_cast<size_t>(w.rows()), [&](size_t b, size_t e, int) {
    thread_local std::vector<float> row;
    if (row.size() < static_cast<size_t>(w.cols())) row.resize(static_cast<size_t>(w.cols()));
    for (size_t r = b; r < e; ++r) y[r] = DotRow(w, static_cast<int64_t>(r), x, row.data());
  }, 16);
}

void MatMul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  for (int64_t t = 0; t < n; ++t) MatVec(w, x + t * w.cols(), y + t * w.rows(), pool);
}

}  // namespace weir::kernels
