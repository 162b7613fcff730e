#include "model/transposed_weights.h"

#include <vector>

#include "tensor/quantize.h"

namespace weir::model {

Result<TensorView> TransposedWeights::Transpose(const TensorView& w, AlignedBuffer* storage,
                                                ThreadPool* pool) {
  const int64_t rows = w.rows(), cols = w.cols();
  DType out_type = w.dtype;
  if (BlockSize(out_type) > 1 && rows % BlockSize(out_type) != 0) out_type = DType::kF32;
  std::vector<float> dense(static_cast<size_t>(rows * cols));  // [rows, cols]
  ParallelFor(pool, static_cast<size_t>(rows), [&](size_t b, size_t e, int) {
    for (size_t r = b; r < e; ++r) DequantizeRow(w, static_cast<int64_t>(r), dense.data() + r * cols);
  }, 16);
  const size_t out_row_bytes = RowBytes(out_type, rows);
  if (!storage->Reset(out_row_bytes * static_cast<size_t>(cols), 64)) {
    return Status::OutOfMemory(StrFormat("cannot allocate %zu bytes for a transposed weight",
                                         out_row_bytes * static_cast<size_t>(cols)));
  }
  uint8_t* out = storage->data<uint8_t>();
  ParallelFor(pool, static_cast<size_t>(cols), [&](size_t b, size_t e, int) {
    std::vector<float> column(static_cast<size_t>(rows));
    for (size_t c = b; c < e; ++c) {
      for (int64_t r = 0; r < rows; ++r) column[static_cast<size_t>(r)] = dense[static_cast<size_t>(r * cols) + c];
      QuantizeRow(out_type, column.data(), out + c * out_row_bytes, rows);
    }
  }, 16);
  TensorView t;
  t.dtype = out_type;
  t.shape = Shape{cols, rows};
  t.data = out;
  return t;
}

Result<std::unique_ptr<TransposedWeights>> TransposedWeights::Build(
    const LlamaWeights& weights, const bool sites[sparsity::kNumSites], ThreadPool* pool) {
  auto tw = std::make_unique<TransposedWeights>();
  auto add = [&](const TensorView& w, TensorView* out) -> Status {
    AlignedBuffer buf;
    WEIR_ASSIGN_OR_RETURN(*out, Transpose(w, &buf, pool));
    tw->bytes_ += buf.size();
    tw->storage_.push_back(std::move(buf));
    return Status::Ok();
  };
  using sparsity::Site;
  tw->layers_.resize(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const LayerWeights& w = weights.layers[l];
    LayerTransposed& t = tw->layers_[l];
    if (sites[static_cast<int>(Site::kAttnIn)]) {
      WEIR_RETURN_IF_ERROR(add(w.wq, &t.wq_t));
      WEIR_RETURN_IF_ERROR(add(w.wk, &t.wk_t));
      WEIR_RETURN_IF_ERROR(add(w.wv, &t.wv_t));
    }
    if (sites[static_cast<int>(Site::kAttnOut)]) WEIR_RETURN_IF_ERROR(add(w.wo, &t.wo_t));
    if (sites[static_cast<int>(Site::kMlpIn)]) {
      WEIR_RETURN_IF_ERROR(add(w.w_gate, &t.w_gate_t));
      WEIR_RETURN_IF_ERROR(add(w.w_up, &t.w_up_t));
    }
    if (sites[static_cast<int>(Site::kMlpDown)]) WEIR_RETURN_IF_ERROR(add(w.w_down, &t.w_down_t));
  }
  return tw;
}

}  // namespace weir::model
