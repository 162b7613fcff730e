// The M2Cache weights of a loaded model: its MLP neurons requantized to the two precisions and
// the low-rank predictor of each layer (m2cache/mixed_mlp.h), built from the resident weights.
#pragma once

#include <functional>
#include <memory>

#include "base/status.h"
#include "base/thread_pool.h"
#include "m2cache/mixed_mlp.h"
#include "model/model.h"

namespace weir::model {

// The model must be dense (not a mixture of experts), loaded row-major (not tiled) and resident.
// progress(layer) after each layer's predictor.
Result<std::unique_ptr<m2cache::M2Weights>> BuildM2Weights(const Model& model, const m2cache::MixConfig& config,
                                                            ThreadPool* pool,
                                                            const std::function<void(int)>& progress = nullptr);

}  // namespace weir::model
