// Sampler: picks the next token from logits -- greedy (temp <= 0), or temperature with optional
// top-k and top-p (nucleus) truncation, from a seeded generator so runs are reproducible.
// Presence and frequency penalties (OpenAI's definition) lower the logit of every token already
// sampled by this sampler: logit[j] -= presence * (c[j] > 0) + frequency * c[j], c[j] = how many
// times j was sampled; they apply before greedy or temperature sampling alike.
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
  float presence_penalty = 0;   // OpenAI's range is [-2, 2]; 0 = off
  float frequency_penalty = 0;  // idem
};

class Sampler {
 public:
  Sampler(int vocab_size, const SamplerOptions& options);
  // The next token from logits [vocab]; counts it for the penalties.
  int32_t Sample(const float* logits);
  // Speculative decoding's acceptance rule for a token proposed by a deterministic draft: the
  // next token from logits [vocab], drawn so that it is distributed exactly as Sample's, and
  // equal to `draft` as often as that distribution allows. Greedy: Sample. Temperature: `draft`
  // with its probability p(draft) under Sample's distribution, else a token drawn from that
  // distribution with `draft` removed (renormalized). Counts the token for the penalties.
  int32_t Verify(const float* logits, int32_t draft);
  static int32_t Argmax(const float* logits, int n);

 private:
  int32_t Pick(const float* logits, int32_t draft = -1);  // greedy or temperature / top-k / top-p
  // Fills cand_ with Sample's distribution over logits (temperature > 0): (probability, token),
  // most probable first, summing to 1.
  void Distribution(const float* logits);
  int32_t Draw(float total);  // a token from cand_, whose probabilities sum to `total`
  const float* Penalized(const float* logits);  // logits with the penalties applied
  void Count(int32_t token);

  SamplerOptions opt_;
  int vocab_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // allocated once
  // Penalties only: how often each token was sampled, the tokens sampled at least once, and the
  // logits with the penalties applied.
  std::vector<int32_t> count_;
  std::vector<int32_t> seen_;
  std::vector<float> penalized_;
};

}  // namespace weir::model
