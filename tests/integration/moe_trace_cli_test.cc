// End to end, a mixture of experts' routing trace: `weir run --trace` on a generated tiny Mixtral
// records the experts each layer chose for each token; `weir sim --masks trace:FILE` replays them
// with whole experts as the cache unit (hits checked against a count made here from the trace),
// and projects them onto Mixtral 8x7B's real shape (the trace's 2 layers cycled over 32).
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "format/trace_reader.h"
#include "testing/testing.h"

namespace weir {
namespace {

nlohmann::json Json(const testing::CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
}

TEST(MoeTraceCliTest, RunRecordsRoutingAndSimReplaysItWithExpertUnits) {
  const std::string w = testing::WeirBin();
  if (!testing::FileExists(w)) GTEST_SKIP() << "weir binary not built";
  const std::string dir = testing::TempDir();
  const std::string model = dir + "/mixtral-tiny.gguf", trace = dir + "/run.wtrace";
  auto g = testing::RunCommand(w + " gen --arch mixtral --preset tiny --type f32 --seed 5 -o " +
                               model);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  auto run = testing::RunCommand(w + " run -m " + model +
                                 " -p 'Once upon a time' -n 10 -c 64 --temp 0 -t 1 --trace " +
                                 trace);
  ASSERT_EQ(run.exit_code, 0) << run.err;

  // The trace: one kind of 8 experts per layer, exactly 2 chosen per token and layer.
  auto reader = format::TraceReader::Open(trace);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const format::TraceHeader& h = (*reader)->header();
  ASSERT_EQ(h.n_layers, 2u);
  ASSERT_EQ(h.kinds.size(), 1u);
  EXPECT_EQ(h.kinds[0].name, "ffn_experts");
  EXPECT_EQ(h.kinds[0].units[0], 8u);
  EXPECT_EQ(h.kinds[0].weights_per_unit, 3u * 64u * 64u);
  std::vector<std::vector<std::set<uint32_t>>> chosen(2);  // [layer][token]
  format::TraceToken tok;
  for (;;) {
    auto more = (*reader)->Next(&tok);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    if (!*more) break;
    for (uint32_t l = 0; l < 2; ++l) {
      std::set<uint32_t> s;
      for (uint32_t e = 0; e < 8; ++e) {
        if (tok.active(l, 0, e)) s.insert(e);
      }
      EXPECT_EQ(s.size(), 2u) << "layer " << l << " token " << tok.token_index();
      chosen[l].push_back(s);
    }
  }
  const size_t n_tokens = chosen[0].size();
  ASSERT_GE(n_tokens, 10u);  // the prompt's tokens and the generated ones

  // Replay on the model itself. First the static bytes, then a budget of 2.5 experts: LRU then
  // holds the previous token's 2 experts, so a layer's hits are |chosen(t) ∩ chosen(t-1)|.
  const std::string sim = w + " sim --model " + model + " --masks trace:" + trace +
                          " --device a18 --json --policy lru";
  const nlohmann::json first = Json(testing::RunCommand(sim + " --dram 1e9"));
  ASSERT_TRUE(first.is_object());
  const double expert_bytes = 3 * 64 * 64 * 4.0;  // F32
  const double budget = first["memory_plan"]["static_bytes"].get<double>() + 2.5 * 2 * expert_bytes;
  const nlohmann::json s =
      Json(testing::RunCommand(sim + " --dram " + std::to_string(static_cast<uint64_t>(budget))));
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["tokens_simulated"].get<size_t>(), n_tokens);
  uint64_t want_hits = 0;
  for (int l = 0; l < 2; ++l) {
    for (size_t t = 1; t < n_tokens; ++t) {
      for (uint32_t e : chosen[l][t]) want_hits += chosen[l][t - 1].count(e);
    }
  }
  EXPECT_EQ(s["hits"].get<uint64_t>(), want_hits);
  EXPECT_EQ(s["hits"].get<uint64_t>() + s["misses"].get<uint64_t>(), 2 * 2 * n_tokens);
  EXPECT_NEAR(s["bytes_per_token"]["storage"].get<double>(),
              s["misses"].get<double>() * expert_bytes / static_cast<double>(n_tokens), 1e-6);
  EXPECT_DOUBLE_EQ(s["hit_rate"].get<double>(),
                   static_cast<double>(want_hits) / static_cast<double>(2 * 2 * n_tokens));

  // Projection onto Mixtral 8x7B: 32 layers replaying trace layers l mod 2, with its experts'
  // real size at 4.5 bits per weight (Q4_0).
  const nlohmann::json p = Json(testing::RunCommand(
      w + " sim --model mixtral-8x7b --masks trace:" + trace +
      " --device ufs4 --dram 12e9 --bits 4.5 --policy lfu --json"));
  ASSERT_TRUE(p.is_object());
  EXPECT_NE(p["masks"].get<std::string>().find("2 trace layers cycled over 32"), std::string::npos)
      << p["masks"];
  ASSERT_EQ(p["layers"].size(), 32u);
  for (int l = 0; l + 2 < 32; ++l) {
    EXPECT_EQ(p["layers"][l]["hits"], p["layers"][l + 2]["hits"]) << l;
    EXPECT_EQ(p["layers"][l]["units"].get<int>(), 8);
  }
  EXPECT_EQ(p["hits"].get<uint64_t>() + p["misses"].get<uint64_t>(), 32 * 2 * n_tokens);
  // A dense model cannot take a routing trace.
  auto dense = testing::RunCommand(w + " sim --model llama-2-7b --masks trace:" + trace);
  EXPECT_NE(dense.exit_code, 0);

  // `weir plan --trace`: every cache size that fits is the simulator's replay at its budget (2
  // experts cached per layer under LRU: the hits counted above), and the plan is the fastest.
  const nlohmann::json plan = Json(testing::RunCommand(
      w + " plan --model " + model + " --trace " + trace + " --device a18 --policy lru --json " +
      "--memory " + std::to_string(static_cast<uint64_t>(budget))));
  ASSERT_TRUE(plan.is_object());
  ASSERT_EQ(plan["steps"].size(), 3u);  // 0, 1, 2 experts cached
  EXPECT_EQ(plan["steps"][2]["cached_experts"].get<int>(), 2);
  EXPECT_DOUBLE_EQ(plan["steps"][2]["hit_rate"].get<double>(), s["hit_rate"].get<double>());
  EXPECT_DOUBLE_EQ(plan["steps"][0]["hit_rate"].get<double>(), 0.0);
  double best = 0;
  for (const auto& st : plan["steps"]) best = std::max(best, st["tokens_per_second"].get<double>());
  EXPECT_DOUBLE_EQ(plan["at_budget"]["tokens_per_second"].get<double>(), best);
  EXPECT_GE(plan["budget_pick"]["tokens_per_second"].get<double>(), 0.95 * best);
  EXPECT_LE(plan["budget_pick"]["memory_bytes"].get<double>(),
            plan["at_budget"]["memory_bytes"].get<double>());
  // The trace projected onto Mixtral 8x7B plans its 32 layers; a dense model refuses it.
  const nlohmann::json big = Json(testing::RunCommand(
      w + " plan --model mixtral-8x7b --trace " + trace + " --device ufs4 --bits 4.5 --memory " +
      "13.1e9 --json"));
  ASSERT_TRUE(big.is_object());
  EXPECT_EQ(big["n_layers"].get<int>(), 32);
  EXPECT_NE(big["routing"].get<std::string>().find("cycled over 32"), std::string::npos);
  auto dense_plan = testing::RunCommand(w + " plan --model llama-2-7b --memory 4e9 --trace " +
                                        trace);
  EXPECT_NE(dense_plan.exit_code, 0);
  EXPECT_NE(dense_plan.err.find("routing trace"), std::string::npos) << dense_plan.err;
}

}  // namespace
}  // namespace weir
