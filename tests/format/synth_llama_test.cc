// Synthetic Llama GGUF files: presets, round trip through the reader, the weight distribution,
// the vocabulary, and byte-for-byte determinism.
#include "format/synth_llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "format/gguf_reader.h"
#include "format/llama_gguf_writer.h"
#include "tensor/quantize.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

TEST(SynthLlamaTest, Presets) {
  auto tiny = SynthPreset("tiny");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->d_model, 64);
  EXPECT_EQ(tiny->n_layers, 2);
  EXPECT_EQ(tiny->n_head, 4);
  EXPECT_EQ(tiny->n_head_kv, 2);
  EXPECT_EQ(tiny->d_ff, 192);
  EXPECT_EQ(tiny->vocab_size, 320);
  auto b1 = SynthPreset("llama-1b");
  ASSERT_TRUE(b1.ok());
  EXPECT_EQ(b1->d_model, 2048);
  EXPECT_EQ(b1->n_layers, 22);
  EXPECT_EQ(b1->n_head, 32);
  EXPECT_EQ(b1->n_head_kv, 4);
  EXPECT_EQ(b1->d_ff, 5632);
  EXPECT_EQ(b1->vocab_size, 32000);
  EXPECT_EQ(b1->ctx_len, 2048);
  auto b7 = SynthPreset("llama-7b");
  ASSERT_TRUE(b7.ok());
  EXPECT_EQ(b7->d_model, 4096);
  EXPECT_EQ(b7->n_layers, 32);
  EXPECT_EQ(b7->n_head_kv, 32);
  EXPECT_EQ(b7->d_ff, 11008);
  EXPECT_EQ(b7->ctx_len, 4096);
  for (const std::string& name : SynthPresetNames()) {
    auto s = SynthPreset(name);
    ASSERT_TRUE(s.ok()) << name;
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      EXPECT_TRUE(ValidateSynthSpec(*s, t).ok()) << name << " " << DTypeName(t);
    }
  }
  auto bad = SynthPreset("llama-70b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("llama-70b"), std::string::npos);
}

TEST(SynthLlamaTest, SpecValidation) {
  SynthSpec s = *SynthPreset("tiny");
  s.vocab_size = 256;
  Status st = ValidateSynthSpec(s, DType::kF32);
  EXPECT_NE(st.message().find("at least 259"), std::string::npos) << st.message();
  s = *SynthPreset("tiny");
  s.d_model = 48, s.n_head = 4, s.n_head_kv = 2;
  EXPECT_TRUE(ValidateSynthSpec(s, DType::kF16).ok());
  st = ValidateSynthSpec(s, DType::kQ8_0);
  EXPECT_NE(
      st.message().find("d_model 48 and d_ff 192 must be multiples of the Q8_0 block size 32"),
      std::string::npos)
      << st.message();
  s = *SynthPreset("tiny");
  s.n_head_kv = 3;
  EXPECT_FALSE(ValidateSynthSpec(s, DType::kF32).ok());
  s = *SynthPreset("tiny");
  s.n_head = 5;
  EXPECT_FALSE(ValidateSynthSpec(s, DType::kF32).ok());
  s = *SynthPreset("tiny");
  s.n_layers = 0;
  EXPECT_FALSE(ValidateSynthSpec(s, DType::kF32).ok());
  std::string path = testing::TempDir() + "/bad.gguf";
  s = *SynthPreset("tiny");
  s.vocab_size = 100;
  EXPECT_FALSE(WriteRandomLlamaGguf(s, DType::kF32, 1, path, nullptr).ok());
  EXPECT_FALSE(testing::FileExists(path));
}

TEST(SynthLlamaTest, WeightsAreNormalWithStd002) {
  // 2^20 values over many rows and tensors.
  std::vector<float> row(4096);
  double sum = 0, sum2 = 0, sum4 = 0;
  int64_t within1 = 0, within2 = 0, n = 0;
  for (uint64_t t = 0; t < 4; ++t) {
    for (uint64_t r = 0; r < 64; ++r) {
      SynthRandomRow(123, t, r, row.data(), static_cast<int64_t>(row.size()));
      for (float x : row) {
        double z = x / 0.02;
        sum += z, sum2 += z * z, sum4 += z * z * z * z;
        within1 += std::fabs(z) < 1.0;
        within2 += std::fabs(z) < 2.0;
        ++n;
      }
    }
  }
  double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.005);
  EXPECT_NEAR(std::sqrt(var), 1.0, 0.005);
  EXPECT_NEAR(sum4 / n, 3.0, 0.05);  // kurtosis of a normal
  EXPECT_NEAR(static_cast<double>(within1) / n, 0.6827, 0.003);
  EXPECT_NEAR(static_cast<double>(within2) / n, 0.9545, 0.002);

  // Rows are independent of each other and reproducible; odd lengths work.
  std::vector<float> a(33), b(33), c(33);
  SynthRandomRow(5, 1, 7, a.data(), 33);
  SynthRandomRow(5, 1, 7, b.data(), 33);
  SynthRandomRow(5, 1, 8, c.data(), 33);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  SynthRandomRow(6, 1, 7, c.data(), 33);
  EXPECT_NE(a, c);
  SynthRandomRow(5, 2, 7, c.data(), 33);
  EXPECT_NE(a, c);
}

TEST(SynthLlamaTest, FastGeneratorMatchesLibmReference) {
  // Same random bits, polynomial vs libm (double) math: equal to ~1e-6 of the std everywhere,
  // including the extremes of u1 (tails) and every quadrant of the angle.
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{513}, int64_t{4096}}) {
    for (uint64_t row = 0; row < 64; ++row) {
      std::vector<float> fast(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
      SynthRandomRow(11, 3, row, fast.data(), n);
      SynthRandomRowReference(11, 3, row, ref.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(fast[i], ref[i], 2e-6f * 0.02f + 1e-6f * std::fabs(ref[i]))
            << n << " " << row << " " << i;
      }
    }
  }
}

TEST(SynthLlamaTest, Vocabulary) {
  TokenizerSpec v = SynthVocabulary(32000);
  ASSERT_EQ(v.tokens.size(), 32000u);
  ASSERT_EQ(v.scores.size(), 32000u);
  ASSERT_EQ(v.types.size(), 32000u);
  EXPECT_EQ(v.kind, TokenizerSpec::Kind::kSentencePiece);
  EXPECT_EQ(v.tokens[0], "<unk>");
  EXPECT_EQ(v.tokens[1], "<s>");
  EXPECT_EQ(v.tokens[2], "</s>");
  EXPECT_EQ(v.types[0], TokenType::kUnknown);
  EXPECT_EQ(v.types[1], TokenType::kControl);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(v.tokens[3 + b], StrFormat("<0x%02X>", b));
    EXPECT_EQ(v.types[3 + b], TokenType::kByte);
  }
  std::set<std::string> unique(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(unique.size(), v.tokens.size());
  // Every printable ASCII character and "▁" + letter is a piece; filler scores decrease.
  for (char c = 0x21; c < 0x7f; ++c) EXPECT_TRUE(unique.count(std::string(1, c))) << c;
  EXPECT_TRUE(unique.count("\xe2\x96\x81"));
  EXPECT_TRUE(unique.count("\xe2\x96\x81t"));
  EXPECT_TRUE(unique.count("th"));
  EXPECT_TRUE(unique.count("the"));
  EXPECT_TRUE(unique.count("\xe2\x96\x81th"));
  for (size_t i = 260; i < v.scores.size(); ++i) ASSERT_LT(v.scores[i], v.scores[i - 1]);
  // Every multi-character filler piece can be built from two shorter pieces.
  for (size_t i = 259; i < v.tokens.size(); ++i) {
    const std::string& p = v.tokens[i];
    size_t first = (p.rfind("\xe2\x96\x81", 0) == 0) ? 3 : 1;
    if (p.size() <= first) continue;
    bool splits = false;
    for (size_t k = first; k < p.size() && !splits; ++k) {
      splits = unique.count(p.substr(0, k)) && unique.count(p.substr(k));
    }
    EXPECT_TRUE(splits) << p;
  }
  EXPECT_EQ(SynthVocabulary(259).tokens.size(), 259u);
  EXPECT_EQ(SynthVocabulary(320).tokens.size(), 320u);
}

TEST(SynthLlamaTest, TinyRoundTripsThroughTheReader) {
  SynthSpec spec = *SynthPreset("tiny");
  std::string path = testing::TempDir() + "/tiny.gguf";
  ASSERT_TRUE(WriteRandomLlamaGguf(spec, DType::kF32, 42, path, nullptr).ok());
  auto m = LoadGgufModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const LlamaConfig& c = m->config;
  const LlamaConfig want = SynthConfig(spec);
  EXPECT_EQ(c.d_model, want.d_model);
  EXPECT_EQ(c.n_layers, want.n_layers);
  EXPECT_EQ(c.n_head, want.n_head);
  EXPECT_EQ(c.n_head_kv, want.n_head_kv);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.d_ff, want.d_ff);
  EXPECT_EQ(c.vocab_size, 320);
  EXPECT_EQ(c.ctx_len, spec.ctx_len);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FALSE(c.tied_output);
  EXPECT_EQ(m->tensors.size(), 2u + 9 * 2 + 1);
  const TokenizerSpec want_tok = SynthVocabulary(320);
  EXPECT_EQ(m->tokenizer.tokens, want_tok.tokens);
  EXPECT_EQ(m->tokenizer.scores, want_tok.scores);
  EXPECT_EQ(m->tokenizer.types, want_tok.types);
  EXPECT_EQ(m->tokenizer.bos_id, 1);

  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->GetU64("weir.synth.seed"), 42u);
  // The weights are exactly SynthRandomRow of (seed, tensor index in file order, row).
  for (size_t i = 0; i < m->tensor_order.size(); ++i) {
    const TensorView& v = m->tensors.at(m->tensor_order[i]);
    std::vector<float> want_row(static_cast<size_t>(v.cols()));
    for (int64_t r : {int64_t{0}, v.rows() / 2, v.rows() - 1}) {
      if (v.shape.ndim == 1) {
        for (int64_t j = 0; j < v.cols(); ++j) EXPECT_EQ(v.f32()[j], 1.0f);
        continue;
      }
      SynthRandomRow(42, i, static_cast<uint64_t>(r), want_row.data(), v.cols());
      EXPECT_EQ(std::memcmp(v.row(r), want_row.data(), v.row_bytes()), 0) << m->tensor_order[i];
    }
  }
}

// RoPE scaling round trip: the file states rope.scaling linear and holds rope_freqs.weight; the
// reader gives both back, the other tensors are the same bytes as without scaling (rope_freqs
// is written last), and writing the model again (weir convert) keeps both.
TEST(SynthLlamaTest, RopeScalingRoundTrips) {
  const std::string dir = testing::TempDir();
  SynthSpec plain = *SynthPreset("tiny");
  SynthSpec spec = plain;
  spec.rope_scaling_factor = 4.0f;
  spec.rope_freqs = {1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 8.0f, 8.0f};  // head_dim 16
  ASSERT_TRUE(WriteRandomLlamaGguf(spec, DType::kF32, 5, dir + "/s.gguf", nullptr).ok());
  ASSERT_TRUE(WriteRandomLlamaGguf(plain, DType::kF32, 5, dir + "/p.gguf", nullptr).ok());
  auto m = LoadGgufModel(dir + "/s.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto p = LoadGgufModel(dir + "/p.gguf");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(m->config.rope_scaling_factor, 4.0f);
  EXPECT_EQ(p->config.rope_scaling_factor, 1.0f);
  const TensorView* f = m->Find("rope_freqs.weight");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(m->tensor_order.back(), "rope_freqs.weight");
  ASSERT_EQ(f->shape, Shape{8});
  EXPECT_EQ(std::vector<float>(f->f32(), f->f32() + 8), spec.rope_freqs);
  EXPECT_EQ(p->Find("rope_freqs.weight"), nullptr);
  for (const auto& [name, v] : p->tensors) {
    const TensorView* w = m->Find(name);
    ASSERT_NE(w, nullptr) << name;
    EXPECT_EQ(std::memcmp(v.data, w->data, v.nbytes()), 0) << name;
  }
  ASSERT_TRUE(WriteLlamaGguf(*m, dir + "/again.gguf", std::nullopt).ok());
  auto again = LoadGgufModel(dir + "/again.gguf");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->config.rope_scaling_factor, 4.0f);
  ASSERT_NE(again->Find("rope_freqs.weight"), nullptr);
  EXPECT_EQ(std::memcmp(again->Find("rope_freqs.weight")->data, f->data, 32), 0);

  // Refused specs: factors of the wrong count or sign, or on an architecture without them.
  SynthSpec bad = spec;
  bad.rope_freqs.pop_back();
  EXPECT_FALSE(ValidateSynthSpec(bad, DType::kF32).ok());
  bad = spec, bad.rope_freqs[2] = -1.0f;
  EXPECT_FALSE(ValidateSynthSpec(bad, DType::kF32).ok());
  bad = spec, bad.arch = "qwen2";
  EXPECT_FALSE(ValidateSynthSpec(bad, DType::kF32).ok());
  bad = spec, bad.rope_scaling_factor = 0.0f;
  EXPECT_FALSE(ValidateSynthSpec(bad, DType::kF32).ok());
}

TEST(SynthLlamaTest, EveryTypeLoadsAndMatchesTheReferenceQuantization) {
  SynthSpec spec = *SynthPreset("tiny");
  for (DType t : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    std::string path = testing::TempDir() + "/tiny.gguf";
    ASSERT_TRUE(WriteRandomLlamaGguf(spec, t, 9, path, nullptr).ok());
    auto m = LoadGgufModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (size_t i = 0; i < m->tensor_order.size(); ++i) {
      const TensorView& v = m->tensors.at(m->tensor_order[i]);
      if (v.shape.ndim == 1) {
        EXPECT_EQ(v.dtype, DType::kF32);
        continue;
      }
      EXPECT_EQ(v.dtype, t) << m->tensor_order[i];
      std::vector<float> f(static_cast<size_t>(v.cols()));
      std::vector<uint8_t> q(v.row_bytes());
      int64_t r = v.rows() - 1;
      SynthRandomRow(9, i, static_cast<uint64_t>(r), f.data(), v.cols());
      QuantizeRow(t, f.data(), q.data(), v.cols());
      EXPECT_EQ(std::memcmp(v.row(r), q.data(), q.size()), 0) << m->tensor_order[i];
    }
    auto g = GgufFile::Open(path);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(*g->GetU32("general.file_type"), t == DType::kQ8_0   ? 7u
                                               : t == DType::kQ4_0 ? 2u
                                               : t == DType::kF16  ? 1u
                                                                   : 32u);
  }
}

TEST(SynthLlamaTest, SameSeedSameBytesAnyThreadCount) {
  SynthSpec spec = *SynthPreset("tiny");
  std::string dir = testing::TempDir();
  std::vector<double> progress;
  ASSERT_TRUE(WriteRandomLlamaGguf(spec, DType::kQ8_0, 7, dir + "/a.gguf", [&](double p) {
                progress.push_back(p);
              }).ok());
  ThreadPool pool(2);
  ASSERT_TRUE(WriteRandomLlamaGguf(spec, DType::kQ8_0, 7, dir + "/b.gguf", nullptr, &pool).ok());
  ASSERT_TRUE(WriteRandomLlamaGguf(spec, DType::kQ8_0, 8, dir + "/c.gguf", nullptr).ok());
  std::string a = testing::ReadFile(dir + "/a.gguf");
  ASSERT_GT(a.size(), 100000u);
  EXPECT_EQ(a, testing::ReadFile(dir + "/b.gguf"));
  std::string c = testing::ReadFile(dir + "/c.gguf");
  EXPECT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back(), 1.0);
}

}  // namespace
}  // namespace weir::format
