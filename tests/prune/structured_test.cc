// Structured pruning: unit counts (parameter-nearest, GQA-consistent, block-aligned), unit
// selection by importance, and the invariant that removing units whose weights are all zero does
// not change the logits (a query head per group, a whole key-value group, an MLP neuron).
#include "prune/structured.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "prune/pruner.h"
#include "prune/tensor_edit.h"
#include "prune_test_util.h"

namespace weir::prune {
namespace {

TEST(HeadCountsTest, NearestConfiguration) {
  // tiny: 4 heads, 2 groups, head_dim 16, d_model 64. Units of 2048 parameters: full = 6 units.
  EXPECT_EQ(AttentionParams({2, 2}, 16, 64), 12288);
  HeadCounts c = ChooseHeadCounts(4, 2, 16, 64, 0.0, 1);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.heads_per_group, 2);
  c = ChooseHeadCounts(4, 2, 16, 64, 1.0 / 3, 1);  // 4 units: two groups of one head
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.heads_per_group, 1);
  c = ChooseHeadCounts(4, 2, 16, 64, 0.5, 1);  // 3 units: one group of two heads
  EXPECT_EQ(c.n_head_kv, 1);
  EXPECT_EQ(c.heads_per_group, 2);
  c = ChooseHeadCounts(4, 2, 16, 64, 0.99, 1);  // at least one group with one head
  EXPECT_EQ(c.n_head(), 1);
  c = ChooseHeadCounts(4, 2, 16, 64, 0.1, 1);  // 5.4 units: nearest is 6 (keep all)
  EXPECT_EQ(c.n_head(), 4);
  // Q8_0 o rows: n_head * 16 must be a multiple of 32, so one head alone is not allowed.
  c = ChooseHeadCounts(4, 2, 16, 64, 0.99, 32);
  EXPECT_EQ(c.n_head(), 2);
  // Multi-head attention (one head per group): only whole heads go.
  c = ChooseHeadCounts(8, 8, 8, 64, 0.5, 1);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.heads_per_group, 1);
}

TEST(NeuronCountTest, NearestAndBlockAligned) {
  EXPECT_EQ(ChooseNeuronCount(192, 0.0, 1), 192);
  EXPECT_EQ(ChooseNeuronCount(192, 0.25, 1), 144);
  EXPECT_EQ(ChooseNeuronCount(172, 0.5, 1), 86);
  EXPECT_EQ(ChooseNeuronCount(192, 0.25, 32),
            160);  // 144 -> nearest multiple of 32 (ties keep more)
  EXPECT_EQ(ChooseNeuronCount(192, 0.99, 32), 32);
  EXPECT_EQ(ChooseNeuronCount(192, 0.99, 1), 2);
}

TEST(SelectTest, HeadsAndNeuronsByImportance) {
  HeadImportance imp;
  imp.head = {5, 1, 2, 9};  // group 0: heads 0,1; group 1: heads 2,3
  imp.group = {1, 3};
  HeadSelection s = SelectHeads(imp, 4, 2, {2, 1});
  EXPECT_EQ(s.groups, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.heads, (std::vector<int>{0, 3}));
  s = SelectHeads(imp, 4, 2, {1, 2});  // group 0: 1+5+1 = 7, group 1: 3+2+9 = 14
  EXPECT_EQ(s.groups, (std::vector<int>{1}));
  EXPECT_EQ(s.heads, (std::vector<int>{2, 3}));
  const std::vector<double> n = {0.5, 3, 1, 1, 2};
  EXPECT_EQ(SelectNeurons(n, 3), (std::vector<int>{1, 2, 4}));  // tie between 2 and 3 keeps 2
  EXPECT_EQ(UnitIndices(std::vector<int>{1, 3}, 2), (std::vector<int64_t>{2, 3, 6, 7}));
}

// The tiny model with some units' weights set to zero.
class ZeroUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = testutil::LoadOrDie(testutil::WriteTinyModel());
    ASSERT_TRUE(base_);
    file_ = base_->file();
    owned_ = std::make_shared<OwnedTensors>();
    file_.backing.push_back(owned_);
  }
  // A writable copy of one tensor, installed in file_.
  OwnedTensor* Writable(const std::string& name) {
    auto t = CopyTensor(*file_.Find(name));
    EXPECT_TRUE(t.ok());
    owned_->tensors.push_back(std::make_unique<OwnedTensor>(std::move(t).value()));
    file_.tensors[name] = owned_->tensors.back()->view;
    return owned_->tensors.back().get();
  }
  void ZeroRows(const std::string& name, int64_t begin, int64_t end) {
    OwnedTensor* t = Writable(name);
    for (int64_t r = begin; r < end; ++r) std::memset(t->mutable_row(r), 0, t->view.row_bytes());
  }
  void ZeroCols(const std::string& name, int64_t begin, int64_t end) {
    OwnedTensor* t = Writable(name);
    for (int64_t r = 0; r < t->view.rows(); ++r) {
      for (int64_t j = begin; j < end; ++j) reinterpret_cast<float*>(t->mutable_row(r))[j] = 0.0f;
    }
  }
  // Prunes file_ structurally with the given block fractions for every layer; returns the result.
  PrunedModel PruneBlocks(double attn, double mlp) {
    auto layers = BindProjections(file_);
    EXPECT_TRUE(layers.ok());
    auto t = ComputeTargets(TargetMethod::kGlobal, 0.0, *layers, nullptr, TargetOptions{});
    EXPECT_TRUE(t.ok());
    for (auto& row : t->sparsity) {
      for (Projection p : kAllProjections)
        row[static_cast<size_t>(p)] = IsAttention(p) ? attn : mlp;
    }
    PruneOptions o;
    o.mode = PruneMode::kStructured;
    auto r = Prune(file_, testutil::RandomNorms(file_.config), *t, o, nullptr);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  }
  void ExpectSameLogits(const format::ModelFile& pruned) {
    auto before = testutil::FromFileOrDie(file_);
    auto after = testutil::FromFileOrDie(pruned);
    ASSERT_TRUE(before && after);
    const std::vector<int32_t> tokens = testutil::SomeTokens(24, 320);
    const std::vector<float> a = testutil::Logits(*before, tokens),
                             b = testutil::Logits(*after, tokens);
    ASSERT_EQ(a.size(), b.size());
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[i])));
    }
    EXPECT_LE(max_diff, 1e-5 * std::max(1.0, max_abs));
  }

  std::unique_ptr<model::Model> base_;
  format::ModelFile file_;
  std::shared_ptr<OwnedTensors> owned_;
};

TEST_F(ZeroUnitTest, RemovingZeroQueryHeadsKeepsLogits) {
  // Head 1 (group 0) and head 2 (group 1) of every layer: q rows and o columns zero.
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    OwnedTensor* q = Writable(b + "attn_q.weight");
    for (int64_t r = 16; r < 48; ++r) std::memset(q->mutable_row(r), 0, q->view.row_bytes());
    ZeroCols(b + "attn_output.weight", 16, 48);
  }
  PrunedModel p = PruneBlocks(1.0 / 3, 0.0);
  for (const auto& d : p.report.dims_after) {
    EXPECT_EQ(d.n_head, 2);
    EXPECT_EQ(d.n_head_kv, 2);
    EXPECT_EQ(d.d_ff, 192);
  }
  EXPECT_EQ(p.file.Find("blk.0.attn_q.weight")->shape, (Shape{32, 64}));
  EXPECT_EQ(p.file.Find("blk.0.attn_output.weight")->shape, (Shape{64, 32}));
  ExpectSameLogits(p.file);
}

TEST_F(ZeroUnitTest, RemovingAZeroKeyValueGroupKeepsLogits) {
  // Group 1 of every layer: k and v rows, its query heads 2 and 3 and their o columns.
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ZeroRows(b + "attn_k.weight", 16, 32);
    ZeroRows(b + "attn_v.weight", 16, 32);
    ZeroRows(b + "attn_q.weight", 32, 64);
    ZeroCols(b + "attn_output.weight", 32, 64);
  }
  PrunedModel p = PruneBlocks(0.5, 0.0);
  for (const auto& d : p.report.dims_after) {
    EXPECT_EQ(d.n_head, 2);
    EXPECT_EQ(d.n_head_kv, 1);
  }
  ExpectSameLogits(p.file);
}

TEST_F(ZeroUnitTest, RemovingZeroNeuronsKeepsLogits) {
  // Neurons 7 and 100 of every layer: gate and up rows, down columns.
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const char* t : {"ffn_gate.weight", "ffn_up.weight"}) {
      OwnedTensor* w = Writable(b + t);
      std::memset(w->mutable_row(7), 0, w->view.row_bytes());
      std::memset(w->mutable_row(100), 0, w->view.row_bytes());
    }
    OwnedTensor* down = Writable(b + "ffn_down.weight");
    for (int64_t r = 0; r < 64; ++r) {
      reinterpret_cast<float*>(down->mutable_row(r))[7] = 0.0f;
      reinterpret_cast<float*>(down->mutable_row(r))[100] = 0.0f;
    }
  }
  PrunedModel p = PruneBlocks(0.0, 2.0 / 192);
  for (const auto& d : p.report.dims_after) EXPECT_EQ(d.d_ff, 190);
  ExpectSameLogits(p.file);
}

TEST_F(ZeroUnitTest, RemovingNonZeroUnitsChangesLogits) {
  // The same removal without zeroed units must change the output, or the tests above prove nothing.
  PrunedModel p = PruneBlocks(1.0 / 3, 2.0 / 192);
  auto before = testutil::FromFileOrDie(file_);
  auto after = testutil::FromFileOrDie(p.file);
  ASSERT_TRUE(before && after);
  const std::vector<int32_t> tokens = testutil::SomeTokens(24, 320);
  const std::vector<float> a = testutil::Logits(*before, tokens),
                           b = testutil::Logits(*after, tokens);
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
  EXPECT_GT(max_diff, 1e-3);
}

}  // namespace
}  // namespace weir::prune
