// End to end: a trace written with TraceWriter, replayed by `weir sim --masks trace:FILE`, gives
// hit and byte counts that follow from the masks alone; the command's exit codes and errors.
// Skips when the weir binary has not been built.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "format/trace_writer.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

constexpr uint32_t kLayers = 22;   // the llama-1b preset (TinyLlama-1.1B): d_model 2048
constexpr uint32_t kUnits = 5632;  // d_ff

bool HaveWeir() { return testing::FileExists(testing::WeirBin()); }

// Writes a trace of random neuron masks (gate+up+down share one mask) with fixed cache events;
// returns, per layer, how many active units were seen before (hits in an unbounded cache) and
// how many were first touches (misses).
struct Counts {
  uint64_t active = 0, first = 0;
};
Counts WriteTrace(const std::string& path, int tokens) {
  TraceHeader h;
  h.n_layers = kLayers;
  h.has_cache_events = true;
  h.kinds.push_back(
      {"ffn_gate+ffn_up+ffn_down", 3ull * 2048, std::vector<uint32_t>(kLayers, kUnits)});
  auto w = TraceWriter::Create(path, h);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  std::mt19937 rng(5);
  std::vector<std::set<uint32_t>> seen(kLayers);
  Counts c;
  for (int t = 0; t < tokens; ++t) {
    EXPECT_TRUE((*w)->BeginToken().ok());
    for (uint32_t l = 0; l < kLayers; ++l) {
      std::vector<uint32_t> active;
      for (uint32_t u = 0; u < kUnits; ++u) {
        // Low ids are popular: units below 500 are active half the time, others 5%.
        if (rng() % 100 < (u < 500 ? 50u : 5u)) active.push_back(u);
      }
      for (uint32_t u : active) c.first += seen[l].insert(u).second;
      c.active += active.size();
      EXPECT_TRUE((*w)->SetMaskIndices(l, 0, active).ok());
      EXPECT_TRUE((*w)->SetEvents(l, 0, CacheEvents{3, 4, 1, 1000}).ok());
    }
    EXPECT_TRUE((*w)->EndToken().ok());
  }
  EXPECT_TRUE((*w)->Close().ok());
  return c;
}

TEST(TraceSimCliTest, ReplayCountsFollowFromTheMasks) {
  if (!HaveWeir()) GTEST_SKIP() << "no weir binary at " << testing::WeirBin();
  std::string dir = testing::TempDir();
  std::string trace = dir + "/run.wtrace";
  const int tokens = 12;
  Counts c = WriteTrace(trace, tokens);
  std::string base = testing::WeirBin() + " sim --model llama-1b --device " + testing::SourceDir() +
                     "/profiles/a18.json --masks trace:" + trace + " --json --policy ";
  // 16 GB holds the whole model: a unit misses only on its first use, whatever the policy.
  for (const char* policy : {"lru", "lfu", "belady", "static"}) {
    auto r = testing::RunCommand(base + policy + " --dram 16e9");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["misses"].get<uint64_t>(), c.first) << policy;
    EXPECT_EQ(j["hits"].get<uint64_t>(), c.active - c.first) << policy;
    EXPECT_EQ(j["tokens_simulated"].get<int64_t>(), tokens);
    // Storage bytes: each miss reads 3 tensors x 2048 weights at 4 bits.
    EXPECT_DOUBLE_EQ(j["bytes_per_token"]["storage"].get<double>() * tokens, c.first * 3072.0);
    // The trace's own counters are carried through.
    EXPECT_EQ(j["recorded"]["hits"].get<uint64_t>(), 3ull * kLayers * tokens);
    EXPECT_EQ(j["recorded"]["bytes_read"].get<uint64_t>(), 1000ull * kLayers * tokens);
    EXPECT_NEAR(j["density"].get<double>(),
                static_cast<double>(c.active) / (double(kLayers) * kUnits * tokens), 1e-12);
  }
  // With only the static tensors in memory nothing is cached: every active unit misses.
  auto full = nlohmann::json::parse(testing::RunCommand(base + "lru --dram 16e9").out);
  const double static_bytes = full["memory_plan"]["static_bytes"].get<double>();
  const double streamed = full["memory_plan"]["streamed_bytes"].get<double>();
  auto st = testing::RunCommand(base + "lru --dram " + std::to_string(std::ceil(static_bytes)));
  ASSERT_EQ(st.exit_code, 0) << st.err;
  auto j = nlohmann::json::parse(st.out);
  EXPECT_EQ(j["hits"].get<uint64_t>(), 0u) << "cache " << j["memory_plan"]["cache_bytes"];
  EXPECT_EQ(j["misses"].get<uint64_t>(), c.active);
  // A mid-sized cache: Belady hits at least as often as LRU and LFU on the same trace.
  uint64_t belady = 0;
  for (const char* policy : {"belady", "lru", "lfu"}) {
    auto r = testing::RunCommand(base + policy + " --dram " +
                                 std::to_string(std::llround(static_bytes + 0.3 * streamed)));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    uint64_t hits = nlohmann::json::parse(r.out)["hits"].get<uint64_t>();
    if (std::string(policy) == "belady") belady = hits;
    EXPECT_GE(belady, hits) << policy;
  }
}

TEST(TraceSimCliTest, ExitCodesAndErrors) {
  if (!HaveWeir()) GTEST_SKIP() << "no weir binary at " << testing::WeirBin();
  std::string weir = testing::WeirBin();
  for (const char* cmd : {"sim", "plan", "probe"}) {
    auto h = testing::RunCommand(weir + " " + cmd + " --help");
    EXPECT_EQ(h.exit_code, 0) << cmd;
    EXPECT_NE(h.out.find("--json"), std::string::npos) << cmd;
  }
  EXPECT_EQ(testing::RunCommand(weir + " sim --no-such-flag").exit_code, 2);
  // A budget below the static tensors: runtime error naming the static size.
  auto small = testing::RunCommand(weir + " sim --model llama-3-8b --dram 1e9");
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_NE(small.err.find("static tensors"), std::string::npos) << small.err;
  auto plan = testing::RunCommand(weir + " plan --model llama-2-7b --memory 1e8");
  EXPECT_EQ(plan.exit_code, 1);
  EXPECT_NE(plan.err.find("the minimum is"), std::string::npos) << plan.err;
  // A trace for another model is refused with both layer counts.
  std::string trace = testing::TempDir() + "/t.wtrace";
  WriteTrace(trace, 2);
  auto other = testing::RunCommand(weir + " sim --model llama-2-7b --masks trace:" + trace);
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("22 layers"), std::string::npos) << other.err;
  // Sweeps write a plot.
  std::string svg = testing::TempDir() + "/p.svg";
  auto sweep = testing::RunCommand(weir +
                                   " sim --model phi-3-mini --tokens 3 --sweep "
                                   "dram=1.3e9:2e9:3 --policy lru,lfu --plot " +
                                   svg);
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  EXPECT_NE(testing::ReadFile(svg).find("<polyline"), std::string::npos);
}

// A model file instead of a preset: the shape comes from the file's config and the bits per
// weight from its tensor types (Q4_0 stores 4.5 bits per weight).
TEST(TraceSimCliTest, ShapeAndBitsComeFromAModelFile) {
  if (!HaveWeir()) GTEST_SKIP() << "no weir binary at " << testing::WeirBin();
  std::string weir = testing::WeirBin();
  std::string gguf = testing::TempDir() + "/m.gguf";
  auto gen = testing::RunCommand(weir +
                                 " gen --dims 128,3,4,2,320,512 --type q4_0 --no-progress "
                                 "-o " +
                                 gguf);
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  auto r = testing::RunCommand(weir + " sim --model " + gguf + " --dram 1e7 --json --device " +
                               testing::SourceDir() + "/profiles/a18.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "m.gguf");
  EXPECT_EQ(j["layers"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["memory_plan"]["streamed_bytes"].get<double>(), 3 * 3 * 320 * 128 * 4.5 / 8);
  // An explicit --bits overrides the file's types.
  auto b8 = testing::RunCommand(weir + " sim --model " + gguf + " --dram 1e7 --bits 8 --json");
  ASSERT_EQ(b8.exit_code, 0) << b8.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(b8.out)["memory_plan"]["streamed_bytes"].get<double>(),
                   3 * 3 * 320 * 128.0);
  // The shared real model, when present.
  std::string real = testing::SharedPath("models/tinystories-656k/tinystories-656k-Q8_0.gguf");
  if (!testing::FileExists(real)) return;
  auto t = testing::RunCommand(weir + " sim --model " + real + " --dram 1e7 --json");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  // 2 layers of d_model 128, d_ff 384, Q8_0 = 8.5 bits per weight.
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(t.out)["memory_plan"]["streamed_bytes"].get<double>(),
                   2 * 3 * 384 * 128 * 8.5 / 8);
}

}  // namespace
}  // namespace weir::format
