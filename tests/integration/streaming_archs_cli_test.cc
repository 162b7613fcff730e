// End to end on every dense row of the architecture table, as a user runs it: `weir gen --arch A`,
// `weir pack`, then `weir run --memory` just above the pack's minimum prints the greedy text of
// the same pack run with no limit, and its `--trace` replays exactly in `weir sim`.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace weir {
namespace {

class StreamingArchCliTest : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamingArchCliTest, GreedyTextUnderABudgetIsTheUnlimitedText) {
  const std::string w = testing::WeirBin();
  if (!testing::FileExists(w)) GTEST_SKIP() << "weir binary not built";
  const std::string arch = GetParam();
  const std::string dir = testing::TempDir();
  const std::string gguf = dir + "/cli_" + arch + ".gguf", pack = dir + "/cli_" + arch + ".weir";
  auto g = testing::RunCommand(w + " gen --arch " + arch + " --preset tiny --type q8_0 --seed 5 -o " +
                               gguf);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  auto p = testing::RunCommand(w + " pack -m " + gguf + " -o " + pack + " --no-progress");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const std::string run = w + " run -m " + pack +
                          " -p 'Once upon a time' -n 12 -c 64 --temp 0 --memory-scope weights"
                          " --block 4KiB --prefetch -1";
  auto unlimited = testing::RunCommand(run + " --json");
  ASSERT_EQ(unlimited.exit_code, 0) << unlimited.err;
  const nlohmann::json u = nlohmann::json::parse(unlimited.out, nullptr, false);
  ASSERT_TRUE(u.is_object()) << unlimited.out;
  const uint64_t minimum = testing::WeirMinimumBudget(pack);
  ASSERT_GT(minimum, 0u) << "no budget found that the pack runs at";
  const std::string trace = dir + "/cli_" + arch + ".wtrace";
  auto streamed = testing::RunCommand(run + " --memory " + std::to_string(minimum + (16u << 10)) +
                                      " --json --trace " + trace);
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  const nlohmann::json r = nlohmann::json::parse(streamed.out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << streamed.out;
  const std::string text = r.value("text", std::string());
  ASSERT_FALSE(text.empty()) << streamed.out;
  EXPECT_EQ(text, u.value("text", std::string()));
  EXPECT_EQ(r["generated_tokens"], u["generated_tokens"]);
  const nlohmann::json& total = r["streaming"]["total"];
  EXPECT_GT(total["storage_bytes"].get<uint64_t>(), 0u);
  auto sim = testing::RunCommand(w + " sim --model " + pack + " --masks trace:" + trace +
                                 " --device this-machine --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const nlohmann::json s = nlohmann::json::parse(sim.out, nullptr, false);
  ASSERT_TRUE(s.is_object()) << sim.out;
  EXPECT_TRUE(s["exact_match"].get<bool>()) << s["first_mismatch"];
  EXPECT_EQ(s["replayed"]["bytes_read"].get<uint64_t>(), total["storage_bytes"].get<uint64_t>());
}

INSTANTIATE_TEST_SUITE_P(Archs, StreamingArchCliTest,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"));

}  // namespace
}  // namespace weir
