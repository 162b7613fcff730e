// TransposedWeights: column-major copies of the linear weights whose *input* columns a sparsity
// policy selects, so that a gathered product reads only the active columns:
//   wt [cols_in, rows_out], row i = input column i of W [rows_out, cols_in].
// Built once per session from the resident weights. F32/F16/BF16 transposes are exact; for Q8_0
// and Q4_0 the matrix is dequantized, transposed and requantized with blocks running along the
// output dimension (so gathered results differ from the dense kernel by one extra rounding; a
// policy at density 1 never uses these copies, so dense results stay exact). When rows_out is
// not a multiple of 32 a quantized transpose is stored as F32.
//
// Thread safety: immutable after Build.
#pragma once

#include <memory>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "model/llama_weights.h"
#include "sparsity/site.h"

namespace weir::model {

struct LayerTransposed {
  TensorView wq_t, wk_t, wv_t;  // [d_model, q_dim / kv_dim]   (site kAttnIn)
  TensorView wo_t;              // [q_dim, d_model]             (site kAttnOut)
  TensorView w_gate_t, w_up_t;  // [d_model, d_ff]              (site kMlpIn)
  TensorView w_down_t;          // [d_ff, d_model]              (site kMlpDown)
};

class TransposedWeights {
 public:
  // Builds the copies for every site with sites[site] == true.
  static Result<std::unique_ptr<TransposedWeights>> Build(const LlamaWeights& weights,
                                                          const bool sites[sparsity::kNumSites],
                                                          ThreadPool* pool);
  const LayerTransposed& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  uint64_t bytes() const { return bytes_; }

  // One transposed copy of w into *storage (exposed for tests).
  static Result<TensorView> Transpose(const TensorView& w, AlignedBuffer* storage, ThreadPool* pool);

 private:
  std::vector<LayerTransposed> layers_;
  std::vector<AlignedBuffer> storage_;
  uint64_t bytes_ = 0;
};

}  // namespace weir::model
