#include "m2cache/neuron_store.h"

#include <string>

#include "tensor/quantize.h"

namespace weir::m2cache {
namespace {

// Requantizes rows [0, rows) of `w` (row-major) to `type` into `out`.
void RequantizeRows(const TensorView& w, DType type, uint8_t* out, ThreadPool* pool) {
  const int64_t cols = w.cols();
  const size_t out_row = RowBytes(type, cols);
  ParallelFor(pool, static_cast<size_t>(w.rows()), [&](size_t begin, size_t end, int) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (size_t r = begin; r < end; ++r) {
      DequantizeRow(w, static_cast<int64_t>(r), row.data());
      QuantizeRow(type, row.data(), out + r * out_row, cols);
    }
  });
}

// Writes the columns of `down` [d_model, d_ff] as rows [d_ff, d_model] of `type` into `out`.
void RequantizeColumns(const TensorView& down, DType type, uint8_t* out, ThreadPool* pool) {
  const int64_t d_model = down.rows(), d_ff = down.cols();
  std::vector<float> dense(static_cast<size_t>(d_model * d_ff));
  for (int64_t r = 0; r < d_model; ++r) DequantizeRow(down, r, dense.data() + r * d_ff);
  const size_t out_row = RowBytes(type, d_model);
  ParallelFor(pool, static_cast<size_t>(d_ff), [&](size_t begin, size_t end, int) {
    std::vector<float> column(static_cast<size_t>(d_model));
    for (size_t i = begin; i < end; ++i) {
      for (int64_t r = 0; r < d_model; ++r) column[static_cast<size_t>(r)] = dense[static_cast<size_t>(r * d_ff) + i];
      QuantizeRow(type, column.data(), out + i * out_row, d_model);
    }
  });
}

}  // namespace

Result<std::unique_ptr<NeuronStore>> NeuronStore::Build(std::span<const MlpWeights> layers,
                                                        const StoreTypes& types, ThreadPool* pool) {
  auto store = std::unique_ptr<NeuronStore>(new NeuronStore());
  store->types_ = types;
  const DType type_of[kNumPrecisions] = {types.high, types.low};
  for (size_t l = 0; l < layers.size(); ++l) {
    const MlpWeights& w = layers[l];
    const std::string where = "m2cache: layer " + std::to_string(l);
    if (!w.gate.valid() || !w.up.valid() || !w.down.valid()) {
      return Status::InvalidArgument(where + " has no dense MLP weights (a mixture of experts or a streamed pack is not supported)");
    }
    if (w.gate.layout != Layout::kRowMajor || w.up.layout != Layout::kRowMajor || w.down.layout != Layout::kRowMajor) {
      return Status::InvalidArgument(where + ": the weights are tiled; load them row-major");
    }
    const int64_t d_ff = w.gate.rows(), d_model = w.gate.cols();
    if (w.up.rows() != d_ff || w.up.cols() != d_model || w.down.rows() != d_model || w.down.cols() != d_ff) {
      return Status::InvalidArgument(where + ": gate " + w.gate.shape.ToString() + ", up " + w.up.shape.ToString() +
                                     " and down " + w.down.shape.ToString() + " do not form one MLP");
    }
    for (DType t : type_of) {
      if (d_model % BlockSize(t) != 0) {
        return Status::InvalidArgument(where + ": d_model " + std::to_string(d_model) + " is not a multiple of " +
                                       DTypeName(t) + "'s block of " + std::to_string(BlockSize(t)) +
                                       " values; choose another precision");
      }
    }
    LayerNeurons ln;
    ln.d_ff = d_ff;
    ln.d_model = d_model;
    for (int p = 0; p < kNumPrecisions; ++p) {
      const DType t = type_of[p];
      const size_t matrix = RowBytes(t, d_model) * static_cast<size_t>(d_ff);
      AlignedBuffer buf;
      if (!buf.Reset(3 * matrix)) return Status::OutOfMemory(where + ": cannot allocate the neuron store");
      uint8_t* base = buf.data<uint8_t>();
      RequantizeRows(w.gate, t, base, pool);
      RequantizeRows(w.up, t, base + matrix, pool);
      RequantizeColumns(w.down, t, base + 2 * matrix, pool);
      const Shape shape{d_ff, d_model};
      ln.at[p].gate = TensorView{t, shape, base};
      ln.at[p].up = TensorView{t, shape, base + matrix};
      ln.at[p].down_t = TensorView{t, shape, base + 2 * matrix};
      store->bytes_ += 3 * matrix;
      store->storage_.push_back(std::move(buf));
    }
    store->layers_.push_back(ln);
  }
  return store;
}

uint64_t NeuronStore::neuron_bytes(int layer, Precision p) const {
  const LayerNeurons& ln = this->layer(layer);
  return 3 * RowBytes(type(p), ln.d_model);
}

}  // namespace weir::m2cache
