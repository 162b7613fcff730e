// Pruning every dense architecture of format/arch_spec.h on a generated tiny model of each
// (llama, qwen2 with q/k/v biases, qwen3 with QK-norm and head_dim != d_model / n_head, gemma2
// with post-norms, GeGLU, attention soft-cap and sliding layers, gemma3 with QK-norm, post-norms,
// GeGLU and sliding layers, phi3 with fused attn_qkv and ffn_up):
//   - P = 0 in every mode gives bit-identical logits after writing and reloading;
//   - every mode at P = 0.4 writes a file that loads, gives the in-memory pruned model's logits,
//     finite and different from the unpruned ones;
//   - removing heads, key-value groups or neurons whose contribution is zero keeps the logits
//     (so the biases, the fused parts and the norms around them are sliced consistently);
//   - the calibration norms of down's input are the architecture's gated activation;
//   - mixture-of-experts rows are refused by name, before calibration.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>

#include "format/gguf_reader.h"
#include "format/llama_gguf_writer.h"
#include "kernels/ops.h"
#include "model/glu_of.h"
#include "prune/calibration.h"
#include "prune/pruner.h"
#include "prune/tensor_edit.h"
#include "prune_test_util.h"

namespace weir::prune {
namespace {

const char* const kDenseArchs[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"};

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

struct ArchFixture {
  std::string arch, path;
  std::unique_ptr<model::Model> model;
  std::vector<LayerProjections> layers;
  ActivationNorms norms;
  OutlierStats stats;
};

ArchFixture MakeArchFixture(const std::string& arch) {
  ArchFixture f;
  f.arch = arch;
  f.path = testutil::WriteTinyArchModel(arch);
  f.model = testutil::LoadOrDie(f.path);
  if (!f.model) return f;
  EXPECT_EQ(std::string(f.model->config().arch->name), arch);
  auto layers = BindProjections(f.model->file());
  EXPECT_TRUE(layers.ok()) << layers.status().ToString();
  if (!layers.ok()) return f;
  f.layers = *layers;
  auto seqs = CalibrationSequences(testutil::SomeTokens(256, 320, 21), 1, 4, 64);
  EXPECT_TRUE(seqs.ok());
  auto norms = Calibrate(*f.model, *seqs, nullptr);
  EXPECT_TRUE(norms.ok()) << norms.status().ToString();
  if (!norms.ok()) return f;
  f.norms = *norms;
  auto stats = ComputeOutlierStats(f.model->file(), f.norms, 5.0, nullptr);
  EXPECT_TRUE(stats.ok());
  if (stats.ok()) f.stats = *stats;
  return f;
}

constexpr PruneMode kModes[] = {PruneMode::kUnstructured, PruneMode::kStructured,
                                PruneMode::kComposite};

TEST(ArchPruneTest, DenseArchitecturesArePrunable) {
  const std::string list = PrunableArchList();
  for (const char* a : kDenseArchs) EXPECT_NE(list.find(a), std::string::npos) << list;
  EXPECT_EQ(list.find("mixtral"), std::string::npos) << list;
  EXPECT_EQ(list.find("qwen3moe"), std::string::npos) << list;
}

TEST(ArchPruneTest, ZeroTargetGivesIdenticalLogits) {
  for (const char* arch : kDenseArchs) {
    ArchFixture f = MakeArchFixture(arch);
    ASSERT_TRUE(f.model) << arch;
    const std::vector<int32_t> tokens = testutil::SomeTokens(24, 320);
    const std::vector<float> want = testutil::Logits(*f.model, tokens);
    for (TargetMethod m : {TargetMethod::kGlobal, TargetMethod::kProjection}) {
      auto t = ComputeTargets(m, 0.0, f.layers, &f.stats, TargetOptions{});
      ASSERT_TRUE(t.ok());
      for (PruneMode mode : kModes) {
        PruneOptions o;
        o.mode = mode;
        ASSERT_TRUE(CheckPrunable(f.model->file(), o, 0.0).ok()) << arch;
        auto p = Prune(f.model->file(), f.norms, *t, o, nullptr);
        ASSERT_TRUE(p.ok()) << arch << ": " << p.status().ToString();
        EXPECT_EQ(p->report.params_after, p->report.params_before);
        const std::string path = testing::TempDir() + "/p0-" + arch + ".gguf";
        Status st = format::WriteLlamaGguf(p->file, path, std::nullopt);
        ASSERT_TRUE(st.ok()) << arch << ": " << st.ToString();
        auto loaded = testutil::LoadOrDie(path);
        ASSERT_TRUE(loaded) << arch;
        EXPECT_EQ(testutil::Logits(*loaded, tokens), want)
            << arch << " " << TargetMethodName(m) << "/" << PruneModeName(mode);
      }
    }
  }
}

TEST(ArchPruneTest, EveryModeWritesAModelThatLoadsAndRuns) {
  for (const char* arch : kDenseArchs) {
    ArchFixture f = MakeArchFixture(arch);
    ASSERT_TRUE(f.model) << arch;
    const std::vector<int32_t> tokens = testutil::SomeTokens(24, 320);
    const std::vector<float> dense = testutil::Logits(*f.model, tokens);
    auto t = ComputeTargets(TargetMethod::kProjection, 0.4, f.layers, &f.stats, TargetOptions{});
    ASSERT_TRUE(t.ok());
    for (PruneMode mode : kModes) {
      const std::string what = std::string(arch) + "/" + std::string(PruneModeName(mode));
      PruneOptions o;
      o.mode = mode;
      ASSERT_TRUE(CheckPrunable(f.model->file(), o, 0.4).ok()) << what;
      auto p = Prune(f.model->file(), f.norms, *t, o, nullptr);
      ASSERT_TRUE(p.ok()) << what << ": " << p.status().ToString();
      const PruneReport& rep = p->report;
      EXPECT_NEAR(rep.sparsity(), 0.4, mode == PruneMode::kUnstructured ? 0.01 : 0.1) << what;
      if (mode == PruneMode::kUnstructured) {
        EXPECT_EQ(rep.params_after, rep.params_before) << what;
      } else {
        EXPECT_LT(rep.params_after, rep.params_before) << what;
        bool fewer_heads = false, fewer_neurons = false;
        for (size_t l = 0; l < rep.dims_after.size(); ++l) {
          fewer_heads = fewer_heads || rep.dims_after[l].n_head < rep.dims_before[l].n_head;
          fewer_neurons = fewer_neurons || rep.dims_after[l].d_ff < rep.dims_before[l].d_ff;
        }
        EXPECT_TRUE(fewer_heads) << what;
        EXPECT_TRUE(fewer_neurons) << what;
      }
      const std::string path = testing::TempDir() + "/p40-" + what.substr(0, what.find('/')) + "-" +
                               std::string(PruneModeName(mode)) + ".gguf";
      Status st = format::WriteLlamaGguf(p->file, path, std::nullopt);
      ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
      auto loaded = testutil::LoadOrDie(path);
      ASSERT_TRUE(loaded) << what;
      EXPECT_EQ(std::string(loaded->config().arch->name), arch);
      const std::vector<float> got = testutil::Logits(*loaded, tokens);
      ASSERT_EQ(got.size(), dense.size()) << what;
      for (float v : got) ASSERT_TRUE(std::isfinite(v)) << what;
      EXPECT_GT(MaxAbsDiff(got, dense), 1e-4) << what;
      // The file holds what was pruned in memory (biases, fused parts and per-layer dims
      // included).
      auto mem = testutil::FromFileOrDie(p->file);
      ASSERT_TRUE(mem) << what;
      EXPECT_EQ(testutil::Logits(*mem, tokens), got) << what;
    }
  }
}

// Phi-3's q/k/v and gate/up are written back fused, with the pruned widths.
TEST(ArchPruneTest, Phi3IsWrittenFused) {
  ArchFixture f = MakeArchFixture("phi3");
  ASSERT_TRUE(f.model);
  auto t = ComputeTargets(TargetMethod::kGlobal, 0.5, f.layers, nullptr, TargetOptions{});
  ASSERT_TRUE(t.ok());
  PruneOptions o;
  o.mode = PruneMode::kStructured;
  auto p = Prune(f.model->file(), f.norms, *t, o, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::string path = testing::TempDir() + "/phi3-fused.gguf";
  ASSERT_TRUE(format::WriteLlamaGguf(p->file, path, std::nullopt).ok());
  auto g = format::GgufFile::Open(path);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const int hd = f.model->config().head_dim;
  for (size_t l = 0; l < p->report.dims_after.size(); ++l) {
    const format::LayerDims& d = p->report.dims_after[l];
    const std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(g->FindTensor(b + "attn_q.weight"), nullptr);
    EXPECT_EQ(g->FindTensor(b + "ffn_gate.weight"), nullptr);
    const format::GgufTensorInfo* qkv = g->FindTensor(b + "attn_qkv.weight");
    const format::GgufTensorInfo* up = g->FindTensor(b + "ffn_up.weight");
    ASSERT_TRUE(qkv != nullptr && up != nullptr);
    EXPECT_EQ(qkv->shape, (Shape{int64_t{d.n_head + 2 * d.n_head_kv} * hd, 64})) << l;
    EXPECT_EQ(up->shape, (Shape{2 * int64_t{d.d_ff}, 64})) << l;
    EXPECT_LT(d.d_ff, 192);
  }
}

// Removing units whose output is zero must not change the logits: the o columns (and q rows)
// of one query head per group, a whole key-value group, MLP neurons (gate and up rows, down
// column). A bias entry, fused part or gate/up row taken from the wrong unit would show.
class ArchZeroUnitTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    base_ = testutil::LoadOrDie(testutil::WriteTinyArchModel(GetParam()));
    ASSERT_TRUE(base_);
    file_ = base_->file();
    owned_ = std::make_shared<OwnedTensors>();
    file_.backing.push_back(owned_);
    c_ = file_.config;
  }
  OwnedTensor* Writable(const std::string& name) {
    const TensorView* v = file_.Find(name);
    EXPECT_TRUE(v != nullptr) << name;
    auto t = CopyTensor(*v);
    EXPECT_TRUE(t.ok());
    owned_->tensors.push_back(std::make_unique<OwnedTensor>(std::move(t).value()));
    file_.tensors[name] = owned_->tensors.back()->view;
    return owned_->tensors.back().get();
  }
  std::string Name(int l, Projection p) { return ProjectionTensorName(*c_.arch, l, p); }
  void ZeroRows(int l, Projection p, int64_t begin, int64_t end) {
    OwnedTensor* t = Writable(Name(l, p));
    for (int64_t r = begin; r < end; ++r) std::memset(t->mutable_row(r), 0, t->view.row_bytes());
  }
  void ZeroCols(int l, Projection p, int64_t begin, int64_t end) {
    OwnedTensor* t = Writable(Name(l, p));
    for (int64_t r = 0; r < t->view.rows(); ++r) {
      for (int64_t j = begin; j < end; ++j) reinterpret_cast<float*>(t->mutable_row(r))[j] = 0.0f;
    }
  }
  // Query head h's q rows and o columns.
  void ZeroHead(int l, int h) {
    const int hd = c_.head_dim;
    ZeroRows(l, Projection::kQ, int64_t{h} * hd, int64_t{h + 1} * hd);
    ZeroCols(l, Projection::kO, int64_t{h} * hd, int64_t{h + 1} * hd);
  }
  PrunedModel PruneBlocks(double attn, double mlp) {
    auto layers = BindProjections(file_);
    EXPECT_TRUE(layers.ok()) << layers.status().ToString();
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
  // Logits of file_ and of `pruned` after writing and reloading it.
  double WrittenDiff(const PrunedModel& pruned) {
    auto before = testutil::FromFileOrDie(file_);
    const std::string path = testing::TempDir() + "/zero-unit-" + GetParam() + ".gguf";
    Status st = format::WriteLlamaGguf(pruned.file, path, std::nullopt);
    EXPECT_TRUE(st.ok()) << st.ToString();
    auto after = testutil::LoadOrDie(path);
    if (!before || !after) return 1e30;
    const std::vector<int32_t> tokens = testutil::SomeTokens(24, 320);
    const std::vector<float> a = testutil::Logits(*before, tokens);
    return MaxAbsDiff(a, testutil::Logits(*after, tokens));
  }

  std::unique_ptr<model::Model> base_;
  format::ModelFile file_;
  format::LlamaConfig c_;
  std::shared_ptr<OwnedTensors> owned_;
};

TEST_P(ArchZeroUnitTest, RemovingZeroQueryHeadsKeepsLogits) {
  const int nh = c_.n_head, nkv = c_.n_head_kv, G = nh / nkv;
  ASSERT_GE(G, 2) << "needs two query heads per group";
  for (int l = 0; l < c_.n_layers; ++l) {
    for (int g = 0; g < nkv; ++g) ZeroHead(l, g * G);  // the first head of every group
  }
  // Units: nkv groups + nh heads; nkv heads go.
  PrunedModel p = PruneBlocks(static_cast<double>(nkv) / (nkv + nh), 0.0);
  for (const auto& d : p.report.dims_after) {
    EXPECT_EQ(d.n_head, nh - nkv);
    EXPECT_EQ(d.n_head_kv, nkv);
  }
  EXPECT_LE(WrittenDiff(p), 1e-5);
}

TEST_P(ArchZeroUnitTest, RemovingAZeroKeyValueGroupKeepsLogits) {
  const int nh = c_.n_head, nkv = c_.n_head_kv, G = nh / nkv, hd = c_.head_dim;
  if (nkv < 2) GTEST_SKIP() << GetParam() << " has one key-value group";
  for (int l = 0; l < c_.n_layers; ++l) {  // group 0: k, v rows and its query heads
    ZeroRows(l, Projection::kK, 0, hd);
    ZeroRows(l, Projection::kV, 0, hd);
    for (int h = 0; h < G; ++h) ZeroHead(l, h);
  }
  PrunedModel p = PruneBlocks(1.0 / nkv, 0.0);
  for (const auto& d : p.report.dims_after) {
    EXPECT_EQ(d.n_head, nh - G);
    EXPECT_EQ(d.n_head_kv, nkv - 1);
  }
  EXPECT_LE(WrittenDiff(p), 1e-5);
}

TEST_P(ArchZeroUnitTest, RemovingZeroNeuronsKeepsLogits) {
  for (int l = 0; l < c_.n_layers; ++l) {  // neurons 0 and 100: gate and up rows, down columns
    for (int64_t j : {0, 100}) {
      ZeroRows(l, Projection::kGate, j, j + 1);
      ZeroRows(l, Projection::kUp, j, j + 1);
      ZeroCols(l, Projection::kDown, j, j + 1);
    }
  }
  PrunedModel p = PruneBlocks(0.0, 2.0 / c_.d_ff);
  for (const auto& d : p.report.dims_after) EXPECT_EQ(d.d_ff, c_.d_ff - 2);
  EXPECT_LE(WrittenDiff(p), 1e-5);
}

TEST_P(ArchZeroUnitTest, RemovingNonZeroUnitsChangesLogits) {
  // Without zeroed units the same removal changes the output, or the tests above prove nothing.
  PrunedModel p =
      PruneBlocks(static_cast<double>(c_.n_head_kv) / (c_.n_head_kv + c_.n_head), 2.0 / c_.d_ff);
  EXPECT_GT(WrittenDiff(p), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Dense, ArchZeroUnitTest, ::testing::ValuesIn(kDenseArchs),
                         [](const auto& info) { return std::string(info.param); });

// Records layer 0's MLP input (the normalized residual) for every token.
class MlpInputRecorder : public model::ActivationObserver {
 public:
  void OnInput(int layer, sparsity::Site site, const float* x, int64_t dim) override {
    if (layer == 0 && site == sparsity::Site::kMlpIn) inputs.emplace_back(x, x + dim);
  }
  std::vector<std::vector<float>> inputs;
};

// down's metric reads ||act(gate x) * up x||: SwiGLU for llama, GeGLU for Gemma. The norms
// calibration accumulates at kMlpDown are compared with ones computed here from the MLP inputs
// and the architecture's activation; the other activation must not match.
TEST(ArchPruneTest, DownNormsUseTheArchitecturesActivation) {
  for (const char* arch : {"llama", "gemma3", "gemma2"}) {
    auto model = testutil::LoadOrDie(testutil::WriteTinyArchModel(arch));
    ASSERT_TRUE(model);
    const std::vector<int32_t> seq = testutil::SomeTokens(32, 320, 9);
    MlpInputRecorder rec;
    model::SessionOptions so;
    so.ctx = 32;
    so.n_batch = 32;
    auto s = model::Session::Create(*model, nullptr, so);
    ASSERT_TRUE(s.ok());
    (*s)->set_observer(&rec);
    ASSERT_TRUE((*s)->Forward(seq, model::LogitsFor::kLast).ok());
    ASSERT_EQ(rec.inputs.size(), seq.size());
    auto norms = Calibrate(*model, std::vector<std::vector<int32_t>>{seq}, nullptr);
    ASSERT_TRUE(norms.ok());
    const std::vector<float> got = norms->Norms(0, sparsity::Site::kMlpDown);

    auto layers = BindProjections(model->file());
    ASSERT_TRUE(layers.ok());
    const LayerProjections& L = (*layers)[0];
    const kernels::Glu own = model::GluOf(model->config().arch);
    const kernels::Glu other =
        own == kernels::Glu::kSilu ? kernels::Glu::kGeluTanh : kernels::Glu::kSilu;
    auto expected = [&](kernels::Glu glu) {
      std::vector<double> ss(static_cast<size_t>(L.d_ff), 0.0);
      std::vector<float> g(static_cast<size_t>(L.d_ff)), u(g.size());
      for (const auto& x : rec.inputs) {
        for (int64_t r = 0; r < L.d_ff; ++r) {
          double gs = 0, us = 0;
          for (int64_t j = 0; j < L.d_model; ++j) {
            gs += static_cast<double>(L[Projection::kGate].f32()[r * L.d_model + j]) * x[j];
            us += static_cast<double>(L[Projection::kUp].f32()[r * L.d_model + j]) * x[j];
          }
          g[static_cast<size_t>(r)] = static_cast<float>(gs);
          u[static_cast<size_t>(r)] = static_cast<float>(us);
        }
        kernels::GatedActivation(glu, g.data(), u.data(), L.d_ff);
        for (size_t r = 0; r < g.size(); ++r) ss[r] += static_cast<double>(g[r]) * g[r];
      }
      double worst = 0;
      for (size_t r = 0; r < ss.size(); ++r) {
        const double want = std::sqrt(ss[r]);
        worst = std::max(worst, std::fabs(got[r] - want) / std::max(want, 1e-6));
      }
      return worst;
    };
    EXPECT_LT(expected(own), 1e-3) << arch;
    EXPECT_GT(expected(other), 1e-2) << arch;
  }
}

// Mixture-of-experts rows are refused by name by the checks `weir prune` runs before it
// calibrates, and by Prune itself.
TEST(ArchPruneTest, MixtureOfExpertsIsRefusedByName) {
  for (const char* arch : {"mixtral", "qwen3moe"}) {
    auto model = testutil::LoadOrDie(testutil::WriteTinyArchModel(arch));
    ASSERT_TRUE(model);
    for (PruneMode mode : kModes) {
      PruneOptions o;
      o.mode = mode;
      Status st = CheckPrunable(model->file(), o, 0.3);
      ASSERT_FALSE(st.ok()) << arch;
      EXPECT_EQ(st.code(), Status::Code::kUnsupported);
      EXPECT_NE(st.message().find(std::string("mixture-of-experts architecture ") + arch),
                std::string::npos)
          << st.ToString();
    }
    auto layers = BindProjections(model->file());
    ASSERT_FALSE(layers.ok());
    EXPECT_NE(layers.status().message().find(arch), std::string::npos);
    auto p = Prune(model->file(), ActivationNorms::ForConfig(model->config()), PruneTargets{},
                   PruneOptions{}, nullptr);
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find(arch), std::string::npos) << p.status().ToString();
  }
}

// Gemma 3 27B (62 layers): llama.cpp infers the query scale from layer 0's head count, so
// removing heads is refused up front; unstructured pruning is fine.
TEST(ArchPruneTest, HeadRemovalIsRefusedWhereTheHeadCountSetsTheScale) {
  auto model = testutil::LoadOrDie(testutil::WriteTinyArchModel(
      "gemma3", [](format::SynthSpec& s) { s.n_layers = 62; }, "-62"));
  ASSERT_TRUE(model);
  PruneOptions o;
  EXPECT_TRUE(CheckPrunable(model->file(), o, 0.3).ok());
  o.mode = PruneMode::kStructured;
  Status st = CheckPrunable(model->file(), o, 0.3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("query scale"), std::string::npos) << st.ToString();
  EXPECT_TRUE(CheckPrunable(model->file(), o, 0.0).ok());
  o.mode = PruneMode::kComposite;
  EXPECT_FALSE(CheckPrunable(model->file(), o, 0.3).ok());
  o.structured_share = 0;
  EXPECT_TRUE(CheckPrunable(model->file(), o, 0.3).ok());
  o.structured_share = 2;
  EXPECT_FALSE(CheckPrunable(model->file(), o, 0.0).ok());
  EXPECT_FALSE(CheckPrunable(model->file(), PruneOptions{}, 1.0).ok());
}

}  // namespace
}  // namespace weir::prune
