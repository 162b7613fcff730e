// Sampler's presence and frequency penalties against OpenAI's definition computed here by hand:
// logit[j] -= presence * (c[j] > 0) + frequency * c[j], with c[j] the times j was sampled. The
// penalized sampler must pick what an unpenalized sampler with the same seed picks from the
// logits penalized by the reference, greedy and with temperature, for penalties of both signs.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "model/sampler.h"

namespace weir::model {
namespace {

TEST(SamplerPenalties, HandWorkedGreedyExample) {
  const float logits[3] = {2.0f, 1.5f, 0.1f};
  // presence 1: 0 (2.0), then 1 (2.0 - 1 = 1.0 < 1.5), then 0 (1.0 > 0.5).
  Sampler p(3, SamplerOptions{.temp = 0, .presence_penalty = 1.0f});
  EXPECT_EQ(p.Sample(logits), 0);
  EXPECT_EQ(p.Sample(logits), 1);
  EXPECT_EQ(p.Sample(logits), 0);
  // frequency 0.6: 0, then 1 (1.4 < 1.5), then 0 (1.4 > 0.9), then 1 (0.8 < 0.9).
  Sampler f(3, SamplerOptions{.temp = 0, .frequency_penalty = 0.6f});
  EXPECT_EQ(f.Sample(logits), 0);
  EXPECT_EQ(f.Sample(logits), 1);
  EXPECT_EQ(f.Sample(logits), 0);
  EXPECT_EQ(f.Sample(logits), 1);
  // No penalty: always 0.
  Sampler none(3, SamplerOptions{.temp = 0});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(none.Sample(logits), 0);
}

TEST(SamplerPenalties, EqualsSamplingThePenalizedLogits) {
  const int vocab = 50;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float temp : {0.0f, 0.9f}) {
    for (auto [presence, frequency] : {std::pair{0.8f, 0.3f}, std::pair{-0.5f, 0.7f}, std::pair{0.0f, -1.2f}}) {
      SamplerOptions with{.temp = temp, .top_k = 10, .top_p = 0.9f, .seed = 42};
      with.presence_penalty = presence;
      with.frequency_penalty = frequency;
      SamplerOptions without = with;
      without.presence_penalty = without.frequency_penalty = 0;
      Sampler a(vocab, with), b(vocab, without);
      std::vector<int> count(vocab, 0);
      std::vector<float> logits(vocab), penalized(vocab);
      for (int step = 0; step < 60; ++step) {
        for (float& l : logits) l = normal(rng) * 0.3f;  // close logits: the penalties decide
        for (int j = 0; j < vocab; ++j) {
          penalized[j] = logits[j] - (count[j] > 0 ? presence : 0.0f) - frequency * static_cast<float>(count[j]);
        }
        const int32_t got = a.Sample(logits.data());
        const int32_t want = b.Sample(penalized.data());
        ASSERT_EQ(got, want) << "temp " << temp << " presence " << presence << " frequency " << frequency
                             << " step " << step;
        ++count[got];
      }
    }
  }
}

}  // namespace
}  // namespace weir::model
