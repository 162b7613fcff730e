#include <gtest/gtest.h>

#include "sparsity/density.h"
#include "sparsity/policy.h"
#include "test_util.h"

namespace weir::sparsity {
namespace {

TEST(ParseSparsityTest, BuildsEveryMethod) {
  Calibrator cal(1, 100);
  cal.Add(0, Site::kAttnIn, testutil::RandomActivations(8, 1));
  cal.Add(0, Site::kAttnOut, testutil::RandomActivations(8, 2));
  cal.Add(0, Site::kMlpIn, testutil::RandomActivations(8, 3));
  cal.Add(0, Site::kMlpDown, testutil::RandomActivations(16, 4));
  cal.AddGate(0, testutil::RandomActivations(16, 5));
  Calibration calib = cal.Finish();

  auto info = [&](const std::string& spec) {
    auto p = ParseSparsity(spec, &calib);
    EXPECT_TRUE(p.ok()) << spec << ": " << p.status().ToString();
    return p.ok() ? (*p)->info() : PolicyInfo{};
  };
  auto predictor = [&](const std::string& spec) {
    return (*ParseSparsity(spec, &calib))->unit_predictor();
  };

  PolicyInfo i = info("dense");
  EXPECT_EQ(i.spec, "dense");
  EXPECT_EQ(i.target_mlp_density, 1.0);

  i = info("glu:0.5");
  EXPECT_EQ(i.down_keep, 0.5);
  EXPECT_NEAR(i.target_mlp_density, 2.5 / 3, 1e-12);  // up and gate stay dense
  EXPECT_EQ(predictor("glu:0.5"), UnitPredictor::kNone);

  i = info("gate:0.4");
  EXPECT_NEAR(i.units_keep, 0.1, 1e-12);  // (1 + 2 * 0.1) / 3 = 0.4
  EXPECT_NEAR(i.target_mlp_density, 0.4, 1e-12);
  EXPECT_EQ(predictor("gate:0.4"), UnitPredictor::kGate);
  EXPECT_EQ(predictor("up:0.4"), UnitPredictor::kUp);
  EXPECT_EQ(predictor("cats:0.5"), UnitPredictor::kGate);
  EXPECT_NEAR(info("cats:0.5").units_keep, 0.25, 1e-12);

  i = info("teal:0.5");
  EXPECT_EQ(i.attn_keep, 0.5);
  EXPECT_EQ(i.down_keep, 0.5);
  i = info("topk-all:0.3");
  EXPECT_EQ(i.attn_keep, 0.3);
  EXPECT_EQ(i.mlp_in_keep, 0.3);

  i = info("dip:0.5");
  const DipAllocation a = DipAllocate(0.5);
  EXPECT_EQ(i.mlp_in_keep, a.up_keep);
  EXPECT_EQ(i.down_keep, a.down_keep);
  EXPECT_NEAR(i.target_mlp_density, 0.5, 1e-12);
  EXPECT_FALSE(i.cache_aware);
  EXPECT_EQ(i.spec, "dip:0.5,up=0.574443,down=0.351115");

  // Explicit allocations override the fitted rule; a missing one is derived from the target.
  i = info("dip:0.5,up=0.7,down=0.4");
  EXPECT_EQ(i.mlp_in_keep, 0.7);
  EXPECT_EQ(i.down_keep, 0.4);
  EXPECT_NEAR(i.target_mlp_density, 0.6, 1e-12);  // what this allocation reads
  i = info("dip:0.5,up=0.6");
  EXPECT_NEAR(i.down_keep, 0.3, 1e-12);
  i = info("dip:0.5,down=0.2");
  EXPECT_NEAR(i.mlp_in_keep, 0.65, 1e-12);

  i = info("dip-ca:0.5");
  EXPECT_TRUE(i.cache_aware);
  EXPECT_FLOAT_EQ(i.gamma, 0.2f);
  EXPECT_EQ(i.spec, "dip-ca:0.5,up=0.574443,down=0.351115,gamma=0.2");
  EXPECT_FLOAT_EQ(info("dip-ca:0.5,gamma=0.35").gamma, 0.35f);
  EXPECT_FLOAT_EQ(info("dip-ca:0.5,gamma=0").gamma, 0.0f);
  EXPECT_FALSE(info("dip-ca:0.5").ToString().empty());
}

TEST(ParseSparsityTest, ErrorsSayWhatIsWrong) {
  Calibrator cal(1, 10);
  cal.Add(0, Site::kMlpIn, testutil::RandomActivations(8, 3));  // no gate_silu, no attn samples
  Calibration partial = cal.Finish();
  auto expect_error = [](const std::string& spec, const Calibration* calib,
                         const std::string& needle) {
    auto p = ParseSparsity(spec, calib);
    ASSERT_FALSE(p.ok()) << spec;
    EXPECT_EQ(p.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(p.status().message().find(needle), std::string::npos)
        << "spec: " << spec << "\nmessage: " << p.status().ToString() << "\nwanted: " << needle;
  };
  expect_error("", nullptr, "expected NAME:DENSITY");
  expect_error("foo:0.5", nullptr, "unknown method 'foo'; known methods: dense, glu, gate");
  expect_error("DIP:0.5", nullptr, "unknown method 'DIP'");
  expect_error("glu", nullptr, "'glu' needs a density: glu:DENSITY with DENSITY in (0, 1]");
  expect_error("glu:", nullptr, "density '' is not a number");
  expect_error("glu:abc", nullptr, "density 'abc' is not a number");
  expect_error("glu:0.5x", nullptr, "density '0.5x' is not a number");
  expect_error("glu:nan", nullptr, "is not a number");
  expect_error("glu:inf", nullptr, "is not a number");
  expect_error("glu:0", nullptr, "density 0 is outside (0, 1]");
  expect_error("glu:-0.2", nullptr, "density -0.2 is outside (0, 1]");
  expect_error("topk-all:1.5", nullptr, "density 1.5 is outside (0, 1]");
  expect_error("dense:0.5", nullptr, "dense keeps everything");
  expect_error("dip:0.5,foo=1", nullptr, "unknown option 'foo' for dip; dip takes: up, down");
  expect_error("dip:0.5,gamma=0.1", nullptr, "unknown option 'gamma' for dip");
  expect_error("glu:0.5,up=0.3", nullptr, "unknown option 'up' for glu; glu takes no options");
  expect_error("dip:0.5,up", nullptr, "option 'up' is not key=value");
  expect_error("dip:0.5,", nullptr, "option '' is not key=value");
  expect_error("dip:0.5,up=0.3,up=0.4", nullptr, "option 'up' given twice");
  expect_error("dip:0.5,up=1.2", nullptr, "up=1.2 is outside (0, 1]");
  expect_error("dip:0.5,down=0", nullptr, "down=0 is outside (0, 1]");
  expect_error("dip:0.5,up=x", nullptr, "up='x' is not a number");
  expect_error("dip-ca:0.5,gamma=2", nullptr, "gamma=2 is outside [0, 1]");
  expect_error("gate:0.3", nullptr, "gate computes the whole gate projection, 1/3 of the MLP");
  expect_error("up:0.2", nullptr, "up computes the whole up projection");
  expect_error("cats:0.5", nullptr, "cats needs calibration data: pass --calib CALIB");
  expect_error("teal:0.5", nullptr, "teal needs calibration data");
  expect_error("cats:0.5", &partial, "no 'gate_silu' samples for layer 0");
  expect_error("teal:0.5", &partial, "no 'attn_in' samples for layer 0");
  // Every message starts by quoting the spec.
  auto p = ParseSparsity("glu:2", nullptr);
  EXPECT_EQ(p.status().message().rfind("--sparsity 'glu:2': ", 0), 0u) << p.status().ToString();
}

}  // namespace
}  // namespace weir::sparsity
