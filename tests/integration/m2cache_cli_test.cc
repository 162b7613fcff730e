// weir m2search, m2store and --m2cache as a user runs them, on a generated tiny model: the search
// writes a plan that run reads back, the store file streamed under a budget generates the same
// tokens as the resident store, and bad specs, plans and budgets are one-line errors.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testing/testing.h"

namespace weir {
namespace {

using testing::RunCommand;
using testing::WeirBin;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

class M2CacheCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::TempDir() + "/m2cli");
    RunCommand("mkdir -p " + Quote(*dir_));
    auto r = RunCommand(Quote(WeirBin()) + " gen --preset tiny --type f32 --seed 3 --no-progress -o " +
                        Quote(*dir_ + "/tiny.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string text;
    for (int i = 0; i < 400; ++i) text += "the cat sat on a mat and then ran far away. ";
    testing::WriteFile(*dir_ + "/text.txt", text);
  }
  static std::string Model() { return *dir_ + "/tiny.gguf"; }
  static std::string Text() { return *dir_ + "/text.txt"; }
  static std::string* dir_;
};
std::string* M2CacheCliTest::dir_ = nullptr;

TEST_F(M2CacheCliTest, SearchWritesAPlanThatRunUses) {
  const std::string plan = *dir_ + "/plan.json";
  auto r = RunCommand(Quote(WeirBin()) + " m2search -m " + Quote(Model()) + " -f " + Quote(Text()) +
                      " --budget 0.5 --step 0.1 --rank 8 --prompts 2 --prompt-len 8 --generate 4 --ppl-chunks 1 -c 64"
                      " --calib " + Quote(Text()) + " --calib-tokens 128 --json -o " + Quote(plan));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  ASSERT_TRUE(doc["candidates"].is_array());
  ASSERT_GE(doc["candidates"].size(), 3u);
  const double n = doc["byte_ratio"].get<double>();
  int best = 0;
  for (const auto& c : doc["candidates"]) {
    EXPECT_NEAR(c["r_low"].get<double>() + n * c["r_high"].get<double>(), 0.5, 1e-9);
    EXPECT_GT(c["ppl"].get<double>(), 1.0);
    EXPECT_LE(doc["best"]["uq_mean"].get<double>(), c["uq_mean"].get<double>());
    best += c["best"].get<bool>() ? 1 : 0;
  }
  EXPECT_EQ(best, 1);
  auto run = RunCommand(Quote(WeirBin()) + " run -m " + Quote(Model()) + " -n 6 --temp 0 --json --m2cache plan=" + plan);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto out = nlohmann::json::parse(run.out);
  EXPECT_NEAR(out["m2cache"]["neurons_high_per_layer"].get<double>(),
              std::round(doc["best"]["r_high"].get<double>() * 192), 1e-9);  // tiny: d_ff 192
  // The plan written into a store: runs of the store use its ratios unless they name their own.
  const std::string store = *dir_ + "/planned.m2s";
  auto w = RunCommand(Quote(WeirBin()) + " m2store -m " + Quote(Model()) + " --plan " + Quote(plan) + " -o " + Quote(store));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  auto planned = RunCommand(Quote(WeirBin()) + " run -m " + Quote(Model()) + " -n 6 --temp 0 --json --m2cache store=" + store);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_EQ(nlohmann::json::parse(planned.out)["text"], out["text"]);
  EXPECT_NEAR(nlohmann::json::parse(planned.out)["m2cache"]["neurons_low_per_layer"].get<double>(),
              std::round(doc["best"]["r_low"].get<double>() * 192), 1e-9);
  auto own = RunCommand(Quote(WeirBin()) + " run -m " + Quote(Model()) + " -n 6 --temp 0 --json --m2cache store=" + store +
                        ",high=0.5,low=0");
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_NEAR(nlohmann::json::parse(own.out)["m2cache"]["neurons_high_per_layer"].get<double>(), 96, 1e-9);
  auto disagree = RunCommand(Quote(WeirBin()) + " m2store -m " + Quote(Model()) + " --plan " + Quote(plan) +
                             " --rank 4 -o " + Quote(*dir_ + "/x.m2s"));
  EXPECT_EQ(disagree.exit_code, 1);
  EXPECT_NE(disagree.err.find("disagrees"), std::string::npos) << disagree.err;
}

TEST_F(M2CacheCliTest, AStreamedStoreGeneratesWhatTheResidentOneDoes) {
  const std::string store = *dir_ + "/tiny.m2s";
  auto w = RunCommand(Quote(WeirBin()) + " m2store -m " + Quote(Model()) + " --rank 8 -o " + Quote(store));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const std::string base = Quote(WeirBin()) + " run -m " + Quote(Model()) + " -p 'the cat' -n 12 --temp 0 --json ";
  auto resident = RunCommand(base + "--m2cache store=" + store + ",high=0.2,low=0.3");
  // A budget of one layer buffer (window 0): a tiny layer is 192 neurons x 3 rows at Q8_0 + Q4_0,
  // 60 KiB, so every layer is read again on every token.
  auto streamed = RunCommand(base + "--m2cache store=" + store + ",high=0.2,low=0.3,window=0 --memory 64KiB --storage pread");
  ASSERT_EQ(resident.exit_code, 0) << resident.err;
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(nlohmann::json::parse(resident.out)["text"], nlohmann::json::parse(streamed.out)["text"]);
  auto tiers = nlohmann::json::parse(streamed.out)["m2cache"]["tiers"];
  ASSERT_TRUE(tiers.contains("ssd")) << tiers.dump();
  EXPECT_GT(tiers["ssd"]["storage_bytes_per_token"].get<double>(), 0.0) << tiers.dump();
  auto small = RunCommand(base + "--m2cache store=" + store + ",high=0.2,low=0.3 --memory 8KiB");
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_NE(small.err.find("budget"), std::string::npos) << small.err;
}

TEST_F(M2CacheCliTest, BadSpecsAndPlansAreOneLineErrors) {
  const std::string bad_plan = *dir_ + "/bad_plan.json";
  testing::WriteFile(bad_plan, "{\"format\": \"something else\"}");
  for (const std::string& spec : std::vector<std::string>{"high=2", "bogus=1", "tier=tpu", "plan=" + bad_plan,
                                                         "plan=" + *dir_ + "/missing.json"}) {
    auto r = RunCommand(Quote(WeirBin()) + " run -m " + Quote(Model()) + " -n 2 --m2cache " + Quote(spec));
    EXPECT_EQ(r.exit_code, 1) << spec << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  }
  auto both = RunCommand(Quote(WeirBin()) + " run -m " + Quote(Model()) + " -n 2 --m2cache high=0.1 --sparsity dip:0.5");
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("--sparsity"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace weir
