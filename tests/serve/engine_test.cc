// The serve engine's decode rounds: with more busy slots than a session's n_batch, the slots are
// advanced in several batches, and every request gets the tokens it gets with batching off.
#include "serve/engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "format/synth_llama.h"
#include "model/model.h"
#include "testing/testing.h"

namespace weir::serve {
namespace {

// Greedy replies (token ids as text) of `n_jobs` requests on `n_jobs` slots of n_batch 2, and
// the tokens per decode step the metrics saw.
std::vector<std::string> Replies(const model::Model& m, ThreadPool* pool, int n_jobs, bool batch,
                                 double* batch_size) {
  std::vector<std::unique_ptr<model::Session>> sessions;
  for (int i = 0; i < n_jobs; ++i) {
    model::SessionOptions o;
    o.ctx = 64;
    o.n_batch = 2;
    auto s = model::Session::Create(m, pool, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    sessions.push_back(std::move(s).value());
  }
  TextCodec codec;
  codec.decode = [](int32_t, int32_t id) { return std::to_string(id) + " "; };
  codec.is_stop = [](int32_t) { return false; };
  codec.vocab_size = m.config().vocab_size;
  Metrics metrics;
  std::vector<std::shared_ptr<Job>> jobs;
  {
    Engine engine(codec, std::move(sessions), 8, &metrics, batch);
    for (int i = 0; i < n_jobs; ++i) {
      auto job = std::make_shared<Job>();
      job->prompt = {1, static_cast<int32_t>(5 + 7 * i), static_cast<int32_t>(3 + i)};
      job->max_tokens = 8;
      job->sampling.temp = 0;
      EXPECT_FALSE(engine.Submit(job).has_value());
      jobs.push_back(job);
    }
    for (auto& job : jobs) {
      std::unique_lock<std::mutex> lock(job->mu);
      job->cv.wait(lock, [&] { return job->done; });
    }
  }
  std::smatch sm;
  const std::string text = metrics.Render("");
  const std::regex re("weir_decode_batch_size ([0-9.]+)");
  *batch_size = std::regex_search(text, sm, re) ? std::stod(sm[1]) : 0;
  std::vector<std::string> out;
  for (auto& job : jobs) {
    EXPECT_EQ(job->finish_reason, "length");
    out.push_back(job->text);
  }
  return out;
}

TEST(ServeEngineTest, MoreSlotsThanABatchHoldsRunInSeveralBatches) {
  const std::string path = testing::TempDir() + "/engine_tiny.gguf";
  auto spec = format::SynthPreset("tiny", "llama");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 3, path, nullptr).ok());
  auto m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ThreadPool pool(2);
  double batched_size = 0, alone_size = 0;
  const std::vector<std::string> batched = Replies(**m, &pool, 5, true, &batched_size);
  const std::vector<std::string> alone = Replies(**m, &pool, 5, false, &alone_size);
  EXPECT_EQ(batched, alone);
  EXPECT_EQ(alone_size, 1.0);
  // Batches of at most 2 (n_batch): above 1 token per step, never above 2.
  EXPECT_GT(batched_size, 1.0);
  EXPECT_LE(batched_size, 2.0);
}

}  // namespace
}  // namespace weir::serve
