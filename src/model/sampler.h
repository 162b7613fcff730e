// Sampler: picks the next token from logits -- greedy (temp <= 0), or temperature with optional
// top-k and top-p (nucleus) truncation, from a seeded generator so runs are reproducible.
//
// Thread safety: none; one per session.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace weir::model {

struct SamplerOptions {
  float temp = 0.8f;     // <= 0: greedy
  int top_k = 40;        // <= 0: no top-k
  float top_p = 0.95f;   // >= 1: no top-p
  uint64_t seed = 0;
};

class Sampler {
 public:
  Sampler(int vocab_size, const SamplerOptions& options);
  int32_t Sample(const float* logits);
  static int32_t Argmax(const float* logits, int n);

 private:
  SamplerOptions opt_;
  int vocab_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // allocated once
};

}  // namespace weir::model
