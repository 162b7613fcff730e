// Calibration for pruning: cutting a token stream into calibration sequences and running the
// model over them while an ActivationNorms accumulates the input norms of every projection
// (Mosaic Algorithm 1, lines 5-9; Wanda's ||X_j||_2).
//
// Sequences are consecutive, non-overlapping windows of the text's tokens (deterministic, so a
// pruned model can be reproduced), each starting with BOS in place of its first token, the
// way llama.cpp's perplexity chunks do. Wanda and Mosaic sample 128 random C4 windows of 2048
// tokens; weir takes the first nsamples windows of the given text.
//
// Thread safety: free functions; Calibrate uses `pool` from the calling thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model.h"
#include "prune/activation_norms.h"

namespace weir::prune {

struct CalibrationOptions {
  int nsamples = 128;  // sequences wanted (fewer when the text is short)
  int seqlen = 0;      // tokens per sequence; 0 = the model's context (capped at 4096)
  int n_batch = 64;    // tokens per forward call
};

// The window length Calibrate uses for `model` under `options`.
int CalibrationSeqLen(const format::LlamaConfig& config, const CalibrationOptions& options);

// Up to `nsamples` windows of `seqlen` tokens. When the text holds fewer than one full window,
// one window of all its tokens (at least 2). bos < 0 keeps each window's first token.
Result<std::vector<std::vector<int32_t>>> CalibrationSequences(std::span<const int32_t> tokens,
                                                               int32_t bos, int nsamples,
                                                               int seqlen);

// Runs every sequence through a fresh session over `model` and returns the accumulated norms.
// progress(done, total) after each sequence.
Result<ActivationNorms> Calibrate(const model::Model& model,
                                  std::span<const std::vector<int32_t>> sequences, ThreadPool* pool,
                                  int n_batch = 64,
                                  const std::function<void(int, int)>& progress = nullptr);

struct CalibrationRun {
  ActivationNorms norms;
  int sequences = 0;   // windows run
  int seqlen = 0;      // tokens per window (the last may be shorter when the text is short)
  int64_t tokens = 0;  // tokens run in all
  int64_t text_tokens = 0;
};

// Tokenizes `text` with the model's tokenizer (BOS first when it has one), cuts it into
// sequences (options) and calibrates. Errors when the model has no tokenizer or the text yields
// fewer than 2 tokens.
Result<CalibrationRun> CalibrateOnText(const model::Model& model, std::string_view text,
                                       const CalibrationOptions& options, ThreadPool* pool,
                                       const std::function<void(int, int)>& progress = nullptr);

}  // namespace weir::prune
