#include "sparsity/density.h"

#include <gtest/gtest.h>

#include <cmath>

namespace weir::sparsity {
namespace {

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

TEST(DipAllocateTest, MatchesTheFittedRule) {
  // keep = 0.5: logit = 0, up = sigmoid(0.3), down = 3 * (0.5 - 2/3 * up).
  DipAllocation a = DipAllocate(0.5);
  EXPECT_NEAR(a.up_keep, 0.574442516811659, 1e-12);
  EXPECT_NEAR(a.down_keep, 0.351114966376682, 1e-12);
  for (double keep = 0.05; keep < 0.999; keep += 0.05) {
    const double up = Sigmoid(0.985 * std::log(keep / (1 - keep)) + 0.3);
    const double down = 3 * (keep - 2.0 / 3.0 * up);
    a = DipAllocate(keep);
    EXPECT_NEAR(a.up_keep, up, 1e-12) << keep;
    EXPECT_NEAR(a.down_keep, down, 1e-12) << keep;
    // Up/gate get more than the target, down less, and together they give the target density.
    EXPECT_GT(a.up_keep, keep);
    EXPECT_LT(a.down_keep, keep);
    EXPECT_NEAR(DipMlpDensity(a), keep, 1e-12) << keep;
  }
}

TEST(DipAllocateTest, ClampsAtTheEnds) {
  DipAllocation a = DipAllocate(1.0);
  EXPECT_EQ(a.up_keep, 1.0);
  EXPECT_EQ(a.down_keep, 1.0);
  // At very low targets the fitted up density exceeds 1.5 * keep, so down would go negative.
  a = DipAllocate(1e-5);
  EXPECT_EQ(a.down_keep, 0.0);
  EXPECT_GT(DipMlpDensity(a), 1e-5);  // the clamp shows up as a higher achieved density
}

TEST(MlpDensityTest, CountsEachProjectionAsAThird) {
  LayerDims dims{64, 64, 16, 192};
  IndexList in(192), units(192), down(192);
  // Dense: everything.
  in.SetAll(64);
  units.SetAll(192);
  down.SetAll(192);
  EXPECT_DOUBLE_EQ(MlpDensity(CountMlp(dims, UnitPredictor::kNone, in, units, down)), 1.0);
  // DIP-like: half of the input columns, a quarter of the down columns.
  int32_t* w = in.BeginWrite(64);
  for (int i = 0; i < 32; ++i) w[i] = 2 * i;
  in.EndWrite(32);
  w = down.BeginWrite(192);
  for (int i = 0; i < 48; ++i) w[i] = 4 * i;
  down.EndWrite(48);
  MlpCounts c = CountMlp(dims, UnitPredictor::kNone, in, units, down);
  EXPECT_EQ(c.n_in, 32);
  EXPECT_EQ(c.n_gate_rows, 192);
  EXPECT_DOUBLE_EQ(MlpDensity(c), (0.5 + 0.5 + 0.25) / 3);
  // Gate pruning: gate dense, up rows and down columns = 48 units.
  in.SetAll(64);
  units.CopyFrom(down);
  c = CountMlp(dims, UnitPredictor::kGate, in, units, down);
  EXPECT_EQ(c.n_gate_rows, 192);
  EXPECT_EQ(c.n_up_rows, 48);
  EXPECT_DOUBLE_EQ(MlpDensity(c), (1 + 0.25 + 0.25) / 3);
  c = CountMlp(dims, UnitPredictor::kUp, in, units, down);
  EXPECT_EQ(c.n_gate_rows, 48);
  EXPECT_EQ(c.n_up_rows, 192);
}

TEST(DensityMeterTest, WeightsLayersBySize) {
  DensityMeter m;
  EXPECT_DOUBLE_EQ(m.total_density(), 1.0);  // nothing counted yet
  MlpCounts small{10, 30, 10, 30, 30, 0};    // 2/3 of 900 elements
  MlpCounts big{10, 60, 5, 60, 60, 60};      // (600 + 600) / 1800
  m.AddMlp(small);
  m.AddMlp(big);
  EXPECT_DOUBLE_EQ(m.mlp_density(), (600.0 + 1200.0) / (900.0 + 1800.0));
  LayerDims dims{8, 8, 4, 16};
  m.AddAttention(dims, 4, 8);  // q,k,v: 16 rows x 4 of 8 cols; o: 8 x 8 of 8
  EXPECT_DOUBLE_EQ(m.attention_density(), (16.0 * 4 + 64) / (16.0 * 8 + 64));
  EXPECT_DOUBLE_EQ(m.total_density(), (1800.0 + 128) / (2700.0 + 192));
  m.Reset();
  EXPECT_DOUBLE_EQ(m.mlp_elements_total(), 0.0);
}

}  // namespace
}  // namespace weir::sparsity
