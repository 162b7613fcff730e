// Speculative decoding's verify pass (speculative/speculative.h) runs K + 1 positions as one
// forward call and must give each the logits single-token decode gives it, bit for bit, so that
// greedy speculation emits exactly the plain run's tokens: the kernels are batch-invariant (each
// token's dot products sum in the same order whatever the batch). Checked on every kernel path
// this CPU has, for float and quantized weights, tiled and not, on architectures with sliding
// windows and QK-norm, and on SmolLM2 when shared/ has it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "format/synth_llama.h"
#include "kernels/isa.h"
#include "model/model.h"
#include "model/session.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

// Positions of a 9-token forward call whose logits differ from decoding the 9 one by one.
int DifferingPositions(const Model& m, int threads = 2) {
  ThreadPool pool(threads);
  SessionOptions so;
  so.ctx = 128;
  so.n_batch = 16;
  auto a = Session::Create(m, &pool, so);
  auto b = Session::Create(m, &pool, so);
  EXPECT_TRUE(a.ok() && b.ok());
  if (!a.ok() || !b.ok()) return -1;
  const int vocab = m.config().vocab_size;
  std::vector<int32_t> prompt, next;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 37 + 5) % vocab);
  for (int i = 0; i < 9; ++i) next.push_back((i * 53 + 11) % vocab);
  EXPECT_TRUE((*a)->Prefill(prompt).ok());
  EXPECT_TRUE((*b)->Prefill(prompt).ok());
  auto batch = (*a)->Forward(next, LogitsFor::kAll);
  EXPECT_TRUE(batch.ok());
  if (!batch.ok()) return -1;
  std::vector<float> all(*batch, *batch + next.size() * vocab);
  int differ = 0;
  for (size_t i = 0; i < next.size(); ++i) {
    auto one = (*b)->Forward(std::span(&next[i], 1), LogitsFor::kLast);
    EXPECT_TRUE(one.ok());
    if (!one.ok() || std::memcmp(*one, all.data() + i * vocab, vocab * sizeof(float)) != 0) ++differ;
  }
  return differ;
}

TEST(VerifyPassTest, BatchedPositionsEqualSingleTokenDecode) {
  for (kernels::Isa isa : kernels::SupportedIsas()) {
    kernels::ScopedIsaOverride use(isa);
    // The override holds on this thread only: a forced path runs on one thread, the best one also
    // on the pool.
    const int threads = isa == kernels::BestIsa() ? 2 : 1;
    for (const char* arch : {"llama", "gemma3", "qwen3", "gemma2"}) {
      for (DType t : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
        for (bool tiled : {false, true}) {
          SCOPED_TRACE(std::string(kernels::IsaName(isa)) + " " + arch + " " + DTypeName(t) +
                       (tiled ? " tiled" : ""));
          const std::string path = testing::TempDir() + "/v.gguf";
          auto spec = format::SynthPreset("tiny", arch);
          ASSERT_TRUE(spec.ok());
          ASSERT_TRUE(format::WriteRandomLlamaGguf(*spec, t, 7, path, nullptr).ok());
          format::LoadOptions o;
          if (tiled) {
            o.placement = format::WeightPlacement::kMemory;
            o.tile_linear = true;
          }
          auto m = Model::Load(path, o);
          ASSERT_TRUE(m.ok()) << m.status().ToString();
          EXPECT_EQ(DifferingPositions(**m, threads), 0);
        }
      }
    }
  }
}

TEST(VerifyPassTest, SmolLM2BatchedPositionsEqualSingleTokenDecode) {
  const std::string smol =
      testing::SharedPath("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
  if (!testing::FileExists(smol)) GTEST_SKIP() << smol << " is absent";
  for (bool tiled : {false, true}) {
    format::LoadOptions o;
    o.placement = format::WeightPlacement::kMemory;
    o.tile_linear = tiled;
    auto m = Model::Load(smol, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(DifferingPositions(**m), 0) << (tiled ? "tiled" : "untiled");
  }
}

}  // namespace
}  // namespace weir::model
