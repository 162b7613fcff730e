// The memory budget as the operating system sees it. SmolLM2's pack in each dense layout runs
// under --memory B, B = weir's minimum for the pack (the process itself, statics, KV cache,
// buffers) plus a quarter of the bytes it streams: the peak resident set the kernel reports
// (VmHWM, `streaming.peak_rss` in --json) stays within B + 5 %, and the budget bit (blocks were
// read again). Where this process may make memory cgroups (root; ../shared/tools/in-cgroup),
// the same run inside a cgroup of B + 5 %, which also counts the page cache, is not killed.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace weir {
namespace {

nlohmann::json ParseJson(const std::string& out) { return nlohmann::json::parse(out, nullptr, false); }

class BudgetRssTest : public ::testing::TestWithParam<const char*> {};

TEST_P(BudgetRssTest, PeakResidentSetStaysWithinTheBudget) {
  const std::string w = testing::WeirBin();
  if (!testing::FileExists(w)) GTEST_SKIP() << "weir binary not built";
  const std::string gguf =
      testing::SharedPath("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
  if (!testing::FileExists(gguf)) GTEST_SKIP() << gguf << " is absent";
  const std::string layout = GetParam();
  const std::string pack = testing::TempDir() + "/rss_" + layout + ".weir";
  auto p = testing::RunCommand(w + " pack -m " + gguf + " -o " + pack + " --layout " + layout + " --no-progress");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const std::string run = w + " run -m " + pack + " -p 'The history of the river' -n 24 -c 256 --temp 0 --json";
  auto unlimited = testing::RunCommand(run);
  ASSERT_EQ(unlimited.exit_code, 0) << unlimited.err;
  const nlohmann::json u = ParseJson(unlimited.out);
  ASSERT_TRUE(u.is_object()) << unlimited.out;
  const nlohmann::json& plan = u["streaming"]["plan"];
  const uint64_t minimum = plan["minimum"].get<uint64_t>(), streamed = plan["streamed"].get<uint64_t>();
  ASSERT_GT(streamed, 0u);
  const uint64_t budget = minimum + streamed / 4;
  auto limited = testing::RunCommand(run + " --memory " + std::to_string(budget));
  ASSERT_EQ(limited.exit_code, 0) << limited.err;
  const nlohmann::json r = ParseJson(limited.out);
  ASSERT_TRUE(r.is_object()) << limited.out;
  EXPECT_EQ(r.value("text", std::string("-")), u.value("text", std::string("+")));
  const uint64_t peak = r["streaming"]["peak_rss"].get<uint64_t>();
  EXPECT_LE(static_cast<double>(peak), 1.05 * static_cast<double>(budget))
      << "peak RSS " << peak << " over the budget " << budget;
  // The budget bit: a quarter of the streamed bytes cannot hold the pack, so blocks were re-read.
  EXPECT_GT(r["streaming"]["total"]["storage_bytes"].get<uint64_t>(), streamed);

  const std::string in_cgroup = testing::SharedDir() + "/tools/in-cgroup";
  if (::geteuid() != 0 || !testing::FileExists(in_cgroup)) {
    std::printf("[ skipped  ] the cgroup half: needs root and %s\n", in_cgroup.c_str());
    return;
  }
  const uint64_t limit = budget + budget / 20;
  auto c = testing::RunCommand(in_cgroup + " " + std::to_string(limit) + " -- " + run);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(c.err, m, std::regex("oom_kills=([0-9]+) exit=([0-9]+)"))) << c.err;
  EXPECT_EQ(m[1].str(), "0") << c.err;
  EXPECT_EQ(c.exit_code, 0) << c.err;
}

INSTANTIATE_TEST_SUITE_P(Layouts, BudgetRssTest, ::testing::Values("bundles", "columns"));

}  // namespace
}  // namespace weir
