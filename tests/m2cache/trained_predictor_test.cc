// The trained predictor (m2cache/trained_predictor.h) on a small generated MLP: training lowers
// the held-out loss and raises the recall above the low-rank predictor it starts from; a seed
// gives the same bytes; its score is a plain U(Ax) + b; the predictor file round-trips and a
// hostile or truncated file gives a Status, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "random_mlp.h"
#include "m2cache/mix_config.h"
#include "m2cache/mixed_mlp.h"
#include "m2cache/predictor_file.h"
#include "m2cache/trained_predictor.h"
#include "tensor/quantize.h"
#include "testing/testing.h"

namespace weir::m2cache {
namespace {

constexpr int64_t kD = 64, kF = 128;

// Inputs shaped like a normalized MLP input: Gaussian, with a few channels far larger than the
// rest and a shared low-dimensional component (tokens are not isotropic).
std::vector<float> Inputs(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> common(static_cast<size_t>(4 * kD));
  for (float& v : common) v = g(rng);
  std::vector<float> x(static_cast<size_t>(n * kD));
  for (int64_t s = 0; s < n; ++s) {
    float c[4];
    for (float& v : c) v = g(rng);
    for (int64_t j = 0; j < kD; ++j) {
      float v = 0.5f * g(rng) + common[static_cast<size_t>(j)];
      for (int k = 0; k < 4; ++k) v += 0.3f * c[k] * common[static_cast<size_t>(k * kD + j)];
      if (j % 16 == 3) v *= 4.0f;
      x[static_cast<size_t>(s * kD + j)] = v;
    }
  }
  return x;
}

struct Fixture {
  m2test::Mlp mlp = m2test::RandomMlp(kD, kF, 7, 0.2f);
  std::vector<float> x = Inputs(1536, 8);
  std::unique_ptr<M2Weights> init;  // the rank-8 low-rank predictor fitted to x's second moment
  std::vector<double> moment;
  Fixture() {
    // Neurons of unequal importance: scale each up row.
    std::mt19937 rng(9);
    std::lognormal_distribution<float> ln(0.0f, 1.0f);
    for (int64_t i = 0; i < kF; ++i) {
      const float s = ln(rng);
      for (int64_t j = 0; j < kD; ++j) mlp.up[static_cast<size_t>(i * kD + j)] *= s;
    }
    const int64_t n = static_cast<int64_t>(x.size()) / kD;
    moment.assign(static_cast<size_t>(kD * kD), 0.0);
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t a = 0; a < kD; ++a) {
        for (int64_t b = 0; b < kD; ++b) {
          moment[static_cast<size_t>(a * kD + b)] +=
              static_cast<double>(x[static_cast<size_t>(s * kD + a)]) * x[static_cast<size_t>(s * kD + b)] / n;
        }
      }
    }
    MlpWeights w = mlp.view();
    w.input_second_moment = moment;
    const MlpWeights layers[1] = {w};
    auto built = M2Weights::Build(layers, {DType::kF32, DType::kF32}, 8, false, nullptr);
    EXPECT_TRUE(built.ok()) << built.status().ToString();
    init = std::move(*built);
  }
  Result<TrainedLayer> Train(const TrainOptions& o, TrainReport* report, std::vector<EpochReport>* epochs = nullptr) {
    const MlpWeights w = mlp.view();
    return TrainPredictor(w.gate, w.up, kernels::Glu::kSilu, init->predictors[0], init->up_scale[0], x,
                          static_cast<int64_t>(x.size()) / kD, o,
                          [&](const EpochReport& e) {
                            if (epochs) epochs->push_back(e);
                          },
                          report);
  }
};

TrainOptions Options(PredictorForm form = PredictorForm::kGated) {
  TrainOptions o;
  o.form = form;
  o.top_fraction = 0.5;
  o.epochs = 10;
  o.batch = 16;
  o.learning_rate = form == PredictorForm::kGated ? 2e-3 : 1e-2;
  o.seed = 5;
  return o;
}

class TrainedFormTest : public ::testing::TestWithParam<PredictorForm> {};

TEST_P(TrainedFormTest, TrainingLowersTheLossAndRaisesRecallOverTheLowRankStart) {
  Fixture s;
  TrainReport r;
  std::vector<EpochReport> epochs;
  auto t = s.Train(Options(GetParam()), &r, &epochs);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(epochs.size(), 11u);  // the start and ten epochs
  std::string trace;
  for (const EpochReport& e : epochs) {
    trace += "epoch " + std::to_string(e.epoch) + ": held-out loss " + std::to_string(e.heldout_loss) + ", recall " +
             std::to_string(e.heldout_recall) + "\n";
  }
  SCOPED_TRACE(trace);
  EXPECT_EQ(epochs[0].epoch, 0);
  EXPECT_DOUBLE_EQ(epochs[0].heldout_loss, r.start_loss);
  EXPECT_EQ(r.heldout_samples, 192);
  EXPECT_EQ(r.train_samples, 1536 - 192);
  EXPECT_GT(r.kept_epoch, 0);
  EXPECT_LT(r.final_loss, 0.9 * r.start_loss) << "start " << r.start_loss << ", final " << r.final_loss;
  EXPECT_GT(r.final_recall, r.start_recall + 0.01);
  EXPECT_GT(r.final_recall, r.lowrank_recall + 0.01) << "lowrank " << r.lowrank_recall << ", trained "
                                                      << r.final_recall;
  EXPECT_EQ(t->bias.size(), static_cast<size_t>(kF));
  EXPECT_EQ(t->factors.rank(), 8);
  if (GetParam() == PredictorForm::kGated) {
    EXPECT_NEAR(r.start_recall, r.lowrank_recall, 0.005);  // the gated form starts as the low-rank score
  }
  // Zero epochs keep the start.
  TrainOptions none = Options(GetParam());
  none.epochs = 0;
  TrainReport r0;
  ASSERT_TRUE(s.Train(none, &r0).ok());
  EXPECT_EQ(r0.kept_epoch, 0);
  EXPECT_NEAR(r0.final_recall, r0.start_recall, 0.02);
}

INSTANTIATE_TEST_SUITE_P(Forms, TrainedFormTest, ::testing::Values(PredictorForm::kLogit, PredictorForm::kGated));

TEST(TrainedPredictorTest, TheSameSeedGivesTheSameBytesAndAnotherSeedOthers) {
  Fixture s;
  TrainOptions o = Options();
  o.epochs = 2;
  TrainReport r;
  auto a = s.Train(o, &r), b = s.Train(o, &r);
  o.seed = 6;
  auto c = s.Train(o, &r);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  PredictorFile fa, fb, fc;
  fa.layers.push_back(std::move(*a));
  fb.layers.push_back(std::move(*b));
  fc.layers.push_back(std::move(*c));
  EXPECT_EQ(SerializePredictorFile(fa), SerializePredictorFile(fb));
  EXPECT_NE(SerializePredictorFile(fa), SerializePredictorFile(fc));
}

TEST(TrainedPredictorTest, RefusesBadShapesAndOptions) {
  Fixture s;
  TrainReport r;
  TrainOptions o = Options();
  o.top_fraction = 1.0;
  EXPECT_FALSE(s.Train(o, &r).ok());
  const MlpWeights w = s.mlp.view();
  auto t = TrainPredictor(w.gate, w.up, kernels::Glu::kSilu, s.init->predictors[0], s.init->up_scale[0],
                          std::span<const float>(s.x).subspan(1), 10, Options(), nullptr, &r);
  EXPECT_FALSE(t.ok());
  auto one = TrainPredictor(w.gate, w.up, kernels::Glu::kSilu, s.init->predictors[0], s.init->up_scale[0],
                            std::span<const float>(s.x.data(), kD), 1, Options(), nullptr, &r);
  EXPECT_FALSE(one.ok());
}

// The score against a plain double-precision U(Ax) + b, or s·|silu(U(Ax))|, from the dequantized
// F16 factors.
TEST_P(TrainedFormTest, ScoreMatchesAPlainReference) {
  Fixture s;
  TrainOptions o = Options(GetParam());
  o.epochs = 1;
  TrainReport r;
  auto t = s.Train(o, &r);
  ASSERT_TRUE(t.ok());
  const int64_t rank = t->factors.rank();
  std::vector<float> a(static_cast<size_t>(rank * kD)), u(static_cast<size_t>(kF * rank));
  for (int64_t i = 0; i < rank; ++i) DequantizeRow(t->factors.a(), i, &a[static_cast<size_t>(i * kD)]);
  for (int64_t j = 0; j < kF; ++j) DequantizeRow(t->factors.u(), j, &u[static_cast<size_t>(j * rank)]);
  std::vector<float> tmp(static_cast<size_t>(rank)), score(static_cast<size_t>(kF));
  for (int sample = 0; sample < 20; ++sample) {
    const float* x = &s.x[static_cast<size_t>(sample * 37 * kD)];
    TrainedScore(GetParam(), kernels::Glu::kSilu, t->factors, t->bias, x, tmp.data(), score.data(), nullptr);
    std::vector<double> ax(static_cast<size_t>(rank), 0.0);
    for (int64_t i = 0; i < rank; ++i) {
      for (int64_t j = 0; j < kD; ++j) ax[static_cast<size_t>(i)] += static_cast<double>(a[static_cast<size_t>(i * kD + j)]) * x[j];
    }
    for (int64_t j = 0; j < kF; ++j) {
      double g = 0;
      for (int64_t i = 0; i < rank; ++i) g += static_cast<double>(u[static_cast<size_t>(j * rank + i)]) * ax[static_cast<size_t>(i)];
      const double v = t->bias[static_cast<size_t>(j)];
      const double want = GetParam() == PredictorForm::kGated ? v * std::fabs(g / (1 + std::exp(-g))) : v + g;
      EXPECT_NEAR(score[static_cast<size_t>(j)], want, 1e-4 * (1 + std::fabs(want))) << "sample " << sample << " neuron " << j;
    }
  }
}

// The mixed MLP with predictor=trained picks the top of TrainedScore and counts its bytes.
TEST(TrainedPredictorTest, MixedMlpUsesTheTrainedScore) {
  Fixture s;
  TrainReport r;
  auto t = s.Train(Options(PredictorForm::kLogit), &r);
  ASSERT_TRUE(t.ok());
  const MlpWeights layers[1] = {s.mlp.view()};
  auto w = M2Weights::Build(layers, {DType::kF32, DType::kF32}, 0, false, nullptr);
  ASSERT_TRUE(w.ok());
  MixConfig cfg;
  cfg.r_high = 0.0;
  cfg.r_low = 0.25;
  cfg.measure_recall = true;
  cfg.predictor = PredictorKind::kTrained;
  EXPECT_FALSE(MixedMlp::Create(w->get(), cfg, kernels::Glu::kSilu, nullptr, nullptr).ok());  // no predictor yet
  const uint64_t bytes = t->factors.bytes() + kF * sizeof(float);
  (*w)->predictors.push_back(std::move(t->factors));
  (*w)->bias.push_back(t->bias);
  (*w)->rank = 8;
  EXPECT_EQ((*w)->predictor_bytes(), bytes);
  auto mlp = MixedMlp::Create(w->get(), cfg, kernels::Glu::kSilu, nullptr, nullptr);
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  std::vector<float> y(kD), tmp(8), score(kF), g(kF), u(kF);
  const int64_t n = static_cast<int64_t>(s.x.size()) / kD;
  double want_hits = 0;
  const int64_t k = 32;
  for (int64_t sample = n - 100; sample < n; ++sample) {
    const float* x = &s.x[static_cast<size_t>(sample * kD)];
    ASSERT_TRUE((*mlp)->Forward(0, x, y.data()).ok());
    // The reference: the top k of the score against the true top k of |h|.
    TrainedScore(PredictorForm::kLogit, kernels::Glu::kSilu, (*w)->predictors[0], (*w)->bias[0], x, tmp.data(),
                 score.data(), nullptr);
    for (int64_t i = 0; i < kF; ++i) {
      double gi = 0, ui = 0;
      for (int64_t j = 0; j < kD; ++j) {
        gi += static_cast<double>(s.mlp.gate[static_cast<size_t>(i * kD + j)]) * x[j];
        ui += static_cast<double>(s.mlp.up[static_cast<size_t>(i * kD + j)]) * x[j];
      }
      g[static_cast<size_t>(i)] = static_cast<float>(std::fabs(gi / (1 + std::exp(-gi)) * ui));
    }
    std::vector<int> by_score(kF), by_h(kF);
    std::iota(by_score.begin(), by_score.end(), 0);
    std::iota(by_h.begin(), by_h.end(), 0);
    std::stable_sort(by_score.begin(), by_score.end(), [&](int a, int b) { return score[a] > score[b]; });
    std::stable_sort(by_h.begin(), by_h.end(), [&](int a, int b) { return g[a] > g[b]; });
    std::vector<char> in(kF, 0);
    for (int64_t i = 0; i < k; ++i) in[static_cast<size_t>(by_h[static_cast<size_t>(i)])] = 1;
    for (int64_t i = 0; i < k; ++i) want_hits += in[static_cast<size_t>(by_score[static_cast<size_t>(i)])];
  }
  const M2Stats& st = (*mlp)->stats();
  EXPECT_EQ(st.bytes_predictor, 100 * bytes);
  EXPECT_EQ(st.recall_total, 100u * k);
  EXPECT_NEAR(static_cast<double>(st.recall_hits), want_hits, 3.0);  // F32 vs double ties only
}

PredictorFile SmallFile() {
  PredictorFile f;
  f.form = PredictorForm::kLogit;
  f.top_fraction = 0.3f;
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  for (int l = 0; l < 2; ++l) {
    const int64_t r = 3 + l, d = 32, ff = 48 + 16 * l;
    std::vector<float> a(static_cast<size_t>(r * d)), u(static_cast<size_t>(ff * r));
    for (float& v : a) v = g(rng);
    for (float& v : u) v = g(rng);
    std::vector<uint8_t> ab(RowBytes(DType::kF16, d) * r), ub(RowBytes(DType::kF16, r) * ff);
    for (int64_t i = 0; i < r; ++i) QuantizeRow(DType::kF16, &a[i * d], ab.data() + i * RowBytes(DType::kF16, d), d);
    for (int64_t i = 0; i < ff; ++i) QuantizeRow(DType::kF16, &u[i * r], ub.data() + i * RowBytes(DType::kF16, r), r);
    TrainedLayer layer;
    auto factors = LowRankPredictor::FromFactors(r, d, ff, ab, ub);
    EXPECT_TRUE(factors.ok());
    layer.factors = std::move(*factors);
    layer.bias.resize(static_cast<size_t>(ff));
    for (float& v : layer.bias) v = g(rng);
    f.layers.push_back(std::move(layer));
  }
  return f;
}

TEST(PredictorFileTest, RoundTripsThroughAFile) {
  const PredictorFile f = SmallFile();
  const std::vector<uint8_t> bytes = SerializePredictorFile(f);
  const std::string path = testing::TempDir() + "/round_trip.m2p";
  ASSERT_TRUE(WritePredictorFile(path, f).ok());
  auto back = ReadPredictorFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FLOAT_EQ(back->top_fraction, 0.3f);
  EXPECT_EQ(back->form, PredictorForm::kLogit);
  ASSERT_EQ(back->layers.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    const TrainedLayer &a = f.layers[l], &b = back->layers[l];
    EXPECT_EQ(b.factors.rank(), a.factors.rank());
    ASSERT_EQ(b.factors.a().nbytes(), a.factors.a().nbytes());
    ASSERT_EQ(b.factors.u().nbytes(), a.factors.u().nbytes());
    EXPECT_EQ(std::memcmp(b.factors.a().data, a.factors.a().data, a.factors.a().nbytes()), 0);
    EXPECT_EQ(std::memcmp(b.factors.u().data, a.factors.u().data, a.factors.u().nbytes()), 0);
    EXPECT_EQ(b.bias, a.bias);
  }
  EXPECT_EQ(SerializePredictorFile(*back), bytes);
  std::remove(path.c_str());
  EXPECT_FALSE(ReadPredictorFile(path).ok());  // gone: an IoError naming the path
}

TEST(PredictorFileTest, TruncatedAndCorruptFilesGiveClearErrors) {
  const std::vector<uint8_t> good = SerializePredictorFile(SmallFile());
  ASSERT_TRUE(ParsePredictorFile(good, "good.m2p").ok());
  // Every truncation.
  for (size_t n = 0; n < good.size(); ++n) {
    auto r = ParsePredictorFile(std::span<const uint8_t>(good.data(), n), "cut.m2p");
    ASSERT_FALSE(r.ok()) << "truncated to " << n << " bytes";
    EXPECT_EQ(r.status().code(), Status::Code::kCorrupt);
    EXPECT_NE(r.status().message().find("cut.m2p"), std::string::npos) << r.status().ToString();
  }
  auto expect_error = [&](std::vector<uint8_t> bytes, const std::string& words) {
    auto r = ParsePredictorFile(bytes, "bad.m2p");
    ASSERT_FALSE(r.ok()) << words;
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
  };
  auto put32 = [](std::vector<uint8_t> b, size_t at, uint32_t v) {
    std::memcpy(b.data() + at, &v, 4);
    return b;
  };
  expect_error(put32(good, 0, 0x46554747), "magic");
  expect_error(put32(good, 8, 2), "version 2");
  expect_error(put32(good, 12, 0), "n_layers 0");
  expect_error(put32(good, 12, 3), "layer 2");          // a third layer that is not there
  expect_error(put32(good, 12, 1), "bytes after the last layer");
  expect_error(put32(good, 16, 0x3f800000), "top_fraction");  // 1.0
  expect_error(put32(good, 20, 2), "form 2");
  expect_error(put32(good, 32, 0xffffffffu), "d_model");     // huge: no overflow, no allocation
  expect_error(put32(good, 40, 40), "rank 40");              // rank above d_model
  std::vector<uint8_t> extra = good;
  extra.push_back(0);
  expect_error(extra, "bytes after the last layer");
  std::vector<uint8_t> flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  expect_error(flipped, "checksum");
  // A NaN bias (the last 4 bytes) and an infinite F16 factor (the first value of layer 0's A).
  expect_error(put32(good, good.size() - 4, 0x7fc00000u), "not finite");
  std::vector<uint8_t> inf = good;
  inf[48] = 0x00;
  inf[49] = 0x7c;
  expect_error(inf, "not finite");
}

TEST(PredictorFileTest, MixConfigNamesTheFile) {
  auto c = ParseMixConfig("high=0,low=0.5,predictor=trained:some/dir/p.m2p");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->predictor, PredictorKind::kTrained);
  EXPECT_EQ(c->predictor_file, "some/dir/p.m2p");
  EXPECT_NE(c->ToString().find("predictor=trained:some/dir/p.m2p"), std::string::npos) << c->ToString();
  auto again = ParseMixConfig(c->ToString());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->predictor_file, "some/dir/p.m2p");
  EXPECT_FALSE(ParseMixConfig("predictor=trained:").ok());
}

}  // namespace
}  // namespace weir::m2cache
