#include "format/model_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "testing/testing.h"
#include "tiny_model_files.h"

namespace weir::format {
namespace {

using testdata::Expected;
using testdata::TinyDims;

TEST(ModelFileTest, FormatNames) {
  EXPECT_STREQ(FileFormatName(FileFormat::kGguf), "gguf");
  EXPECT_STREQ(FileFormatName(FileFormat::kSafetensors), "safetensors");
  EXPECT_STREQ(FileFormatName(FileFormat::kLlama2c), "llama2.c");
}

// ---- sniffing ----

TEST(LoadModelTest, SniffsSyntheticFiles) {
  TinyDims d;
  Expected e;
  const std::string dir = testing::TempDir();
  // A llama2.c checkpoint under a name that says nothing.
  testdata::WriteFresh(dir + "/weights.dat", testdata::MakeLlama2c(d, &e));
  auto r = LoadModel(dir + "/weights.dat");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, FileFormat::kLlama2c);
  // A safetensors file without the extension is recognized by its header.
  const std::string st_dir = testing::TempDir();
  Expected e2;
  testdata::WriteFresh(st_dir + "/weights.dat",
                       testdata::MakeSafetensors(testdata::HfLlamaTensors(d, true, true, &e2)));
  testdata::WriteFresh(st_dir + "/config.json", testdata::HfConfig(d, false).dump());
  r = LoadModel(st_dir + "/weights.dat");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, FileFormat::kSafetensors);
  // The directory form.
  std::rename((st_dir + "/weights.dat").c_str(), (st_dir + "/model.safetensors").c_str());
  r = LoadModel(st_dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, FileFormat::kSafetensors);
}

TEST(LoadModelTest, RejectsWhatIsNotAModel) {
  const std::string dir = testing::TempDir();
  auto missing = LoadModel(dir + "/does_not_exist.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find("does_not_exist.bin"), std::string::npos);

  auto empty_dir = LoadModel(dir);
  ASSERT_FALSE(empty_dir.ok());
  EXPECT_EQ(empty_dir.status().code(), Status::Code::kNotFound);

  testdata::WriteFresh(dir + "/empty.bin", "");
  auto empty = LoadModel(dir + "/empty.bin");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("not a GGUF, safetensors or llama2.c model"),
            std::string::npos);

  testdata::WriteFresh(dir + "/readme.txt", "Hello, this is a text file and not a model at all.\n");
  auto text = LoadModel(dir + "/readme.txt");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("not a GGUF, safetensors or llama2.c model"),
            std::string::npos)
      << text.status().ToString();
  EXPECT_NE(text.status().message().find("readme.txt"), std::string::npos);

  // Random bytes of many sizes are never taken for a model.
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    std::string bytes(rng() % 4096, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    testdata::WriteFresh(dir + "/random.bin", bytes);
    auto r = LoadModel(dir + "/random.bin");
    ASSERT_FALSE(r.ok());
    EXPECT_FALSE(r.status().message().empty());
  }
}

// ---- real models through LoadModel, and agreement between formats ----

void ExpectSameTensor(const ModelFile& a, const ModelFile& b, const std::string& name) {
  const TensorView* x = a.Find(name);
  const TensorView* y = b.Find(name);
  ASSERT_NE(x, nullptr) << name;
  ASSERT_NE(y, nullptr) << name;
  ASSERT_EQ(x->shape, y->shape) << name;
  ASSERT_EQ(x->dtype, DType::kF32);
  ASSERT_EQ(y->dtype, DType::kF32);
  EXPECT_EQ(std::memcmp(x->data, y->data, x->nbytes()), 0) << name;
}

TEST(LoadModelTest, Stories260KLlama2cMatchesItsGguf) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  const std::string gguf = testing::SharedPath("models/stories260K/stories260K-F32.gguf");
  if (!testing::FileExists(bin)) GTEST_SKIP() << bin << " absent";
  auto a = LoadModel(bin);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->format, FileFormat::kLlama2c);
  EXPECT_EQ(a->config.d_model, 64);
  EXPECT_EQ(a->config.n_layers, 5);
  EXPECT_EQ(a->config.n_head, 8);
  EXPECT_EQ(a->config.n_head_kv, 4);
  EXPECT_EQ(a->config.vocab_size, 512);
  EXPECT_TRUE(a->config.tied_output);
  EXPECT_EQ(a->tokenizer.tokens.size(), 512u);
  if (!testing::FileExists(gguf)) GTEST_SKIP() << gguf << " absent";
  auto b = LoadModel(gguf);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->format, FileFormat::kGguf);
  // The converter kept llama2.c's adjacent-pair layout: every tensor is byte-identical.
  for (const auto& [name, view] : a->tensors) ExpectSameTensor(*a, *b, name);
  // Its vocabulary is tok512.bin, spaces turned into "▁" as ours are.
  ASSERT_EQ(b->tokenizer.tokens.size(), a->tokenizer.tokens.size());
  for (size_t i = 0; i < a->tokenizer.tokens.size(); ++i) {
    ASSERT_EQ(a->tokenizer.tokens[i], b->tokenizer.tokens[i]) << i;
  }
}

TEST(LoadModelTest, TinyStoriesSafetensorsMatchesItsGguf) {
  const std::string dir = testing::SharedPath("models/tinystories-656k");
  const std::string gguf = dir + "/tinystories-656k-F32.gguf";
  if (!testing::FileExists(dir + "/model.safetensors")) GTEST_SKIP() << dir << " absent";
  auto a = LoadModel(dir);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->format, FileFormat::kSafetensors);
  EXPECT_EQ(a->config.rope_style, RopeStyle::kRotateHalf);
  auto a2 = LoadModel(dir + "/model.safetensors");
  ASSERT_TRUE(a2.ok()) << a2.status().ToString();
  if (!testing::FileExists(gguf)) GTEST_SKIP() << gguf << " absent";
  auto b = LoadModel(gguf);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->config.d_model, a->config.d_model);
  EXPECT_EQ(b->config.d_ff, a->config.d_ff);
  EXPECT_EQ(b->config.n_head_kv, a->config.n_head_kv);
  EXPECT_EQ(b->config.vocab_size, a->config.vocab_size);
  EXPECT_FLOAT_EQ(b->config.rms_eps, a->config.rms_eps);
  EXPECT_TRUE(b->config.tied_output);
  // q/k were permuted for GGUF's RoPE layout; every other tensor is byte-identical.
  for (const auto& [name, view] : a->tensors) {
    if (name.find("attn_q") != std::string::npos || name.find("attn_k") != std::string::npos) {
      continue;
    }
    ExpectSameTensor(*a, *b, name);
  }
  // attn_q rows are a permutation within each head: HF row (h, half, i) is GGUF row
  // (h, 2 i + half) with head_dim 16.
  const TensorView* qa = a->Find("blk.1.attn_q.weight");
  const TensorView* qb = b->Find("blk.1.attn_q.weight");
  ASSERT_TRUE(qa && qb);
  const int hd = 16;
  for (int h = 0; h < 8; ++h) {
    for (int half = 0; half < 2; ++half) {
      for (int i = 0; i < hd / 2; ++i) {
        const int row_hf = h * hd + half * hd / 2 + i, row_gguf = h * hd + 2 * i + half;
        ASSERT_EQ(std::memcmp(qa->row(row_hf), qb->row(row_gguf), qa->row_bytes()), 0)
            << h << " " << half << " " << i;
      }
    }
  }
}

TEST(LoadModelTest, TokenizerOverrideForGguf) {
  const std::string gguf = testing::SharedPath("models/stories260K/stories260K-F32.gguf");
  const std::string tok = testing::SharedPath("models/stories260K/tok512.bin");
  if (!testing::FileExists(gguf) || !testing::FileExists(tok)) GTEST_SKIP();
  LoadOptions opts;
  opts.tokenizer_path = tok;
  auto r = LoadModel(gguf, opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tokenizer.kind, TokenizerSpec::Kind::kSentencePiece);
  EXPECT_EQ(r->tokenizer.scores[260], -1.0f);  // tok512.bin's score
}

// ---- ValidateLlama ----

class ValidateLlamaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::TempDir();
    Expected e;
    testdata::WriteFresh(dir + "/model.bin", testdata::MakeLlama2c(TinyDims(), &e));
    testdata::WriteFresh(dir + "/tok40.bin",
                         testdata::MakeLlama2cTokenizer(testdata::Llama2cPieces(40)));
    auto r = LoadModel(dir + "/model.bin");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    model_ = std::move(r).value();
    ASSERT_TRUE(ValidateLlama(model_).ok());
  }
  // Validation of a modified copy fails with a message holding every needle and the path.
  void ExpectInvalid(const std::function<void(ModelFile&)>& change,
                     std::vector<std::string> needles) {
    ModelFile m = model_;
    change(m);
    Status st = ValidateLlama(m);
    ASSERT_FALSE(st.ok()) << needles[0];
    needles.push_back(m.path);
    for (const auto& n : needles) {
      EXPECT_NE(st.message().find(n), std::string::npos) << st.ToString() << " lacks " << n;
    }
  }
  ModelFile model_;
};

TEST_F(ValidateLlamaTest, ConfigSanity) {
  ExpectInvalid([](ModelFile& m) { m.config.d_model = 0; }, {"d_model = 0"});
  ExpectInvalid([](ModelFile& m) { m.config.n_layers = 3; },
                {"2 per-layer entries for n_layers 3"});
  ExpectInvalid([](ModelFile& m) { m.config.layers.pop_back(); }, {"1 per-layer entries"});
  ExpectInvalid([](ModelFile& m) { m.config.n_head_kv = 3; }, {"not a multiple of n_head_kv 3"});
  ExpectInvalid([](ModelFile& m) { m.config.n_head_kv = 8; }, {"n_head_kv = 8"});
  ExpectInvalid([](ModelFile& m) { m.config.layers[1].n_head_kv = 3; }, {"layer 1", "n_head_kv 3"});
  ExpectInvalid([](ModelFile& m) { m.config.layers[1].d_ff = 0; }, {"layers[1].d_ff = 0"});
  ExpectInvalid([](ModelFile& m) { m.config.rope_dim = 3; }, {"rope_dim 3 is odd"});
  ExpectInvalid([](ModelFile& m) { m.config.rope_dim = 8; }, {"rope_dim = 8"});
  ExpectInvalid([](ModelFile& m) { m.config.rms_eps = std::nanf(""); }, {"rms_eps"});
  ExpectInvalid([](ModelFile& m) { m.config.rope_theta = INFINITY; }, {"rope_theta"});
  ExpectInvalid([](ModelFile& m) { m.config.vocab_size = 0; }, {"vocab_size = 0"});
  ExpectInvalid([](ModelFile& m) { m.config.d_model = 1 << 30; }, {"d_model = 1073741824"});
}

TEST_F(ValidateLlamaTest, TensorsPresentWithExactShapes) {
  ExpectInvalid([](ModelFile& m) { m.tensors.erase("blk.1.ffn_up.weight"); },
                {"blk.1.ffn_up.weight is missing", "[24, 16]"});
  ExpectInvalid(
      [](ModelFile& m) {
        m.tensors["blk.0.attn_k.weight"].shape = Shape{16, 16};
      },
      {"blk.0.attn_k.weight has shape [16, 16]", "expected", "[8, 16]"});
  ExpectInvalid(
      [](ModelFile& m) {
        m.tensors["output_norm.weight"].shape = Shape{1, 16};
      },
      {"output_norm.weight", "[1, 16]", "[16]"});
  ExpectInvalid([](ModelFile& m) { m.tensors["blk.1.ffn_norm.weight"].dtype = DType::kF16; },
                {"blk.1.ffn_norm.weight is F16"});
  ExpectInvalid([](ModelFile& m) { m.tensors["blk.0.ffn_down.weight"].dtype = DType::kQ8_0; },
                {"blk.0.ffn_down.weight", "not whole blocks of 32"});
  ExpectInvalid([](ModelFile& m) { m.tensors["output.weight"] = m.tensors["token_embd.weight"]; },
                {"tied", "output.weight is present"});
  ExpectInvalid([](ModelFile& m) { m.config.tied_output = false; }, {"output.weight is missing"});
  // A per-layer config (pruned model) is checked per layer.
  ExpectInvalid([](ModelFile& m) { m.config.layers[1].d_ff = 20; },
                {"blk.1.ffn_gate.weight has shape [24, 16]", "[20, 16]"});
  ModelFile pruned = model_;
  pruned.config.layers[1].d_ff = 20;
  for (const char* n : {"blk.1.ffn_gate.weight", "blk.1.ffn_up.weight"}) {
    pruned.tensors[n].shape = Shape{20, 16};
  }
  pruned.tensors["blk.1.ffn_down.weight"].shape = Shape{16, 20};
  EXPECT_TRUE(ValidateLlama(pruned).ok());
  // Extra tensors are allowed.
  ModelFile extra = model_;
  extra.tensors["blk.0.attn_rot_embd"] = extra.tensors["output_norm.weight"];
  EXPECT_TRUE(ValidateLlama(extra).ok());
}

// rope_freqs.weight: optional, F32 [rope_dim / 2], every factor finite and > 0, and only on an
// architecture whose table has it; the linear scaling factor is finite and > 0.
TEST_F(ValidateLlamaTest, RopeScaling) {
  const int half = model_.config.rope_dim / 2;
  static std::vector<float> good, bad_shape, zero, nan, f16_bits;
  good.assign(static_cast<size_t>(half), 2.0f);
  bad_shape.assign(static_cast<size_t>(half + 1), 2.0f);
  zero = good, zero[1] = 0.0f;
  nan = good, nan[0] = std::nanf("");
  auto with = [&](std::vector<float>* v, DType t = DType::kF32) {
    return [v, t](ModelFile& m) {
      m.tensors["rope_freqs.weight"] =
          TensorView{t, Shape{static_cast<int64_t>(v->size())}, v->data()};
    };
  };
  ModelFile ok = model_;
  with(&good)(ok);
  EXPECT_TRUE(ValidateLlama(ok).ok()) << ValidateLlama(ok).ToString();
  ExpectInvalid(with(&bad_shape),
                {"rope_freqs.weight has shape [" + std::to_string(half + 1) + "]", "rope_dim / 2"});
  ExpectInvalid(with(&zero), {"rope_freqs.weight[1] = 0", "finite and > 0"});
  ExpectInvalid(with(&nan), {"rope_freqs.weight[0] = nan"});
  f16_bits.assign(static_cast<size_t>(half), 0.0f);
  ExpectInvalid(
      [&](ModelFile& m) {
        m.tensors["rope_freqs.weight"] =
            TensorView{DType::kF16, Shape{static_cast<int64_t>(half)}, f16_bits.data()};
      },
      {"RoPE factor tensor rope_freqs.weight is F16"});
  // qwen2 (llama.cpp reads rope_freqs for llama only).
  ExpectInvalid(
      [&](ModelFile& m) {
        with(&good)(m);
        m.config.arch = FindArch("qwen2");
      },
      {"rope_freqs.weight", "architecture qwen2 does not read it"});
  ExpectInvalid([](ModelFile& m) { m.config.rope_scaling_factor = 0.0f; },
                {"rope_scaling_factor = 0"});
  ExpectInvalid([](ModelFile& m) { m.config.rope_scaling_factor = INFINITY; },
                {"rope_scaling_factor = inf"});
}

TEST_F(ValidateLlamaTest, TokenizerAgainstVocab) {
  ExpectInvalid([](ModelFile& m) { m.tokenizer.tokens.push_back("extra"); },
                {"41 tokens", "vocab_size is 40"});
  ExpectInvalid([](ModelFile& m) { m.tokenizer.bos_id = 40; }, {"bos_id 40"});
  ExpectInvalid([](ModelFile& m) { m.tokenizer.eos_id = -2; }, {"eos_id -2"});
  ExpectInvalid([](ModelFile& m) { m.tokenizer.scores.pop_back(); }, {"39 scores"});
  ExpectInvalid([](ModelFile& m) { m.tokenizer.tokens.clear(); }, {"no tokens"});
  // Without a tokenizer, special ids are checked against vocab_size.
  ExpectInvalid(
      [](ModelFile& m) {
        m.tokenizer = TokenizerSpec();
        m.tokenizer.bos_id = 40;
      },
      {"bos_id 40"});
  // A tokenizer smaller than the embedding is allowed (padded vocabularies).
  ModelFile m = model_;
  m.tokenizer.tokens.resize(30);
  m.tokenizer.scores.resize(30);
  m.tokenizer.types.resize(30);
  EXPECT_TRUE(ValidateLlama(m).ok());
}

}  // namespace
}  // namespace weir::format
