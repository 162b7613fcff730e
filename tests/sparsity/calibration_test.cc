#include "sparsity/calibration.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sparsity/select.h"
#include "test_util.h"
#include "testing/testing.h"

namespace weir::sparsity {
namespace {

using testutil::RandomActivations;

// Two layers, every statistic fed `tokens` vectors.
Calibration Collect(int64_t max_samples, int tokens, int64_t d = 48, int64_t d_ff = 96) {
  Calibrator cal(2, max_samples, 7);
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < 2; ++l) {
      const uint32_t seed = static_cast<uint32_t>(1000 * t + 10 * l);
      cal.Add(l, Site::kAttnIn, RandomActivations(d, seed + 1));
      cal.Add(l, Site::kAttnOut, RandomActivations(d, seed + 2));
      cal.Add(l, Site::kMlpIn, RandomActivations(d, seed + 3));
      cal.Add(l, Site::kMlpDown, RandomActivations(d_ff, seed + 4));
      cal.AddGate(l, RandomActivations(d_ff, seed + 5));
    }
  }
  return cal.Finish("test");
}

TEST(CalibratorTest, KeepsEverythingWhileTheReservoirHasRoom) {
  Calibrator cal(1, 1000);
  auto a = RandomActivations(300, 1);
  cal.Add(0, Site::kMlpIn, a);
  cal.AddGate(0, a);
  Calibration c = cal.Finish();
  const SampleSet& s = c.samples(0, CalibStat::kMlpIn);
  EXPECT_EQ(s.width, 300);
  EXPECT_EQ(s.seen, 300);
  std::vector<float> ref;
  for (float v : a) ref.push_back(std::fabs(v));
  std::sort(ref.begin(), ref.end());
  EXPECT_EQ(s.sorted, ref);
  const SampleSet& g = c.samples(0, CalibStat::kGateSilu);
  for (size_t i = 0; i < a.size(); ++i) ref[i] = AbsSilu(a[i]);
  std::sort(ref.begin(), ref.end());
  EXPECT_EQ(g.sorted, ref);
  EXPECT_EQ(c.samples(0, CalibStat::kAttnIn).width, 0);  // never observed
}

TEST(CalibratorTest, ReservoirStaysBoundedAndUniform) {
  // Offer 0, 1, ..., 199999 once each: a uniform sample of 4096 has mean ~100000 and about a
  // tenth of it below 20000. Deterministic (fixed seed); the bounds are many sigmas wide.
  Calibrator cal(1, 4096, 42);
  std::vector<float> chunk(1000);
  for (int c = 0; c < 200; ++c) {
    for (int i = 0; i < 1000; ++i) chunk[static_cast<size_t>(i)] = static_cast<float>(c * 1000 + i);
    cal.Add(0, Site::kMlpDown, chunk);
  }
  const Calibration c = cal.Finish();
  const SampleSet& s = c.samples(0, CalibStat::kMlpDown);
  EXPECT_EQ(s.seen, 200000);
  ASSERT_EQ(s.sorted.size(), 4096u);
  double mean = 0;
  int64_t low = 0;
  for (float v : s.sorted) {
    mean += v;
    low += v < 20000;
  }
  mean /= 4096;
  EXPECT_NEAR(mean, 100000, 5000);  // sigma ~ 900
  EXPECT_NEAR(low, 410, 80);        // sigma ~ 19
  EXPECT_TRUE(std::is_sorted(s.sorted.begin(), s.sorted.end()));
}

TEST(CalibrationTest, ThresholdIsAnExactQuantileOfTheSamples) {
  Calibration c = Collect(/*max_samples=*/2000, /*tokens=*/60);
  for (int l = 0; l < 2; ++l) {
    for (int k = 0; k < kNumCalibStats; ++k) {
      const auto stat = static_cast<CalibStat>(k);
      const auto& s = c.samples(l, stat).sorted;
      const int64_t n = static_cast<int64_t>(s.size());
      ASSERT_EQ(n, 2000);
      for (double keep : {0.05, 0.3, 0.5, 0.77, 0.99}) {
        auto t = c.Threshold(l, stat, keep);
        ASSERT_TRUE(t.ok()) << t.status().ToString();
        const int64_t m = KeepCount(keep, n);
        EXPECT_EQ(*t, s[static_cast<size_t>(n - m)]);
        int64_t kept = 0;
        for (float v : s) kept += v >= *t;
        EXPECT_EQ(kept, m);  // continuous data: no ties
        EXPECT_LE(std::fabs(static_cast<double>(kept) / n - keep), 1.0 / n);
      }
    }
  }
  EXPECT_FALSE(c.Threshold(2, CalibStat::kMlpIn, 0.5).ok());
}

TEST(CalibrationTest, ThresholdNeedsSamples) {
  Calibrator cal(1, 10);
  cal.Add(0, Site::kMlpIn, RandomActivations(4, 1));
  auto t = cal.Finish().Threshold(0, CalibStat::kGateSilu, 0.5);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("gate_silu"), std::string::npos) << t.status().ToString();
}

TEST(CalibrationTest, SaveLoadRoundTripsExactly) {
  Calibration c = Collect(500, 20);
  // Values that stress the float printing.
  c.layers[1][0].sorted.back() = 3.40282347e38f;
  c.layers[1][0].sorted.front() = 1.17549435e-38f;
  c.note = "llama \"1b\" on wiki.txt";
  const std::string path = testing::TempDir() + "/calib.json";
  ASSERT_TRUE(c.Save(path).ok());
  auto back = Calibration::Load(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->note, c.note);
  EXPECT_EQ(back->max_samples, 500);
  ASSERT_EQ(back->n_layer(), 2);
  for (int l = 0; l < 2; ++l) {
    for (int k = 0; k < kNumCalibStats; ++k) {
      const SampleSet& a = c.layers[l][k];
      const SampleSet& b = back->layers[l][k];
      EXPECT_EQ(a.width, b.width);
      EXPECT_EQ(a.seen, b.seen);
      EXPECT_EQ(a.sorted, b.sorted) << "layer " << l << " stat " << k;
    }
  }
}

TEST(CalibrationTest, LoadRejectsBadFilesWithClearMessages) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto r = Calibration::FromJson(text, "c.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << "message: " << r.status().ToString() << "\nwanted: " << needle;
    EXPECT_EQ(r.status().message().rfind("c.json", 0), 0u) << r.status().ToString();
  };
  const std::string head =
      R"({"format": "weir-calibration", "version": 1, "max_samples": 3, "n_layer": 1, "layers": )";
  expect_error("{", "not valid JSON");
  expect_error("[]", "not a JSON object");
  expect_error(R"({"format": "other"})", "format");
  expect_error(R"({"format": "weir-calibration", "version": 2})", "version 2");
  expect_error(head + "{}}", "layers");
  expect_error(head + "[]}", "n_layer is 1");
  expect_error(head + R"([{"mlp_up": {}}]})", "unknown statistic 'mlp_up'");
  expect_error(head + R"([{"mlp_in": {"width": 4, "seen": 3, "samples": [1, 0.5, 2]}}]})",
               "layers[0].mlp_in.samples[1]: samples are not in ascending order");
  expect_error(head + R"([{"mlp_in": {"width": 4, "seen": 3, "samples": [-1, 0.5, 2]}}]})",
               "layers[0].mlp_in.samples[0]");
  expect_error(head + R"([{"mlp_in": {"width": 4, "seen": 3, "samples": [1, "x", 2]}}]})",
               "not a number");
  expect_error(head + R"([{"mlp_in": {"width": 4, "seen": 9, "samples": [1, 2, 3, 4]}}]})",
               "4 samples but max_samples is 3");
  expect_error(head + R"([{"mlp_in": {"width": 4, "seen": 9, "samples": [1, 2]}}]})",
               "full reservoir");
  expect_error(head + R"([{"mlp_in": {"width": 0, "seen": 0, "samples": []}}]})", "width: 0 < 1");
  expect_error(head + R"([{"mlp_in": {"width": 4.5, "seen": 0, "samples": []}}]})",
               "mlp_in.width: is not an integer: 4.5");
  expect_error(head + R"([{"mlp_in": {"seen": 0, "samples": []}}]})", "missing field 'width'");
  expect_error(head + R"([{"mlp_in": {"width": 1, "seen": 1, "samples": [1e39]}}]})",
               "finite magnitude");
  auto missing = Calibration::Load("/nonexistent/calib.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/calib.json"), std::string::npos);
}

}  // namespace
}  // namespace weir::sparsity

namespace weir::sparsity {
namespace {

// kept_half counts, per entry, the tokens on which it was among the top half of |a|, and
// survives a save / load.
TEST(CalibratorTest, CountsTheTopHalfPerEntry) {
  Calibrator c(1, 16);
  const std::vector<float> t1 = {5, -1, 0.5f, -7, 2};  // top 3 of 5: entries 3, 0, 4
  const std::vector<float> t2 = {0, 0, 9, -8, 1};      // entries 2, 3, 4
  c.Add(0, Site::kMlpIn, t1);
  c.Add(0, Site::kMlpIn, t2);
  const Calibration cal = c.Finish("test");
  EXPECT_EQ(cal.samples(0, CalibStat::kMlpIn).kept_half,
            (std::vector<uint32_t>{1, 0, 1, 2, 2}));
  auto back = Calibration::FromJson(cal.ToJson(), "mem");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->samples(0, CalibStat::kMlpIn).kept_half,
            cal.samples(0, CalibStat::kMlpIn).kept_half);
  std::string bad = cal.ToJson();
  bad.replace(bad.find("\"kept_half\": [1"), 15, "\"kept_half\": [-1");
  EXPECT_FALSE(Calibration::FromJson(bad, "mem").ok());  // a negative count
}

// A mixture of experts' routing counts per layer ("expert_chosen") survive a save / load; a
// layer without them stays empty; malformed counts are refused.
TEST(CalibratorTest, CountsExpertsChosenPerLayer) {
  Calibrator c(2, 16);
  const std::vector<int32_t> a = {3, 1}, b = {1, 0};
  c.AddExperts(1, a, 4);
  c.AddExperts(1, b, 4);
  const Calibration cal = c.Finish("moe");
  ASSERT_EQ(cal.expert_chosen.size(), 2u);
  EXPECT_TRUE(cal.expert_chosen[0].empty());
  EXPECT_EQ(cal.expert_chosen[1], (std::vector<uint32_t>{1, 2, 0, 1}));
  auto back = Calibration::FromJson(cal.ToJson(), "mem");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->expert_chosen, cal.expert_chosen);
  std::string bad = cal.ToJson();
  bad.replace(bad.find("\"expert_chosen\": [1"), 19, "\"expert_chosen\": [-1");
  EXPECT_FALSE(Calibration::FromJson(bad, "mem").ok());  // a negative count
  bad = cal.ToJson();
  bad.replace(bad.find("\"expert_chosen\": [1, 2, 0, 1]"), 29, "\"expert_chosen\": []");
  EXPECT_FALSE(Calibration::FromJson(bad, "mem").ok());  // no experts
}

}  // namespace
}  // namespace weir::sparsity
