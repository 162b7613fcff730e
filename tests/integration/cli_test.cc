// End-to-end checks of build/bin/weir as a user runs it: the published stories260K greedy
// output, exit codes for usage and runtime errors, and clean one-line errors on bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "kernels/tiled.h"

#include "testing/testing.h"

namespace weir {
namespace {

using testing::RunCommand;
using testing::SharedPath;
using testing::WeirBin;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// llama2.c's doc/stories260K.md: greedy decoding of stories260K from BOS.
TEST(CliTest, Stories260KGreedyReproducesPublishedText) {
  const std::string model = SharedPath("models/stories260K/stories260K.bin");
  if (!testing::FileExists(model)) GTEST_SKIP() << "no " << model;
  auto r = RunCommand(Quote(WeirBin()) + " run -m " + Quote(model) + " -n 60 --temp 0 -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl named Lily. She loved to play outside in "
                        "the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high",
                        0),
            0u)
      << r.out;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

TEST(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunCommand(Quote(WeirBin()) + " no-such-command").exit_code, 2);
  EXPECT_EQ(RunCommand(Quote(WeirBin()) + " run --no-such-flag").exit_code, 2);
  EXPECT_EQ(RunCommand(Quote(WeirBin()) + " run").exit_code, 2);  // -m is required
  EXPECT_EQ(RunCommand(Quote(WeirBin()) + " run --help").exit_code, 0);
}

TEST(CliTest, BadModelFilesFailWithOneLineError) {
  const std::string dir = testing::TempDir();
  testing::WriteFile(dir + "/junk.bin", "this is not a model at all, just some text bytes");
  testing::WriteFile(dir + "/trunc.gguf", std::string("GGUF\x03\x00\x00\x00\x05", 9));
  for (const std::string& f : {dir + "/junk.bin", dir + "/trunc.gguf", dir + "/missing.gguf"}) {
    auto r = RunCommand(Quote(WeirBin()) + " run -m " + Quote(f) + " -n 4");
    EXPECT_EQ(r.exit_code, 1) << f << ": " << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  }
}

TEST(CliTest, SparsityFlagErrorsAreClear) {
  const std::string model = SharedPath("models/stories260K/stories260K.bin");
  if (!testing::FileExists(model)) GTEST_SKIP() << "no " << model;
  auto r = RunCommand(Quote(WeirBin()) + " run -m " + Quote(model) + " -n 4 --sparsity nosuch:0.5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r.err;
}

// Where the weights live, as `weir bench --json` reports it: copied into memory and tiled for a
// dense run, copied but row-major under a sparsity policy, mapped with --mmap.
TEST(CliTest, BenchReportsWeightPlacement) {
  const std::string dir = testing::TempDir(), model = dir + "/tiny-q4.gguf";
  auto gen = RunCommand(Quote(WeirBin()) + " gen --preset tiny --type q4_0 -o " + Quote(model));
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const std::string bench = Quote(WeirBin()) + " bench -m " + Quote(model) +
                            " -p 4 -n 4 -r 1 -t 2 --no-stream --json";
  const int tiled = kernels::HasFastTiledProduct() ? 7 * 2 + 1 : 0;  // 2 layers + output head
  struct Case {
    std::string flags, weights;
    int tiled;
  };
  for (const Case& c : {Case{"", "memory", tiled}, Case{" --mmap", "mapped", 0},
                        Case{" --sparsity glu:0.5", "memory", 0}}) {
    auto r = RunCommand(bench + c.flags);
    ASSERT_EQ(r.exit_code, 0) << c.flags << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("weights"), c.weights) << c.flags;
    EXPECT_EQ(j.at("tiled_tensors"), c.tiled) << c.flags;
    EXPECT_GT(j.at("decode_tok_s").get<double>(), 0) << c.flags;
  }
}

}  // namespace
}  // namespace weir

namespace weir {
namespace {

// A mixture of experts from `weir gen --dims --experts`: `weir inspect --json` reports the
// experts, the experts per token and the bytes of one expert (gate + up + down of one layer), and
// `weir run` decodes it; experts the file cannot have are a usage-free runtime error.
TEST(CliTest, GenAndInspectMixtureOfExperts) {
  const std::string dir = testing::TempDir(), model = dir + "/moe.gguf";
  auto gen = RunCommand(Quote(WeirBin()) + " gen --arch qwen3moe --dims 64,2,4,2,32,320 --experts 6,3" +
                        " --type q8_0 --no-progress -o " + Quote(model));
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  auto r = RunCommand(Quote(WeirBin()) + " inspect --json -m " + Quote(model));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("config").at("architecture"), "qwen3moe");
  EXPECT_EQ(j.at("experts").at("n_expert"), 6);
  EXPECT_EQ(j.at("experts").at("n_expert_used"), 3);
  // One Q8_0 expert: gate and up [32, 64], down [64, 32]; 34 bytes per 32 values.
  EXPECT_EQ(j.at("experts").at("expert_bytes"), 3 * 32 * 64 / 32 * 34);
  EXPECT_EQ(j.at("experts").at("all_experts_bytes"), 2 * 6 * 3 * 32 * 64 / 32 * 34);
  auto text = RunCommand(Quote(WeirBin()) + " inspect -m " + Quote(model));
  EXPECT_NE(text.out.find("experts:    6 per layer, 3 per token"), std::string::npos) << text.out;
  auto run = RunCommand(Quote(WeirBin()) + " run -m " + Quote(model) + " -p hello -n 8 --temp 0 -t 2");
  EXPECT_EQ(run.exit_code, 0) << run.err;

  auto bad = RunCommand(Quote(WeirBin()) + " gen --arch mixtral --dims 64,2,4,2,64,320 --experts 4,5" +
                        " --no-progress -o " + Quote(dir + "/bad.gguf"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("n_expert_used <= n_expert"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace weir
