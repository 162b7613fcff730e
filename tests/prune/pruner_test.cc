// End to end on a generated tiny Llama (and the real models when present): calibration norms
// against a direct computation, P = 0 gives identical logits for every method and mode, the
// unstructured pruned fraction per row and overall, structured / composite models with
// per-layer dims written, loaded and run, weir.prune.* metadata, quantized inputs, errors.
#include "prune/pruner.h"

#include <gtest/gtest.h>

#include <cmath>

#include "format/gguf_reader.h"
#include "format/llama_gguf_writer.h"
#include "format/mapped_file.h"
#include "model/perplexity.h"
#include "prune/calibration.h"
#include "prune/prune_metadata.h"
#include "prune/unstructured.h"
#include "prune_test_util.h"
#include "tensor/quantize.h"

namespace weir::prune {
namespace {

struct Fixture {
  std::unique_ptr<model::Model> model;
  std::vector<LayerProjections> layers;
  ActivationNorms norms;
  OutlierStats stats;
};

Fixture MakeFixture(DType type) {
  Fixture f;
  f.model = testutil::LoadOrDie(testutil::WriteTinyModel(type));
  if (!f.model) return f;
  auto layers = BindProjections(f.model->file());
  EXPECT_TRUE(layers.ok());
  f.layers = *layers;
  auto seqs = CalibrationSequences(testutil::SomeTokens(400, 320, 21), 1, 4, 64);
  EXPECT_TRUE(seqs.ok());
  auto norms = Calibrate(*f.model, *seqs, nullptr);
  EXPECT_TRUE(norms.ok()) << norms.status().ToString();
  f.norms = *norms;
  auto stats = ComputeOutlierStats(f.model->file(), f.norms, 5.0, nullptr);
  EXPECT_TRUE(stats.ok());
  f.stats = *stats;
  return f;
}

TEST(CalibrationTest, SequencesFromText) {
  std::vector<int32_t> t(1000);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i % 300 + 3);
  auto s = CalibrationSequences(t, 1, 128, 256);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 3u);  // what the text allows
  for (const auto& seq : *s) {
    EXPECT_EQ(seq.size(), 256u);
    EXPECT_EQ(seq[0], 1);
  }
  EXPECT_EQ((*s)[1][1], t[257]);
  auto shorter = CalibrationSequences(std::vector<int32_t>(t.begin(), t.begin() + 100), 1, 8, 256);
  ASSERT_TRUE(shorter.ok());
  ASSERT_EQ(shorter->size(), 1u);
  EXPECT_EQ((*shorter)[0].size(), 100u);
  EXPECT_FALSE(CalibrationSequences(std::vector<int32_t>{5}, 1, 8, 256).ok());
  EXPECT_FALSE(CalibrationSequences(t, 1, 0, 256).ok());
  EXPECT_FALSE(CalibrationSequences(t, 1, 8, 1).ok());
}

TEST(CalibrationTest, FirstLayerNormsMatchADirectComputation) {
  auto model = testutil::LoadOrDie(testutil::WriteTinyModel());
  ASSERT_TRUE(model);
  auto seqs = CalibrationSequences(testutil::SomeTokens(300, 320, 4), 1, 3, 100);
  ASSERT_TRUE(seqs.ok());
  ThreadPool pool(2);
  int calls = 0;
  auto norms = Calibrate(*model, *seqs, &pool, 32, [&](int done, int total) {
    ++calls;
    EXPECT_EQ(total, 3);
    EXPECT_EQ(done, calls);
  });
  ASSERT_TRUE(norms.ok()) << norms.status().ToString();
  EXPECT_EQ(calls, 3);
  for (int l = 0; l < 2; ++l) {
    for (int s = 0; s < sparsity::kNumSites; ++s)
      EXPECT_EQ(norms->tokens(l, static_cast<sparsity::Site>(s)), 300);
  }
  // Layer 0's attention input is RMSNorm(embedding) * attn_norm: computable without the model.
  const auto& c = model->config();
  const TensorView& emb = *model->file().Find("token_embd.weight");
  const float* g = model->file().Find("blk.0.attn_norm.weight")->f32();
  std::vector<double> want(static_cast<size_t>(c.d_model), 0.0);
  std::vector<float> x(static_cast<size_t>(c.d_model));
  for (const auto& seq : *seqs) {
    for (int32_t tok : seq) {
      DequantizeRow(emb, tok, x.data());
      double ss = 0;
      for (float v : x) ss += static_cast<double>(v) * v;
      const double inv = 1.0 / std::sqrt(ss / c.d_model + c.rms_eps);
      for (int j = 0; j < c.d_model; ++j) {
        const double y = x[static_cast<size_t>(j)] * inv * g[j];
        want[static_cast<size_t>(j)] += y * y;
      }
    }
  }
  const std::vector<float> got = norms->Norms(0, sparsity::Site::kAttnIn);
  for (int j = 0; j < c.d_model; ++j)
    EXPECT_NEAR(got[static_cast<size_t>(j)], std::sqrt(want[static_cast<size_t>(j)]),
                1e-4 * std::sqrt(want[static_cast<size_t>(j)]));
  // Every site saw non-zero activations.
  for (int s = 0; s < sparsity::kNumSites; ++s) {
    const std::vector<float> n = norms->Norms(1, static_cast<sparsity::Site>(s));
    double sum = 0;
    for (float v : n) sum += v;
    EXPECT_GT(sum, 0) << s;
  }
}

TEST(CalibrationTest, OnTextNeedsATokenizerAndText) {
  auto model = testutil::LoadOrDie(testutil::WriteTinyModel());
  ASSERT_TRUE(model);
  CalibrationOptions o;
  o.nsamples = 2;
  o.seqlen = 64;
  auto run = CalibrateOnText(*model, testutil::CalibrationText(400), o, nullptr);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->sequences, 2);
  EXPECT_EQ(run->seqlen, 64);
  EXPECT_EQ(run->tokens, 128);
  EXPECT_FALSE(CalibrateOnText(*model, "", o, nullptr).ok());
}

TEST(PruneTest, ZeroTargetGivesIdenticalLogits) {
  Fixture f = MakeFixture(DType::kF32);
  ASSERT_TRUE(f.model);
  const std::vector<int32_t> tokens = testutil::SomeTokens(32, 320);
  const std::vector<float> want = testutil::Logits(*f.model, tokens);
  const std::string dir = testing::TempDir();
  for (TargetMethod m : {TargetMethod::kGlobal, TargetMethod::kLayer, TargetMethod::kProjection}) {
    auto t = ComputeTargets(m, 0.0, f.layers, &f.stats, TargetOptions{});
    ASSERT_TRUE(t.ok());
    for (PruneMode mode :
         {PruneMode::kUnstructured, PruneMode::kStructured, PruneMode::kComposite}) {
      PruneOptions o;
      o.mode = mode;
      auto p = Prune(f.model->file(), f.norms, *t, o, nullptr);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(p->report.params_after, p->report.params_before);
      const std::string path = dir + "/p0.gguf";
      ASSERT_TRUE(format::WriteLlamaGguf(p->file, path, std::nullopt, nullptr,
                                         PruneMetadata(*t, o, p->report, {}))
                      .ok());
      auto loaded = testutil::LoadOrDie(path);
      ASSERT_TRUE(loaded);
      EXPECT_EQ(testutil::Logits(*loaded, tokens), want)
          << TargetMethodName(m) << "/" << PruneModeName(mode);
    }
  }
}

TEST(PruneTest, UnstructuredPrunesTheTargetPerRowAndOverall) {
  Fixture f = MakeFixture(DType::kF32);
  ASSERT_TRUE(f.model);
  ThreadPool pool(2);
  for (TargetMethod m : {TargetMethod::kGlobal, TargetMethod::kLayer, TargetMethod::kProjection}) {
    for (double p : {0.2, 0.5, 0.8}) {
      auto t = ComputeTargets(m, p, f.layers, &f.stats, TargetOptions{});
      ASSERT_TRUE(t.ok());
      auto r = Prune(f.model->file(), f.norms, *t, PruneOptions{}, &pool);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_NEAR(r->report.sparsity(), p, 0.005) << TargetMethodName(m) << " P=" << p;
      EXPECT_EQ(r->report.params_after, r->report.params_before);
      for (int l = 0; l < 2; ++l) {
        for (Projection pr : kAllProjections) {
          const TensorView& w = *r->file.Find(ProjectionTensorName(format::LlamaArch(), l, pr));
          const int64_t k = PrunedPerRow(t->at(l, pr), w.cols());
          for (int64_t row = 0; row < w.rows(); ++row) {
            int64_t zeros = 0;
            for (int64_t j = 0; j < w.cols(); ++j) zeros += w.f32()[row * w.cols() + j] == 0.0f;
            ASSERT_EQ(zeros, k) << ProjectionTensorName(format::LlamaArch(), l, pr) << " row "
                                << row;
          }
        }
      }
    }
  }
}

TEST(PruneTest, StructuredModelWithPerLayerDimsIsWrittenLoadedAndRun) {
  Fixture f = MakeFixture(DType::kF32);
  ASSERT_TRUE(f.model);
  auto t = ComputeTargets(TargetMethod::kGlobal, 0.0, f.layers, nullptr, TargetOptions{});
  ASSERT_TRUE(t.ok());
  // Layer 0 loses half its attention, layer 1 a quarter of its MLP.
  for (Projection p : kAllProjections) {
    t->sparsity[0][static_cast<size_t>(p)] = IsAttention(p) ? 0.5 : 0.0;
    t->sparsity[1][static_cast<size_t>(p)] = IsAttention(p) ? 0.0 : 0.25;
  }
  PruneOptions o;
  o.mode = PruneMode::kStructured;
  auto r = Prune(f.model->file(), f.norms, *t, o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& d = r->report.dims_after;
  EXPECT_EQ(d[0].n_head, 2);
  EXPECT_EQ(d[0].n_head_kv, 1);
  EXPECT_EQ(d[0].d_ff, 192);
  EXPECT_EQ(d[1].n_head, 4);
  EXPECT_EQ(d[1].d_ff, 144);
  const std::string path = testing::TempDir() + "/structured.gguf";
  PruneProvenance prov;
  prov.calibration_file = "calib.txt";
  prov.calibration_sequences = 4;
  prov.calibration_seqlen = 64;
  ASSERT_TRUE(format::WriteLlamaGguf(r->file, path, std::nullopt, nullptr,
                                     PruneMetadata(*t, o, r->report, prov))
                  .ok());
  auto loaded = testutil::LoadOrDie(path);
  ASSERT_TRUE(loaded);
  ASSERT_EQ(loaded->config().layers.size(), 2u);
  EXPECT_EQ(loaded->config().layers[0].n_head, 2);
  EXPECT_EQ(loaded->config().layers[0].n_head_kv, 1);
  EXPECT_EQ(loaded->config().layers[1].d_ff, 144);
  const std::vector<float> logits = testutil::Logits(*loaded, testutil::SomeTokens(16, 320));
  ASSERT_FALSE(logits.empty());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  // The in-memory pruned model and the file give the same logits.
  auto mem = testutil::FromFileOrDie(r->file);
  ASSERT_TRUE(mem);
  EXPECT_EQ(testutil::Logits(*mem, testutil::SomeTokens(16, 320)), logits);
  // weir.prune.* metadata.
  auto g = format::GgufFile::Open(path);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g->GetString("weir.prune.mode"), "structured");
  EXPECT_EQ(*g->GetString("weir.prune.method"), "global");
  EXPECT_EQ(*g->GetString("weir.prune.calibration.file"), "calib.txt");
  EXPECT_EQ(*g->GetU32("weir.prune.calibration.sequences"), 4u);
  EXPECT_EQ(g->GetStringArray("weir.prune.projections")->size(), 7u);
  auto targets = g->GetF32Array("weir.prune.targets");
  ASSERT_TRUE(targets.ok());
  ASSERT_EQ(targets->size(), 14u);
  EXPECT_FLOAT_EQ((*targets)[0], 0.5f);
  EXPECT_FLOAT_EQ((*targets)[7 + 6], 0.25f);
  auto achieved = g->GetF32Array("weir.prune.sparsity");
  ASSERT_TRUE(achieved.ok());
  EXPECT_NEAR((*achieved)[0], 0.5, 1e-6);  // q of layer 0: 2 of 4 heads
  EXPECT_NEAR((*achieved)[1], 0.5, 1e-6);  // k of layer 0: 1 of 2 groups
}

TEST(PruneTest, CompositeSitsBetweenItsParts) {
  Fixture f = MakeFixture(DType::kF32);
  ASSERT_TRUE(f.model);
  auto t = ComputeTargets(TargetMethod::kProjection, 0.5, f.layers, &f.stats, TargetOptions{});
  ASSERT_TRUE(t.ok());
  PruneOptions o;
  o.mode = PruneMode::kComposite;
  o.structured_share = 0.5;
  auto c = Prune(f.model->file(), f.norms, *t, o, nullptr);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  o.mode = PruneMode::kStructured;
  auto s = Prune(f.model->file(), f.norms, *t, o, nullptr);
  ASSERT_TRUE(s.ok());
  // Stored parameters: unstructured (all) > composite > structured.
  EXPECT_LT(c->report.params_after, c->report.params_before);
  EXPECT_GT(c->report.params_after, s->report.params_after);
  // Non-zero weights: 1 - P, except where the units' granularity removed more than the target.
  EXPECT_NEAR(c->report.sparsity(), 0.5, 0.03);
  for (int l = 0; l < 2; ++l) {
    for (Projection p : {Projection::kO, Projection::kDown}) {
      const ProjectionResult& r =
          c->report.projections[static_cast<size_t>(l)][static_cast<size_t>(p)];
      const double kept =
          static_cast<double>(r.params_after) / static_cast<double>(r.params_before);
      EXPECT_NEAR(r.sparsity(), std::max(t->at(l, p), 1 - kept), 0.01)
          << ProjectionName(p) << " layer " << l;
    }
  }
  // Share 0 is unstructured pruning; share 1 is structured pruning.
  o.mode = PruneMode::kComposite;
  o.structured_share = 0.0;
  auto c0 = Prune(f.model->file(), f.norms, *t, o, nullptr);
  auto u = Prune(f.model->file(), f.norms, *t, PruneOptions{}, nullptr);
  ASSERT_TRUE(c0.ok() && u.ok());
  EXPECT_EQ(c0->report.nonzero_after, u->report.nonzero_after);
  EXPECT_EQ(c0->report.params_after, u->report.params_after);
  o.structured_share = 1.0;
  auto c1 = Prune(f.model->file(), f.norms, *t, o, nullptr);
  ASSERT_TRUE(c1.ok());
  EXPECT_EQ(c1->report.params_after, s->report.params_after);
  // The composite model runs.
  auto m = testutil::FromFileOrDie(c->file);
  ASSERT_TRUE(m);
  for (float v : testutil::Logits(*m, testutil::SomeTokens(8, 320))) ASSERT_TRUE(std::isfinite(v));
}

TEST(PruneTest, QuantizedModelsKeepTheirTypeAndBlockAlignedWidths) {
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    Fixture f = MakeFixture(type);
    ASSERT_TRUE(f.model);
    auto t = ComputeTargets(TargetMethod::kProjection, 0.6, f.layers, &f.stats, TargetOptions{});
    ASSERT_TRUE(t.ok());
    for (PruneMode mode :
         {PruneMode::kUnstructured, PruneMode::kStructured, PruneMode::kComposite}) {
      PruneOptions o;
      o.mode = mode;
      auto r = Prune(f.model->file(), f.norms, *t, o, nullptr);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      for (const auto& d : r->report.dims_after) {
        EXPECT_EQ(d.d_ff % 32, 0);
        EXPECT_EQ((d.n_head * 16) % 32, 0);
      }
      for (int l = 0; l < 2; ++l) {
        for (Projection p : kAllProjections)
          EXPECT_EQ(r->file.Find(ProjectionTensorName(format::LlamaArch(), l, p))->dtype, type);
      }
      if (mode != PruneMode::kUnstructured) {
        EXPECT_LT(r->report.params_after, r->report.params_before);
      }
      const std::string path = testing::TempDir() + "/q.gguf";
      ASSERT_TRUE(format::WriteLlamaGguf(r->file, path, std::nullopt).ok());
      auto loaded = testutil::LoadOrDie(path);
      ASSERT_TRUE(loaded);
      for (float v : testutil::Logits(*loaded, testutil::SomeTokens(8, 320)))
        ASSERT_TRUE(std::isfinite(v));
    }
  }
}

TEST(PruneTest, BadInputsAreErrors) {
  Fixture f = MakeFixture(DType::kF32);
  ASSERT_TRUE(f.model);
  auto t = ComputeTargets(TargetMethod::kGlobal, 0.3, f.layers, nullptr, TargetOptions{});
  ASSERT_TRUE(t.ok());
  PruneOptions o;
  o.mode = PruneMode::kComposite;
  o.structured_share = 1.5;
  EXPECT_FALSE(Prune(f.model->file(), f.norms, *t, o, nullptr).ok());
  PruneTargets bad = *t;
  bad.sparsity[1][2] = 1.0;
  auto r = Prune(f.model->file(), f.norms, bad, PruneOptions{}, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside [0, 1)"), std::string::npos)
      << r.status().ToString();
  PruneTargets short_targets = *t;
  short_targets.sparsity.pop_back();
  short_targets.params.pop_back();
  EXPECT_FALSE(Prune(f.model->file(), f.norms, short_targets, PruneOptions{}, nullptr).ok());
  format::LlamaConfig other = f.model->config();
  other.layers[1].d_ff = 100;
  EXPECT_FALSE(
      Prune(f.model->file(), ActivationNorms::ForConfig(other), *t, PruneOptions{}, nullptr).ok());
  format::ModelFile missing = f.model->file();
  missing.tensors.erase("blk.0.attn_v.weight");
  auto m = Prune(missing, f.norms, *t, PruneOptions{}, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.0.attn_v.weight"), std::string::npos);
  EXPECT_FALSE(ParsePruneMode("semi").ok());
  EXPECT_EQ(*ParsePruneMode("composite"), PruneMode::kComposite);
}

// The real models, when present: calibrate on TinyStories, prune 40% with Mosaic's projection
// targets in every mode; the result is written, loads and gives a finite perplexity. (Quality
// is measured by `weir prune-eval`, docs/pruning.md, not asserted here.)
TEST(PruneRealModelTest, RealModelsPruneAndRun) {
  const std::string text_path = testing::SharedPath("data/tinystories/tinystories_val_head.txt");
  const std::vector<std::string> models = {
      testing::SharedPath("models/stories260K/stories260K.bin"),
      testing::SharedPath("models/tinystories-656k/tinystories-656k-Q8_0.gguf")};
  if (!testing::FileExists(text_path)) GTEST_SKIP() << "no " << text_path;
  auto text = format::ReadSmallFile(text_path, 1 << 24);
  ASSERT_TRUE(text.ok());
  const std::string calib = text->substr(0, 40000), eval = text->substr(40000, 20000);
  int ran = 0;
  for (const std::string& path : models) {
    if (!testing::FileExists(path)) continue;
    auto model = testutil::LoadOrDie(path);
    ASSERT_TRUE(model);
    ThreadPool pool(2);
    CalibrationOptions co;
    co.nsamples = 4;
    co.seqlen = 128;
    auto cal = CalibrateOnText(*model, calib, co, &pool);
    ASSERT_TRUE(cal.ok()) << cal.status().ToString();
    auto layers = BindProjections(model->file());
    ASSERT_TRUE(layers.ok());
    auto stats = ComputeOutlierStats(model->file(), cal->norms, 5.0, &pool);
    ASSERT_TRUE(stats.ok());
    auto t = ComputeTargets(TargetMethod::kProjection, 0.4, *layers, &*stats, TargetOptions{});
    ASSERT_TRUE(t.ok());
    EXPECT_NEAR(t->Mean(TargetAverage::kParams), 0.4, 0.005);
    const std::vector<int32_t> ids = model->tokenizer()->Encode(eval, true);
    for (PruneMode mode :
         {PruneMode::kUnstructured, PruneMode::kStructured, PruneMode::kComposite}) {
      PruneOptions o;
      o.mode = mode;
      auto r = Prune(model->file(), cal->norms, *t, o, &pool);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      const std::string out = testing::TempDir() + "/real.gguf";
      ASSERT_TRUE(format::WriteLlamaGguf(r->file, out, std::nullopt).ok());
      auto pruned = testutil::LoadOrDie(out);
      ASSERT_TRUE(pruned);
      model::SessionOptions so;
      so.ctx = 128;
      auto s = model::Session::Create(*pruned, &pool, so);
      ASSERT_TRUE(s.ok());
      model::PerplexityOptions po;
      po.max_chunks = 4;
      auto ppl = model::Perplexity(**s, ids, pruned->tokenizer()->bos_id(), po);
      ASSERT_TRUE(ppl.ok()) << ppl.status().ToString();
      EXPECT_TRUE(std::isfinite(ppl->ppl)) << path << " " << PruneModeName(mode);
    }
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no real models";
}

}  // namespace
}  // namespace weir::prune
