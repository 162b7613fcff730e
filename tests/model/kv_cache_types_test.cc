// The KV cache in each of its types (kv_cache.h): a prompt fed in one call or token by token gives
// the same bits (what speculative verification relies on), the logits stay close to the F32
// cache's by the type's precision, the cache's bytes are the type's, and a type that cannot hold
// the heads is refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "format/synth_llama.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/session.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

// "qwen3-hd64": qwen3 tiny with heads of 64 values, where a quantized cache stores its heads
// rotated (kv_cache.h, rotate_k / rotate_v).
std::unique_ptr<Model> KvTinyModel(const std::string& arch) {
  const std::string path = testing::TempDir() + "/kv_types_" + arch + ".gguf";
  const bool hd64 = arch == "qwen3-hd64";
  auto spec = format::SynthPreset("tiny", hd64 ? "qwen3" : arch);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (hd64) spec->head_dim = 64;
  EXPECT_TRUE(format::WriteRandomLlamaGguf(*spec, DType::kF32, 5, path, nullptr).ok());
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Logits of every position of a 40-token prompt fed `step` tokens a call.
std::vector<float> KvAllLogits(const Model& m, KvTypes types, int step, ThreadPool* pool) {
  SessionOptions so;
  so.ctx = 48;
  so.n_batch = 8;
  so.kv_types = types;
  auto s = Session::Create(m, pool, so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return {};
  const int vocab = m.config().vocab_size;
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 31 + 3) % vocab);
  std::vector<float> out;
  for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(step)) {
    const size_t n = std::min(ids.size() - i, static_cast<size_t>(step));
    auto l = (*s)->Forward(std::span<const int32_t>(ids).subspan(i, n), LogitsFor::kAll);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) return {};
    out.insert(out.end(), *l, *l + n * static_cast<size_t>(vocab));
  }
  return out;
}

double KvRelError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct KvTypeBound {
  DType type;
  double max_rel_error;  // of the logits against the F32 cache's
};

// About twice the worst each type measured on these random models (gemma3 tiny: f16 5e-4, bf16
// 4.6e-3, q8_0 1.7e-2, q5_0 0.11, q4_0 0.24; the others less). Random weights are harsher than
// trained ones (docs/long-context.md has the perplexities of real models); a cache that loses
// its values gives ~1.
const KvTypeBound kKvTypeBounds[] = {{DType::kF16, 1e-3}, {DType::kBF16, 1e-2}, {DType::kQ8_0, 4e-2},
                                     {DType::kQ5_0, 0.25}, {DType::kQ4_0, 0.5}};

class KvCacheTypesTest : public ::testing::TestWithParam<const char*> {};

TEST_P(KvCacheTypesTest, BatchInvariantAndCloseToF32) {
  auto m = KvTinyModel(GetParam());
  ASSERT_NE(m, nullptr);
  ThreadPool pool(2);
  const std::vector<float> f32 = KvAllLogits(*m, {DType::kF32, DType::kF32}, 8, &pool);
  ASSERT_FALSE(f32.empty());
  for (const KvTypeBound& t : kKvTypeBounds) {
    for (KvTypes types : {KvTypes{t.type, t.type}, KvTypes{t.type, DType::kF16}}) {
      const std::vector<float> batched = KvAllLogits(*m, types, 8, &pool);
      const std::vector<float> single = KvAllLogits(*m, types, 1, &pool);
      ASSERT_EQ(batched.size(), f32.size());
      ASSERT_EQ(single.size(), f32.size());
      EXPECT_EQ(0, std::memcmp(batched.data(), single.data(), f32.size() * sizeof(float)))
          << GetParam() << " " << KvTypesName(types);
      const double err = KvRelError(batched, f32);
      EXPECT_LT(err, t.max_rel_error) << GetParam() << " " << KvTypesName(types);
      EXPECT_GT(err, 0.0) << GetParam() << " " << KvTypesName(types) << ": not the F32 cache";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, KvCacheTypesTest, ::testing::Values("gemma2", "gemma3", "qwen3", "qwen3-hd64"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

TEST(KvCacheTypes, BytesAreTheTypesAndBadTypesAreRefused) {
  auto m = KvTinyModel("qwen3");  // heads of 32 values
  ASSERT_NE(m, nullptr);
  const format::LlamaConfig& c = m->config();
  const uint64_t per_pos_f32 = KVCache::BytesPerPosition(c, {DType::kF32, DType::kF32});
  EXPECT_EQ(per_pos_f32, 2ull * c.n_layers * c.n_head_kv * c.head_dim * 4);
  EXPECT_EQ(KVCache::BytesPerPosition(c), per_pos_f32);  // the library's default: F32
  EXPECT_EQ(KVCache::BytesPerPosition(c, {DType::kF16, DType::kF16}), per_pos_f32 / 2);
  EXPECT_EQ(KVCache::BytesPerPosition(c, {DType::kQ8_0, DType::kQ4_0}),
            static_cast<uint64_t>(c.n_layers) * c.n_head_kv * (c.head_dim / 32) * (34 + 18));
  SessionOptions so;
  so.ctx = 32;
  so.kv_types = {DType::kQ8_0, DType::kF32};
  auto s = Session::Create(*m, nullptr, so);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->kv_bytes(), KVCache::BytesFor(c, 32, so.n_batch, so.kv_types));
  EXPECT_EQ(KvTypesName((*s)->kv_types()), "q8_0/f32");
  // Heads of 32 values: nothing is rotated; of 64: a quantized type's heads are.
  KVCache kv;
  ASSERT_TRUE(kv.Init(c, 32, 8, {DType::kQ8_0, DType::kF16}).ok());
  EXPECT_EQ(kv.rotate_k(), 0);
  auto m64 = KvTinyModel("qwen3-hd64");
  ASSERT_NE(m64, nullptr);
  ASSERT_TRUE(kv.Init(m64->config(), 32, 8, {DType::kQ8_0, DType::kF16}).ok());
  EXPECT_EQ(kv.rotate_k(), 64);
  EXPECT_EQ(kv.rotate_v(), 0);

  // Q4_K blocks hold 256 values; the tiny model's heads are smaller.
  ASSERT_LT(c.head_dim, 256);
  so.kv_types = {DType::kQ4_K, DType::kF16};
  auto bad = Session::Create(*m, nullptr, so);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("head dimension"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace weir::model
