// RecallGate (model/recall_gate.h): predicted experts are read ahead only after the predictions
// have been right often enough, and stop being read when they turn wrong.
#include "model/recall_gate.h"

#include <gtest/gtest.h>

namespace weir::model {
namespace {

TEST(RecallGateTest, StartsClosedAndOpensOnlyAfterRightPredictions) {
  RecallGate gate;  // threshold 0.75, decay 0.9, prior 0.5
  EXPECT_FALSE(gate.open());
  EXPECT_DOUBLE_EQ(gate.recall(), 0.5);
  // Recall 0.5 forever (one of two chosen experts predicted) never opens it.
  for (int i = 0; i < 100; ++i) gate.Observe(1, 2);
  EXPECT_FALSE(gate.open());
  EXPECT_NEAR(gate.recall(), 0.5, 1e-12);
  // Every prediction right: 0.5 -> 1 - 0.5 * 0.9^n, at or above 0.75 from n = 7 on.
  int steps = 0;
  while (!gate.open()) {
    gate.Observe(2, 2);
    ++steps;
    ASSERT_LT(steps, 100);
  }
  EXPECT_EQ(steps, 7);
}

TEST(RecallGateTest, ClosesWhenThePredictionsTurnWrongAndIgnoresEmptySteps) {
  RecallGate gate(0.75, 0.9, 1.0);
  EXPECT_TRUE(gate.open());
  gate.Observe(0, 0);  // nothing chosen: no evidence
  EXPECT_DOUBLE_EQ(gate.recall(), 1.0);
  // Every prediction wrong: 0.9^n, below 0.75 from n = 3 on.
  gate.Observe(0, 8);
  gate.Observe(0, 8);
  EXPECT_TRUE(gate.open());  // 0.81
  gate.Observe(0, 8);
  EXPECT_FALSE(gate.open());  // 0.729
  // More used than chosen cannot happen; it counts as all chosen predicted, never above 1.
  RecallGate full(0.75, 0.5, 1.0);
  full.Observe(9, 8);
  EXPECT_DOUBLE_EQ(full.recall(), 1.0);
}

}  // namespace
}  // namespace weir::model
