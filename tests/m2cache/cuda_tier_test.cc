// The CUDA tier (m2cache/cuda/) against an exact reference and the dram tier: cache units of
// every supported type computed on the GPU equal the f32 maths of their dequantized rows; the
// mixed MLP on both tiers gives the same outputs (up to the CPU kernels' int8 rounding of
// activations) and the same cache-unit counters; copies staged through the pinned ring land byte
// for byte and in order. Built only with -DWEIR_CUDA=ON (the file is empty otherwise); every test
// that needs a GPU skips with the runtime's reason ("... no CUDA device: ...") when there is none.
#ifdef WEIR_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "random_mlp.h"
#include "kernels/ops.h"
#include "m2cache/cache_unit.h"
#include "m2cache/mixed_mlp.h"
#include "m2cache/neuron_store.h"
#include "m2cache/tier_memory.h"
#include "tensor/quantize.h"

namespace weir::m2cache {
namespace {

// `var` = the tier of CUDA device 0; the test is skipped when the runtime finds no device (the
// message says why, e.g. "--m2cache tier=cuda: no CUDA device: CUDA driver version is
// insufficient ..."), and fails when a device is there but the tier cannot start on it.
#define WEIR_CUDA_TIER_OR_SKIP(var)                                                       \
  auto var##_made = MakeCudaTier(0);                                                      \
  if (!var##_made.ok()) {                                                                 \
    const Status& why = var##_made.status();                                              \
    ASSERT_EQ(why.code(), Status::Code::kUnsupported) << why.ToString();                  \
    ASSERT_NE(why.message().find("no CUDA device"), std::string::npos) << why.ToString(); \
    GTEST_SKIP() << why.message();                                                        \
  }                                                                                       \
  std::unique_ptr<TierMemory> var = std::move(var##_made).value()

TEST(CudaTierTest, MakeTierGivesTheCudaTierOrSaysWhyNot) {
  auto tier = MakeTier("cuda");
  if (tier.ok()) {
    EXPECT_STREQ((*tier)->name(), "cuda");
    EXPECT_EQ((*tier)->allocated(), 0u);
    return;
  }
  EXPECT_EQ(tier.status().code(), Status::Code::kUnsupported) << tier.status().ToString();
  EXPECT_NE(tier.status().message().find("--m2cache tier=cuda"), std::string::npos)
      << tier.status().ToString();
}

using m2test::Mlp;
using m2test::RandomMlp;

// y = Σ_{i in neurons} act(g_i) u_i down_i from the dequantized rows, in double (the activation
// in float, as kernels::GatedActivation computes it).
std::vector<double> Reference(const NeuronRows& rows, kernels::Glu glu,
                              const std::vector<int32_t>& neurons, const std::vector<float>& x) {
  const int64_t d = rows.gate.cols();
  std::vector<double> y(static_cast<size_t>(d), 0.0);
  std::vector<float> row(static_cast<size_t>(d));
  for (int32_t i : neurons) {
    double g = 0, u = 0;
    DequantizeRow(rows.gate, i, row.data());
    for (int64_t k = 0; k < d; ++k) g += static_cast<double>(row[k]) * x[k];
    DequantizeRow(rows.up, i, row.data());
    for (int64_t k = 0; k < d; ++k) u += static_cast<double>(row[k]) * x[k];
    float gf = static_cast<float>(g);
    const float uf = static_cast<float>(u);
    kernels::GatedActivation(glu, &gf, &uf, 1);
    DequantizeRow(rows.down_t, i, row.data());
    for (int64_t k = 0; k < d; ++k) y[k] += static_cast<double>(gf) * row[k];
  }
  return y;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// n distinct neurons < f, ascending; each step keeps about 3/4 of the previous list (adjacent
// tokens share most neurons).
void Drift(int64_t f, size_t n, std::vector<int32_t>* list, std::mt19937* rng) {
  std::vector<uint8_t> in(static_cast<size_t>(f), 0);
  for (int32_t i : *list) in[static_cast<size_t>(i)] = 1;
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(f - 1));
  std::bernoulli_distribution replace(0.25);
  auto fresh = [&] {
    int32_t i;
    do i = any(*rng);
    while (in[static_cast<size_t>(i)]);
    in[static_cast<size_t>(i)] = 1;
    return i;
  };
  for (int32_t& i : *list) {
    if (replace(*rng)) {
      in[static_cast<size_t>(i)] = 0;
      i = fresh();
    }
  }
  while (list->size() < n) list->push_back(fresh());
  std::sort(list->begin(), list->end());
}

// ((high type, low type), d_model, activation)
using TypesCase = std::tuple<std::tuple<DType, DType>, int, kernels::Glu>;

class CudaTierTypesTest : public ::testing::TestWithParam<TypesCase> {};

// Cache units of both precisions on both tiers, updated with the same drifting neuron lists: the
// cuda tier's Compute equals the f32 maths of the dequantized rows, is close to the dram tier's,
// and ATU loads the same neurons and bytes on both.
TEST_P(CudaTierTypesTest, UnitsMatchTheReferenceAndTheDramTier) {
  const auto [types, d_model, glu] = GetParam();
  WEIR_CUDA_TIER_OR_SKIP(cuda);
  const int64_t d = d_model, f = 192;
  const Mlp mlp = RandomMlp(d, f, 81);
  const std::vector<MlpWeights> views = {mlp.view()};
  auto store = NeuronStore::Build(views, {std::get<0>(types), std::get<1>(types)}, nullptr);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const LayerNeurons& ln = (*store)->layer(0);
  auto dram = MakeHostTier();
  const int64_t capacity[2] = {96, 40};  // 96 slots: the down product sums two chunks
  std::vector<CacheUnit> on_gpu, on_cpu;
  for (int p = 0; p < 2; ++p) {
    auto g = CacheUnit::Create(ln.at[p], capacity[p], cuda.get());
    auto c = CacheUnit::Create(ln.at[p], capacity[p], dram.get());
    ASSERT_TRUE(g.ok() && c.ok());
    on_gpu.push_back(std::move(*g));
    on_cpu.push_back(std::move(*c));
  }
  EXPECT_EQ(cuda->allocated(), dram->allocated());

  std::mt19937 rng(82);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(d)), y_gpu(x.size()), y_cpu(x.size());
  std::vector<int32_t> lists[2], slots_gpu(static_cast<size_t>(f)), slots_cpu(slots_gpu.size());
  uint64_t bytes_gpu = 0, bytes_cpu = 0, hits = 0;
  for (int step = 0; step < 20; ++step) {
    for (float& v : x) v = step == 0 ? n(rng) : 0.8f * v + 0.6f * n(rng);
    for (int p = 0; p < 2; ++p) {
      Drift(f, static_cast<size_t>(capacity[p]), &lists[p], &rng);
      const int64_t hits_gpu = on_gpu[p].Update(ln.at[p], lists[p], slots_gpu.data(), &bytes_gpu);
      const int64_t hits_cpu = on_cpu[p].Update(ln.at[p], lists[p], slots_cpu.data(), &bytes_cpu);
      ASSERT_EQ(hits_gpu, hits_cpu);
      ASSERT_EQ(bytes_gpu, bytes_cpu);
      hits += static_cast<uint64_t>(hits_gpu);
      const std::span<const int32_t> sg(slots_gpu.data(), lists[p].size());
      const std::span<const int32_t> sc(slots_cpu.data(), lists[p].size());
      const Status st = cuda->Compute(on_gpu[p].rows(), sg, glu, x.data(), y_gpu.data(), nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_TRUE(dram->Compute(on_cpu[p].rows(), sc, glu, x.data(), y_cpu.data(), nullptr).ok());
      const auto ref = Reference(ln.at[p], glu, lists[p], x);
      const double scale = MaxAbs(ref);
      for (int64_t i = 0; i < d; ++i) {
        // The GPU computes in f32 from the dequantized weights and the exact x.
        ASSERT_NEAR(y_gpu[i], ref[i], 5e-4 * scale + 1e-6)
            << "step " << step << " precision " << p << " output " << i;
        // The CPU kernels round x (Q8 blocks) and the down coefficients to int8.
        ASSERT_NEAR(y_gpu[i], y_cpu[i], 0.02 * scale + 1e-4)
            << "step " << step << " precision " << p << " output " << i;
      }
    }
  }
  EXPECT_GT(hits, 0u);
  const Status flushed = cuda->Flush();
  EXPECT_TRUE(flushed.ok()) << flushed.ToString();
}

// The whole mixed MLP (two layers, cache units on) with the cuda tier and with the dram tier:
// the same outputs up to the CPU kernels' rounding and the same counters. The oracle predictor
// scores on the CPU for both, so both load the same neurons.
TEST_P(CudaTierTypesTest, MixedMlpMatchesTheDramTier) {
  const auto [types, d_model, glu] = GetParam();
  WEIR_CUDA_TIER_OR_SKIP(cuda);
  const int64_t d = d_model, f = 192;
  const Mlp mlps[2] = {RandomMlp(d, f, 61), RandomMlp(d, f, 62)};
  const std::vector<MlpWeights> views = {mlps[0].view(), mlps[1].view()};
  M2Weights w;
  auto store = NeuronStore::Build(views, {std::get<0>(types), std::get<1>(types)}, nullptr);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  w.store = std::move(*store);
  MixConfig cfg;
  cfg.r_high = 0.125;  // 24 neurons
  cfg.r_low = 0.25;    // 48 neurons
  cfg.predictor = PredictorKind::kOracle;
  auto dram = MakeHostTier();
  ThreadPool pool(2);
  auto on_gpu = MixedMlp::Create(&w, cfg, glu, cuda.get(), &pool);
  auto on_cpu = MixedMlp::Create(&w, cfg, glu, dram.get(), &pool);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().ToString();
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().ToString();

  std::mt19937 rng(63);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(d)), y_gpu(x.size()), y_cpu(x.size());
  for (int step = 0; step < 20; ++step) {
    // Adjacent tokens are similar: x drifts, so the units both hit and load.
    for (float& v : x) v = step == 0 ? n(rng) : 0.8f * v + 0.6f * n(rng);
    for (int layer = 0; layer < 2; ++layer) {
      const Status sg = (*on_gpu)->Forward(layer, x.data(), y_gpu.data());
      ASSERT_TRUE(sg.ok()) << sg.ToString();
      ASSERT_TRUE((*on_cpu)->Forward(layer, x.data(), y_cpu.data()).ok());
      double scale = 0;
      for (float v : y_cpu) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      for (int64_t i = 0; i < d; ++i) {
        ASSERT_NEAR(y_gpu[i], y_cpu[i], 0.02 * scale + 1e-4)
            << "step " << step << " layer " << layer << " output " << i;
      }
    }
  }
  const M2Stats& g = (*on_gpu)->stats();
  const M2Stats& c = (*on_cpu)->stats();
  EXPECT_EQ(g.layer_tokens, 40u);
  EXPECT_EQ(g.neurons[kHigh], c.neurons[kHigh]);
  EXPECT_EQ(g.neurons[kLow], c.neurons[kLow]);
  EXPECT_EQ(g.bytes_computed, c.bytes_computed);
  EXPECT_EQ(g.unit_hits, c.unit_hits);
  EXPECT_EQ(g.unit_loads[kHigh], c.unit_loads[kHigh]);
  EXPECT_EQ(g.unit_loads[kLow], c.unit_loads[kLow]);
  EXPECT_EQ(g.bytes_into_top, c.bytes_into_top);
  EXPECT_GT(g.unit_hits, 0u) << "drifting inputs share neurons between adjacent tokens";
  EXPECT_EQ(cuda->allocated(), dram->allocated());
}

std::string TypesCaseName(const ::testing::TestParamInfo<TypesCase>& info) {
  const auto& [types, d_model, glu] = info.param;
  return std::string(DTypeName(std::get<0>(types))) + "_" + DTypeName(std::get<1>(types)) + "_d" +
         std::to_string(d_model) + (glu == kernels::Glu::kSilu ? "_silu" : "_gelu");
}

INSTANTIATE_TEST_SUITE_P(
    Types, CudaTierTypesTest,
    ::testing::Combine(::testing::Values(std::make_tuple(DType::kQ8_0, DType::kQ4_0),
                                         std::make_tuple(DType::kF16, DType::kQ4_0),
                                         std::make_tuple(DType::kF32, DType::kF16),
                                         std::make_tuple(DType::kBF16, DType::kQ8_0)),
                       ::testing::Values(64, 128),
                       ::testing::Values(kernels::Glu::kSilu, kernels::Glu::kGeluTanh)),
    TypesCaseName);

// CacheUnit-shaped rows of type t in the tier: gate, up and down_t of [capacity, d_model].
struct DeviceRows {
  NeuronRows rows;
  static Result<DeviceRows> Create(TierMemory* tier, DType t, int64_t capacity, int64_t d_model) {
    DeviceRows r;
    TensorView* views[3] = {&r.rows.gate, &r.rows.up, &r.rows.down_t};
    for (TensorView* v : views) {
      const size_t bytes = RowBytes(t, d_model) * static_cast<size_t>(capacity);
      WEIR_ASSIGN_OR_RETURN(void* p, tier->Allocate(bytes));
      *v = TensorView{t, Shape{capacity, d_model}, p};
    }
    return r;
  }
};

// Copies rows [0, capacity) of `src` (row-major, row_bytes each) into `dst` in runs of 1 to 8 rows.
void CopyInRuns(TierMemory* tier, const TensorView& dst, const std::vector<float>& src,
                std::mt19937* rng) {
  std::uniform_int_distribution<int64_t> run(1, 8);
  const size_t row_bytes = dst.row_bytes();
  for (int64_t r = 0; r < dst.rows();) {
    const int64_t n = std::min(run(*rng), dst.rows() - r);
    tier->CopyIn(
        static_cast<uint8_t*>(const_cast<void*>(dst.data)) + static_cast<size_t>(r) * row_bytes,
        reinterpret_cast<const uint8_t*>(src.data()) + static_cast<size_t>(r) * row_bytes,
        static_cast<size_t>(n) * row_bytes);
    r += n;
  }
}

double Silu(double g) {
  const float gf = static_cast<float>(g);
  return gf / (1.0f + std::exp(-gf));
}

TEST(CudaTierTest, CopiesThroughTheStagingRingLandExactly) {
  WEIR_CUDA_TIER_OR_SKIP(cuda);
  // 9 MiB per matrix: gate and up go in runs of at most 8 rows (18 MiB through an 8 MiB ring, so
  // it wraps), down_t in one copy larger than the ring (so it grows).
  const int64_t d = 512, cap = 4608;
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(float);
  auto dev = DeviceRows::Create(cuda.get(), DType::kF32, cap, d);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  const NeuronRows& rows = dev->rows;
  EXPECT_EQ(cuda->allocated(), 3 * static_cast<size_t>(cap) * row_bytes);

  // Positive gate, up and x: the dots have no cancellation, so f32 is within 1e-5 relative, and a
  // wrong row shows.
  std::mt19937 rng(71);
  std::uniform_real_distribution<float> small(0.0f, 0.01f), unit(0.0f, 1.0f), sym(-1.0f, 1.0f);
  std::vector<float> gate(static_cast<size_t>(cap * d)), up(gate.size()), down(gate.size()),
      junk(gate.size());
  for (float& v : gate) v = small(rng);
  for (float& v : up) v = small(rng);
  for (float& v : down) v = sym(rng);
  for (float& v : junk) v = sym(rng);
  std::vector<float> x(static_cast<size_t>(d)), y(x.size());
  for (float& v : x) v = unit(rng);

  // Fresh units are zero: h = act(0) * 0 = 0.
  std::vector<int32_t> some = {0, 17, static_cast<int32_t>(cap - 1)};
  std::fill(y.begin(), y.end(), 1.0f);
  ASSERT_TRUE(cuda->Compute(rows, some, kernels::Glu::kSilu, x.data(), y.data(), nullptr).ok());
  for (float v : y) ASSERT_EQ(v, 0.0f);
  // No slots: y = 0.
  std::fill(y.begin(), y.end(), 1.0f);
  ASSERT_TRUE(cuda->Compute(rows, {}, kernels::Glu::kSilu, x.data(), y.data(), nullptr).ok());
  for (float v : y) ASSERT_EQ(v, 0.0f);

  // Junk first, then the real rows over it: the copies land in the order they were queued.
  CopyInRuns(cuda.get(), rows.gate, junk, &rng);
  CopyInRuns(cuda.get(), rows.gate, gate, &rng);
  CopyInRuns(cuda.get(), rows.up, up, &rng);
  cuda->CopyIn(const_cast<void*>(rows.down_t.data), down.data(),
               static_cast<size_t>(cap) * row_bytes);
  const Status flushed = cuda->Flush();
  ASSERT_TRUE(flushed.ok()) << flushed.ToString();

  // h of every slot in double.
  std::vector<double> h(static_cast<size_t>(cap));
  for (int64_t s = 0; s < cap; ++s) {
    double g = 0, u = 0;
    for (int64_t k = 0; k < d; ++k) {
      g += static_cast<double>(gate[static_cast<size_t>(s * d + k)]) * x[static_cast<size_t>(k)];
      u += static_cast<double>(up[static_cast<size_t>(s * d + k)]) * x[static_cast<size_t>(k)];
    }
    h[static_cast<size_t>(s)] = Silu(g) * u;
  }
  // One slot at a time: y = h_s * down_t[s].
  for (int32_t s = 0; s < cap; ++s) {
    const Status st = cuda->Compute(rows, std::span<const int32_t>(&s, 1), kernels::Glu::kSilu,
                                    x.data(), y.data(), nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const double hs = h[static_cast<size_t>(s)];
    for (int64_t r = 0; r < d; ++r) {
      const double want = hs * down[static_cast<size_t>(s * d + r)];
      ASSERT_NEAR(y[static_cast<size_t>(r)], want, 1e-4 * std::fabs(hs) + 1e-7)
          << "slot " << s << " output " << r;
    }
  }
  // Every slot at once, in a shuffled order (72 chunks of the down product).
  std::vector<int32_t> all(static_cast<size_t>(cap));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  const Status st = cuda->Compute(rows, all, kernels::Glu::kSilu, x.data(), y.data(), nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (int64_t r = 0; r < d; ++r) {
    double want = 0, magnitude = 0;
    for (int64_t s = 0; s < cap; ++s) {
      const double term = h[static_cast<size_t>(s)] * down[static_cast<size_t>(s * d + r)];
      want += term;
      magnitude += std::fabs(term);
    }
    ASSERT_NEAR(y[static_cast<size_t>(r)], want, 1e-4 * magnitude + 1e-6) << "output " << r;
  }
}

TEST(CudaTierTest, RefusesATypeWithoutAKernelAndStaysUsable) {
  WEIR_CUDA_TIER_OR_SKIP(cuda);
  const int64_t d = 64, cap = 4;
  auto q41 = DeviceRows::Create(cuda.get(), DType::kQ4_1, cap, d);
  auto f32 = DeviceRows::Create(cuda.get(), DType::kF32, cap, d);
  ASSERT_TRUE(q41.ok() && f32.ok());
  std::vector<float> x(static_cast<size_t>(d), 1.0f), y(x.size(), 1.0f);
  const std::vector<int32_t> slots = {0, 2};
  const Status refused =
      cuda->Compute(q41->rows, slots, kernels::Glu::kSilu, x.data(), y.data(), nullptr);
  EXPECT_EQ(refused.code(), Status::Code::kUnsupported);
  EXPECT_NE(refused.message().find("Q4_1"), std::string::npos) << refused.ToString();
  const Status fine =
      cuda->Compute(f32->rows, slots, kernels::Glu::kGeluTanh, x.data(), y.data(), nullptr);
  ASSERT_TRUE(fine.ok()) << fine.ToString();
  for (float v : y) EXPECT_EQ(v, 0.0f);  // zeroed units
}

}  // namespace
}  // namespace weir::m2cache

#endif  // WEIR_HAVE_CUDA
