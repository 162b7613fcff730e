// ExpertReader: the experts of an experts-layout pack (a mixture of experts, weir pack --layout
// experts). Each layer's experts are one extent whose cached unit (block) is one expert: gate,
// up and down, page-aligned, one read. The ExpertReader is the ExpertSource the session's MoE MLP
// takes them from (StreamingWeights::experts()): Prepare queues the chosen experts that are not
// cached (the I/O thread reads them while the first is computed), Acquire pins one, Release unpins
// it; Predict queues the experts the next layer's router predicts from this layer's input
// (cross-layer preloading), and the next Prepare cancels the mispredicted ones still queued.
//
// Thread safety: one thread (the session's) calls it.
#pragma once

#include <memory>

#include "model/streaming_blocks.h"
#include "model/streaming_layout.h"
#include "model/streaming_plan.h"

namespace weir::model {

// The ExpertReader of an experts-layout plan: a LayoutMlp whose experts() is the ExpertSource
// (its Forward is Unsupported: the session's MoE MLP computes the experts it hands out).
// `plan` and `streamer` must outlive it.
std::unique_ptr<LayoutMlp> MakeExpertReader(const StreamPlan& plan, BlockStreamer* streamer);

}  // namespace weir::model
