// TraceMaskSource: a recorded sparsity trace (format::TraceReader) as a sim::MaskSource. Each
// (layer, kind) with units becomes one mask stream; the kind name lists the tensors the mask
// applies to, and the model shape supplies each tensor's weights per unit. Cache events in the
// trace are passed on for the simulated-vs-recorded comparison.
//
// Projection: a routing trace (every kind sim::kExpertUnitsKind, `weir run --trace` of a
// mixture of experts) may have fewer layers than the model shape: model layer l then replays
// trace layer l mod (the trace's layers), with the model's own expert size, and Describe() says
// so. The expert count must match (an expert id means the same unit in both).
//
// Thread safety: one thread.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "format/trace_reader.h"
#include "sim/mask_source.h"
#include "sim/model_shape.h"

namespace weir::tools {

class TraceMaskSource : public sim::MaskSource {
 public:
  static Result<std::unique_ptr<TraceMaskSource>> Open(const std::string& path,
                                                       const sim::ModelShape& shape);

  const sim::MaskLayout& layout() const override { return layout_; }
  int64_t n_tokens() const override { return static_cast<int64_t>(reader_->n_tokens()); }
  std::string Describe() const override { return "trace:" + reader_->path() + projection_; }
  Status Rewind() override { return reader_->Rewind(); }
  Result<bool> Next(sim::TokenMasks* out) override;

 private:
  std::unique_ptr<format::TraceReader> reader_;
  sim::MaskLayout layout_;
  std::vector<std::pair<uint32_t, uint32_t>> blocks_;  // [stream] -> (trace layer, kind)
  std::string projection_;  // " (8 trace layers cycled over 48)" when projecting
  format::TraceToken token_;
};

}  // namespace weir::tools
