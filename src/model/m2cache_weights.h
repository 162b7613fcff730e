// The M2Cache weights of a loaded model: its MLP neurons requantized to the two precisions and
// the low-rank predictor of each layer (m2cache/mixed_mlp.h), built from the resident weights.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "m2cache/mixed_mlp.h"
#include "model/model.h"

namespace weir::model {

// The model must be dense (not a mixture of experts), loaded row-major (not tiled) and resident.
// With `calibration` tokens the predictors are fitted for the distribution of each layer's MLP
// input: the model runs densely over them (chunks of up to 512 tokens) and E[x xᵀ] is taken per
// layer (low_rank_predictor.h); without, they are plain truncated SVDs. progress(layer) after
// each layer's predictor.
Result<std::unique_ptr<m2cache::M2Weights>> BuildM2Weights(const Model& model, const m2cache::MixConfig& config,
                                                            ThreadPool* pool,
                                                            const std::function<void(int)>& progress = nullptr,
                                                            std::span<const int32_t> calibration = {});

// With predictor=trained:FILE the predictors come from the `weir m2fit` file (checked against the
// model's shapes) and no low-rank predictor is fitted.
//
// E[x xᵀ] of every layer's MLP input over `tokens` (a dense run), [n_layers][d_model²].
Result<std::vector<std::vector<double>>> MlpInputSecondMoments(const Model& model, std::span<const int32_t> tokens,
                                                               ThreadPool* pool);

// Every layer's MLP input over `tokens` (a dense run, chunks of up to 512 tokens), in token order:
// [n_layers][n_tokens · d_model]: the samples `weir m2fit` trains on. With `m2` the model runs its
// MLPs M2Cache's way (`config`), so that each layer sees the inputs a sparse run gives it.
Result<std::vector<std::vector<float>>> RecordMlpInputs(const Model& model, std::span<const int32_t> tokens,
                                                        ThreadPool* pool, const m2cache::M2Weights* m2 = nullptr,
                                                        const m2cache::MixConfig& config = {});

}  // namespace weir::model
