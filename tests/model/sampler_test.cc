// Sampler's presence and frequency penalties against OpenAI's definition computed here by hand:
// logit[j] -= presence * (c[j] > 0) + frequency * c[j], with c[j] the times j was sampled. The
// penalized sampler must pick what an unpenalized sampler with the same seed picks from the
// logits penalized by the reference, greedy and with temperature, for penalties of both signs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
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

// Speculative decoding's acceptance rule (Sampler::Verify): whatever token a draft proposes, the
// tokens it returns follow Sample's distribution. Pearson's chi-square over 40,000 draws against
// the softmax of the truncated logits, computed here from the definition, stays below the 0.1 %
// critical value; the rule that is easy to get wrong (on a rejection, draw again from the whole
// distribution, the proposal included) is far above it.
struct VerifyCase {
  float temp;
  int top_k;
  float top_p;
};

// Sample's distribution, from the definitions in sampler.h: temperature, top-k, top-p.
std::vector<double> Expected(const std::vector<float>& logits, const VerifyCase& c) {
  const int n = static_cast<int>(logits.size());
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const int k = c.top_k > 0 ? std::min(c.top_k, n) : n;
  std::vector<double> p(n, 0.0);
  double sum = 0;
  for (int r = 0; r < k; ++r) sum += std::exp((logits[order[r]] - logits[order[0]]) / c.temp);
  double cum = 0;
  int kept = 0;
  for (int r = 0; r < k; ++r) {
    const double q = std::exp((logits[order[r]] - logits[order[0]]) / c.temp) / sum;
    cum += q;
    ++kept;
    if (c.top_p < 1.0f && cum >= c.top_p) break;
  }
  double kept_sum = 0;
  for (int r = 0; r < kept; ++r) kept_sum += std::exp((logits[order[r]] - logits[order[0]]) / c.temp);
  for (int r = 0; r < kept; ++r) p[order[r]] = std::exp((logits[order[r]] - logits[order[0]]) / c.temp) / kept_sum;
  return p;
}

double ChiSquare(const std::vector<int>& count, const std::vector<double>& p, int draws, int* dof) {
  double chi = 0;
  *dof = -1;
  for (size_t j = 0; j < p.size(); ++j) {
    if (p[j] == 0) {
      if (count[j] > 0) return INFINITY;  // a token the distribution never gives
      continue;
    }
    const double e = p[j] * draws;
    chi += (count[j] - e) * (count[j] - e) / e;
    ++*dof;
  }
  return chi;
}

TEST(SamplerVerifyTest, KeepsSamplesDistributionForAnyProposal) {
  const std::vector<float> logits = {1.2f, 0.3f, 2.0f, -0.5f, 0.9f, 1.7f};
  // 0.1 % critical values of chi-square for 1..5 degrees of freedom.
  const double critical[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52};
  const int draws = 40000;
  for (const VerifyCase c : {VerifyCase{1.0f, 0, 1.0f}, VerifyCase{0.7f, 4, 1.0f}, VerifyCase{1.3f, 0, 0.8f}}) {
    const std::vector<double> p = Expected(logits, c);
    for (int32_t draft : {2, 1, 3}) {  // the likeliest token, a middling one, one often cut off
      SCOPED_TRACE("temp " + std::to_string(c.temp) + " top-k " + std::to_string(c.top_k) + " top-p " +
                   std::to_string(c.top_p) + " draft " + std::to_string(draft));
      SamplerOptions o{.temp = c.temp, .top_k = c.top_k, .top_p = c.top_p, .seed = 11};
      Sampler right(6, o), plain(6, o);
      std::vector<int> got(6, 0), broken(6, 0);
      std::mt19937_64 rng(5);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      for (int i = 0; i < draws; ++i) {
        ++got[right.Verify(logits.data(), draft)];
        // The broken rule: accept with p(draft), else a fresh draw that may give draft again.
        ++broken[u(rng) < p[draft] ? draft : plain.Sample(logits.data())];
      }
      int dof = 0;
      const double chi = ChiSquare(got, p, draws, &dof);
      ASSERT_GE(dof, 1);
      EXPECT_LT(chi, critical[dof]);
      if (p[draft] > 0) {
        int bdof = 0;
        EXPECT_GT(ChiSquare(broken, p, draws, &bdof), critical[bdof]);
      }
    }
  }
}

// Greedy: Verify is Sample, whatever the proposal.
TEST(SamplerVerifyTest, GreedyIsTheArgmax) {
  const std::vector<float> logits = {0.1f, 3.0f, -1.0f, 2.9f};
  Sampler s(4, SamplerOptions{.temp = 0});
  for (int32_t draft : {-1, 0, 1, 3}) EXPECT_EQ(s.Verify(logits.data(), draft), 1);
}

}  // namespace
}  // namespace weir::model
