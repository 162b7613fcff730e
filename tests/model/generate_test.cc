// Generate's context shift: when the context fills, the sequence is cut and prefilled anew, and
// every token after the cut is what a fresh session computes from the cut sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "format/synth_llama.h"
#include "model/generate.h"
#include "model/sampler.h"
#include "model/session.h"
#include "model/streaming_test_util.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

TEST(ShiftedSequenceTest, KeepsTheHeadAndTheRecentHalfOfTheRest) {
  std::vector<int32_t> t(17);
  for (int i = 0; i < 17; ++i) t[static_cast<size_t>(i)] = i;
  // ctx 16, keep 2: 2 + (16 - 2) / 2 = 7 from the end.
  EXPECT_EQ(ShiftedSequence(t, 16, 2), (std::vector<int32_t>{0, 1, 10, 11, 12, 13, 14, 15, 16}));
  // keep 0: the last 8.
  EXPECT_EQ(ShiftedSequence(t, 16, 0), (std::vector<int32_t>{9, 10, 11, 12, 13, 14, 15, 16}));
  // keep past half the context is clamped to it: 8 + 4.
  EXPECT_EQ(ShiftedSequence(t, 16, 100),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 13, 14, 15, 16}));
  // A tiny context still keeps the newest token.
  EXPECT_EQ(ShiftedSequence(std::vector<int32_t>{5, 6}, 1, 0), (std::vector<int32_t>{6}));
}

struct Fixture {
  std::unique_ptr<Model> model;
  ThreadPool pool{2};
  Fixture() {
    const std::string path = testing::TempDir() + "/m.gguf";
    EXPECT_TRUE(format::WriteRandomLlamaGguf(streaming_test::SmallLlama(2), DType::kF32, 11, path,
                                             nullptr)
                    .ok());
    model = std::move(Model::Load(path).value());
  }
  std::unique_ptr<Session> NewSession(int ctx) {
    SessionOptions so;
    so.ctx = ctx;
    so.n_batch = 4;
    return std::move(Session::Create(*model, &pool, so).value());
  }
};

TEST(GenerateTest, ContextShiftEqualsAFreshRunOnTheCutSequence) {
  Fixture f;
  const int ctx = 16, keep = 3, n = 40;
  const int vocab = f.model->config().vocab_size;
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
  auto session = f.NewSession(ctx);
  Sampler greedy(vocab, SamplerOptions{.temp = 0});
  std::vector<int32_t> got;
  auto st = Generate(*session, greedy, prompt, n, /*eos_id=*/-1,
                     [&](int32_t t) {
                       got.push_back(t);
                       return true;
                     },
                     ContextShift{.enabled = true, .keep = keep});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->generated_tokens, n);
  EXPECT_FALSE(st->stopped_at_full_context);
  ASSERT_EQ(got.size(), static_cast<size_t>(n));

  // The reference: every token is the argmax of a fresh session's prefill of the sequence in the
  // cache at that point, the cut written out here from the rule (keep the first `keep`, then the
  // newest (ctx - keep) / 2 of the sequence with the new token).
  std::vector<int32_t> cached = prompt;
  int shifts = 0;
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    auto fresh = f.NewSession(ctx);
    auto logits = fresh->Prefill(cached);
    ASSERT_TRUE(logits.ok());
    const int32_t want = Sampler::Argmax(*logits, vocab);
    ASSERT_EQ(got[static_cast<size_t>(i)], want);
    if (static_cast<int>(cached.size()) == ctx) {
      std::vector<int32_t> all = cached;
      all.push_back(want);
      const size_t tail = static_cast<size_t>((ctx - keep) / 2);
      std::vector<int32_t> cut(all.begin(), all.begin() + keep);
      cut.insert(cut.end(), all.end() - static_cast<ptrdiff_t>(tail), all.end());
      cached = cut;
      if (i + 1 < n) ++shifts;  // after the last token nothing is fed, so nothing is cut
    } else {
      cached.push_back(want);
    }
  }
  EXPECT_GE(shifts, 3);
  EXPECT_EQ(st->context_shifts, shifts);
}

TEST(GenerateTest, WithoutAShiftAFullContextStops) {
  Fixture f;
  const int ctx = 12;
  auto session = f.NewSession(ctx);
  Sampler greedy(f.model->config().vocab_size, SamplerOptions{.temp = 0});
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
  auto st = Generate(*session, greedy, prompt, 100, -1, nullptr);
  ASSERT_TRUE(st.ok());
  // ctx - prompt tokens fill the cache; the token sampled from the last position is the last one.
  EXPECT_EQ(st->generated_tokens, ctx - static_cast<int>(prompt.size()) + 1);
  EXPECT_TRUE(st->stopped_at_full_context);
  EXPECT_EQ(st->context_shifts, 0);
}

}  // namespace
}  // namespace weir::model
