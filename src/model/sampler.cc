#include "model/sampler.h"

#include <algorithm>
#include <cmath>

namespace weir::model {

Sampler::Sampler(int vocab_size, const SamplerOptions& options)
    : opt_(options), vocab_(vocab_size), rng_(options.seed) {
  cand_.reserve(static_cast<size_t>(vocab_size));
  if (opt_.presence_penalty != 0 || opt_.frequency_penalty != 0) {
    count_.assign(static_cast<size_t>(vocab_size), 0);
    penalized_.resize(static_cast<size_t>(vocab_size));
  }
}

int32_t Sampler::Argmax(const float* logits, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i) if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t Sampler::Sample(const float* logits) { return Verify(logits, -1); }

int32_t Sampler::Verify(const float* logits, int32_t draft) {
  const int32_t tok = Pick(Penalized(logits), draft);
  Count(tok);
  return tok;
}

const float* Sampler::Penalized(const float* logits) {
  if (count_.empty()) return logits;
  std::copy(logits, logits + vocab_, penalized_.begin());
  for (int32_t j : seen_) {
    const int32_t c = count_[static_cast<size_t>(j)];
    penalized_[static_cast<size_t>(j)] -= opt_.presence_penalty + opt_.frequency_penalty * static_cast<float>(c);
  }
  return penalized_.data();
}

void Sampler::Count(int32_t token) {
  if (count_.empty()) return;
  if (count_[static_cast<size_t>(token)]++ == 0) seen_.push_back(token);
}

int32_t Sampler::Pick(const float* logits, int32_t draft) {
  if (opt_.temp <= 0) return Argmax(logits, vocab_);
  Distribution(logits);
  if (draft < 0) return Draw(1.0f);
  // Accept the draft with its probability p; otherwise draw from the rest, whose probabilities
  // sum to 1 - p: token j != draft then comes with probability (1 - p) * p_j / (1 - p) = p_j.
  auto it = std::find_if(cand_.begin(), cand_.end(), [&](const auto& c) { return c.second == draft; });
  const float p = it == cand_.end() ? 0.0f : it->first;
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  if (u(rng_) < p) return draft;
  if (it == cand_.end()) return Draw(1.0f);
  cand_.erase(it);
  if (cand_.empty()) return draft;  // p was 1 within rounding
  return Draw(1.0f - p);
}

void Sampler::Distribution(const float* logits) {
  cand_.clear();
  for (int i = 0; i < vocab_; ++i) cand_.emplace_back(logits[i] / opt_.temp, i);
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = cand_.size();
  if (opt_.top_k > 0 && static_cast<size_t>(opt_.top_k) < keep) {
    keep = static_cast<size_t>(opt_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  cand_.resize(keep);
  // Softmax over the survivors.
  float mx = cand_[0].first, sum = 0;
  for (auto& c : cand_) {
    c.first = std::exp(c.first - mx);
    sum += c.first;
  }
  for (auto& c : cand_) c.first /= sum;
  if (opt_.top_p < 1.0f) {
    float cum = 0;
    size_t n = 0;
    while (n < cand_.size()) {
      cum += cand_[n].first;
      ++n;
      if (cum >= opt_.top_p) break;
    }
    cand_.resize(n);
    float s = 0;
    for (auto& c : cand_) s += c.first;
    for (auto& c : cand_) c.first /= s;
  }
}

int32_t Sampler::Draw(float total) {
  std::uniform_real_distribution<float> u(0.0f, total);
  float r = u(rng_), cum = 0;
  for (const auto& c : cand_) {
    cum += c.first;
    if (r < cum) return c.second;
  }
  return cand_.back().second;
}

}  // namespace weir::model
