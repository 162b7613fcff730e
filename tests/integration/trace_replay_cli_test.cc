// End to end, the cross-check: a real streamed `weir run --trace` of a generated pack,
// replayed by `weir sim --masks trace:FILE --device this-machine` with the same policy and budget,
// gives exactly the block hits and bytes read the run itself counted (its --json totals). Exact
// needs the run's read-ahead off (--prefetch -1, docs/simulator.md). Also: --trace on a resident
// run with --sparsity records neuron masks that `weir sim` replays, and `weir run --plan auto`.
#include <gtest/gtest.h>


#include <nlohmann/json.hpp>
#include <string>

#include "testing/testing.h"

namespace weir {
namespace {

bool HaveWeir() { return testing::FileExists(testing::WeirBin()); }

struct Files {
  std::string dir, gguf, pack;
};

Files MakePack() {
  Files f;
  f.dir = testing::TempDir();
  f.gguf = f.dir + "/tiny.gguf";
  f.pack = f.dir + "/tiny.weir";
  const std::string w = testing::WeirBin();
  auto g = testing::RunCommand(w + " gen --preset tiny --type q8_0 --seed 3 -o " + f.gguf);
  EXPECT_EQ(g.exit_code, 0) << g.err;
  auto p = testing::RunCommand(w + " pack -m " + f.gguf + " -o " + f.pack);
  EXPECT_EQ(p.exit_code, 0) << p.err;
  return f;
}

nlohmann::json Json(const testing::CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
}

TEST(TraceReplayCliTest, ReplayOfARealStreamedRunMatchesItsCountsExactly) {
  if (!HaveWeir()) GTEST_SKIP() << "weir binary not built";
  const Files f = MakePack();
  const std::string w = testing::WeirBin();
  // The budgets: the minimum this build plans for the pack (it moves with the session's
  // buffers) + 16 and + 48 KiB, so that part of the model is cached. The minimum comes from
  // refusals: the first, before the session is sized, names the minimum without it; a budget of
  // that is refused again with the whole minimum.
  const uint64_t minimum = testing::WeirMinimumBudget(f.pack);
  ASSERT_GT(minimum, 0u) << "no budget found that the pack runs at";
  for (const char* policy : {"lru", "mru"}) {
    SCOPED_TRACE(policy);
    for (uint64_t extra : {16u << 10, 48u << 10}) {
      const std::string budget = std::to_string(minimum + extra);
      SCOPED_TRACE(budget);
      const std::string trace = f.dir + "/run-" + policy + "-" + budget + ".wtrace";
      const std::string common = std::string(" --memory ") + budget +
                                 " --memory-scope weights --policy " + policy +
                                 " --block 4KiB --prefetch -1";
      auto run = testing::RunCommand(w + " run -m " + f.pack +
                                     " -p 'Once upon a time' -n 12 -c 64 --temp 0 --json" +
                                     common + " --trace " + trace);
      const nlohmann::json r = Json(run);
      ASSERT_TRUE(r.contains("streaming")) << run.out;
      const nlohmann::json& total = r["streaming"]["total"];
      auto sim = testing::RunCommand(w + " sim --model " + f.pack + " --masks trace:" + trace +
                                     " --device this-machine --json");
      const nlohmann::json s = Json(sim);
      ASSERT_TRUE(s.is_object()) << sim.out << sim.err;
      EXPECT_TRUE(s["as_recorded"].get<bool>());
      EXPECT_TRUE(s["exact_match"].get<bool>()) << s["first_mismatch"];
      // What the run counted == what its trace recorded == what the replay counted.
      EXPECT_EQ(s["recorded"]["hits"].get<uint64_t>(), total["block_hits"].get<uint64_t>());
      EXPECT_EQ(s["replayed"]["hits"].get<uint64_t>(), total["block_hits"].get<uint64_t>());
      EXPECT_EQ(s["replayed"]["hits"].get<uint64_t>() + s["replayed"]["misses"].get<uint64_t>(),
                total["block_accesses"].get<uint64_t>());
      EXPECT_EQ(s["replayed"]["bytes_read"].get<uint64_t>(),
                total["storage_bytes"].get<uint64_t>());
      EXPECT_GT(total["storage_bytes"].get<uint64_t>(), 0u);
      EXPECT_GT(s["decode_tok_s"].get<double>(), 0.0);
      // The replay follows its inputs: at a budget that holds the whole model it reads less.
      auto big = Json(testing::RunCommand(w + " sim --model " + f.pack + " --masks trace:" +
                                          trace + " --device this-machine --dram 64MiB --json"));
      EXPECT_FALSE(big["as_recorded"].get<bool>());
      EXPECT_LT(big["replayed"]["bytes_read"].get<uint64_t>(),
                total["storage_bytes"].get<uint64_t>());
    }
  }
}

TEST(TraceReplayCliTest, NeuronTraceOfASparseRunReplays) {
  if (!HaveWeir()) GTEST_SKIP() << "weir binary not built";
  const Files f = MakePack();
  const std::string w = testing::WeirBin();
  const std::string trace = f.dir + "/neurons.wtrace";
  auto run = testing::RunCommand(w + " run -m " + f.gguf +
                                 " -p 'Once upon a time' -n 8 --temp 0 --sparsity glu:0.5 --trace " +
                                 trace);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto s = Json(testing::RunCommand(w + " sim --model " + f.gguf + " --masks trace:" + trace +
                                    " --device a18 --policy lru --json"));
  ASSERT_TRUE(s.is_object());
  const double density = s["density"].get<double>();
  EXPECT_GT(density, 0.3);
  EXPECT_LT(density, 0.7);
  // Dense: every unit.
  const std::string dense = f.dir + "/dense.wtrace";
  ASSERT_EQ(testing::RunCommand(w + " run -m " + f.gguf + " -p hi -n 4 --temp 0 --trace " + dense)
                .exit_code,
            0);
  auto d = Json(testing::RunCommand(w + " sim --model " + f.gguf + " --masks trace:" + dense +
                                    " --device a18 --json"));
  EXPECT_DOUBLE_EQ(d["density"].get<double>(), 1.0);
  // A trace of a pack needs the pack, not another model.
  auto bad = testing::RunCommand(w + " ppl -m " + f.gguf + " -f /nonexistent --trace " + dense);
  EXPECT_EQ(bad.exit_code, 1);
}

TEST(TraceReplayCliTest, PlanAutoPrintsItsChoiceAndRuns) {
  if (!HaveWeir()) GTEST_SKIP() << "weir binary not built";
  const Files f = MakePack();
  const std::string w = testing::WeirBin();
  auto r = testing::RunCommand(w + " run -m " + f.pack +
                               " -p hi -n 4 -c 64 --temp 0 --memory 12MiB --memory-scope weights --plan auto "
                               "--plan-device a18");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("plan (ActiveFlow, device a18"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--prefetch"), std::string::npos) << r.err;
  auto g = testing::RunCommand(w + " run -m " + f.gguf +
                               " -p hi -n 4 --temp 0 --plan auto --plan-device a18");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.err.find("plan (ActiveFlow"), std::string::npos) << g.err;
  // The plan chooses the sparsity: an explicit one conflicts.
  auto c = testing::RunCommand(w + " run -m " + f.gguf + " -p hi -n 2 --plan auto --sparsity glu:0.5");
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("drop --sparsity"), std::string::npos) << c.err;
}

}  // namespace
}  // namespace weir
