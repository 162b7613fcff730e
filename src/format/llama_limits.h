// Upper bounds on Llama hyperparameters that weir accepts from a file. They are far above any
// real model and exist so that a corrupt or hostile header is rejected before it can drive an
// allocation or an overflow (a layer count of 2^31 would otherwise size a vector).
#pragma once

#include <cstdint>

namespace weir::format::limits {

constexpr int64_t kMaxModelDim = 1 << 17;  // d_model, n_head * head_dim
constexpr int64_t kMaxFfnDim = 1 << 20;    // d_ff
constexpr int64_t kMaxLayers = 1 << 10;
constexpr int64_t kMaxHeads = 1 << 12;
constexpr int64_t kMaxHeadDim = 1 << 12;
constexpr int64_t kMaxVocabSize = 1 << 24;
constexpr int64_t kMaxContext = 1 << 24;
constexpr int64_t kMaxExperts = 1 << 10;  // experts per MoE layer (llama.cpp: 512)

}  // namespace weir::format::limits
