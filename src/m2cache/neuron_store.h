// NeuronStore: every MLP neuron of every layer held at two precisions, so that a token can load
// its most important neurons at the high one and the next ones at the low one (M2Cache,
// ../shared/papers/004 §5.2). Neuron i of a layer is row i of W_gate, row i of W_up and column i
// of W_down; the store keeps them neuron-major, one [d_ff, d_model] matrix per projection and
// precision:
//   at[kHigh].gate / .up / .down_t   row i = neuron i's gate row, up row, down column (high type)
//   at[kLow] ...                     the same rows at the low type
// so the bytes a neuron costs at a precision are one row of each (neuron_bytes), and a selection
// of neurons is a gathered product over rows (kernels/gather.h).
//
// The rows are the model's weights dequantized and requantized to each type (a file that is
// already quantized has no higher-precision original; docs/m2cache.md says what this costs).
//
// Thread safety: immutable after Build.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "tensor/dtype.h"
#include "tensor/tensor_view.h"

namespace weir::m2cache {

enum Precision : int { kHigh = 0, kLow = 1 };
constexpr int kNumPrecisions = 2;

// One layer's MLP as the model holds it (row-major views).
struct MlpWeights {
  TensorView gate;  // [d_ff, d_model]
  TensorView up;    // [d_ff, d_model]
  TensorView down;  // [d_model, d_ff]
  // E[x xᵀ] of the MLP's input x on calibration text, [d_model, d_model] row-major, or empty:
  // the predictors are then fitted for that input distribution (low_rank_predictor.h).
  std::span<const double> input_second_moment;
};

// One projection set at one precision, neuron-major.
struct NeuronRows {
  TensorView gate;    // [d_ff, d_model]
  TensorView up;      // [d_ff, d_model]
  TensorView down_t;  // [d_ff, d_model]: row i = column i of W_down
};

struct LayerNeurons {
  int64_t d_ff = 0;
  int64_t d_model = 0;
  NeuronRows at[kNumPrecisions];
};

struct StoreTypes {
  DType high = DType::kQ8_0;
  DType low = DType::kQ4_0;
};

class NeuronStore {
 public:
  // Fails when a type cannot hold a d_model row (its block size must divide d_model) or a
  // layer's shapes disagree.
  static Result<std::unique_ptr<NeuronStore>> Build(std::span<const MlpWeights> layers,
                                                    const StoreTypes& types, ThreadPool* pool);

  int n_layers() const { return static_cast<int>(layers_.size()); }
  const LayerNeurons& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  DType type(Precision p) const { return p == kHigh ? types_.high : types_.low; }
  // Bytes of one neuron of a layer at precision p (its gate, up and down rows).
  uint64_t neuron_bytes(int layer, Precision p) const;
  // Bytes of every neuron of every layer at both precisions.
  uint64_t bytes() const { return bytes_; }

 private:
  StoreTypes types_;
  std::vector<LayerNeurons> layers_;
  std::vector<AlignedBuffer> storage_;
  uint64_t bytes_ = 0;
};

}  // namespace weir::m2cache
