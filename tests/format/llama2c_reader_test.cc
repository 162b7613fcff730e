#include "format/llama2c_reader.h"

#include <gtest/gtest.h>

#include <cstring>

#include "testing/testing.h"
#include "tiny_model_files.h"

namespace weir::format {
namespace {

using testdata::Expected;
using testdata::TinyDims;

// Every expected tensor is present with the stored values, and nothing else is.
void ExpectTensorsMatch(const ModelFile& m, const Expected& e) {
  EXPECT_EQ(m.tensors.size(), e.values.size());
  for (const auto& [name, vals] : e.values) {
    const TensorView* t = m.Find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, DType::kF32) << name;
    EXPECT_EQ(t->shape, e.shapes.at(name)) << name << " " << t->shape.ToString();
    ASSERT_EQ(t->shape.numel(), static_cast<int64_t>(vals.size())) << name;
    EXPECT_EQ(std::memcmp(t->data, vals.data(), vals.size() * 4), 0) << name;
  }
}

std::string WriteModel(const std::string& dir, const std::string& bytes,
                       const std::string& name = "model.bin") {
  const std::string path = dir + "/" + name;
  testdata::WriteFresh(path, bytes);
  return path;
}

TEST(Llama2cReaderTest, SharedClassifierSynthetic) {
  TinyDims d;
  Expected e;
  const std::string dir = testing::TempDir();
  const std::string path = WriteModel(dir, testdata::MakeLlama2c(d, &e));
  auto r = LoadLlama2cModel(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelFile& m = *r;
  EXPECT_EQ(m.format, FileFormat::kLlama2c);
  const LlamaConfig& c = m.config;
  EXPECT_EQ(c.d_model, 16);
  EXPECT_EQ(c.d_ff, 24);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.rope_dim, 4);
  EXPECT_EQ(c.vocab_size, 40);
  EXPECT_EQ(c.ctx_len, 8);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_TRUE(c.tied_output);
  ASSERT_EQ(c.layers.size(), 2u);
  EXPECT_EQ(c.layers[1].d_ff, 24);
  EXPECT_EQ(m.tokenizer.kind, TokenizerSpec::Kind::kNone);  // none beside it
  ExpectTensorsMatch(m, e);
  EXPECT_EQ(m.tensor_order.size(), m.tensors.size());
  EXPECT_EQ(m.tensor_order.front(), "token_embd.weight");
  EXPECT_EQ(m.tensor_order.back(), "output_norm.weight");
  EXPECT_TRUE(ValidateLlama(m).ok());
}

TEST(Llama2cReaderTest, UnsharedClassifierAndTokenizerBeside) {
  TinyDims d;
  d.shared = false;
  d.n_kv_heads = 4;  // no GQA
  d.n_layers = 3;
  Expected e;
  const std::string dir = testing::TempDir();
  const std::string path = WriteModel(dir, testdata::MakeLlama2c(d, &e));
  testdata::WriteFresh(dir + "/tok40.bin",
                       testdata::MakeLlama2cTokenizer(testdata::Llama2cPieces(40)));
  auto r = LoadLlama2cModel(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->config.tied_output);
  EXPECT_EQ(r->config.n_head_kv, 4);
  ASSERT_NE(r->Find("output.weight"), nullptr);
  ExpectTensorsMatch(*r, e);
  EXPECT_EQ(r->tokenizer.kind, TokenizerSpec::Kind::kSentencePiece);
  EXPECT_EQ(r->tokenizer.tokens.size(), 40u);
  EXPECT_EQ(r->tokenizer.tokens[1], "<s>");

  // An explicit tokenizer_path wins over the file beside the model.
  testdata::WriteFresh(dir + "/other.bin",
                       testdata::MakeLlama2cTokenizer(testdata::Llama2cPieces(40)));
  LoadOptions opts;
  opts.tokenizer_path = dir + "/missing.bin";
  auto missing = LoadLlama2cModel(path, opts);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.bin"), std::string::npos);
  opts.tokenizer_path = dir + "/other.bin";
  EXPECT_TRUE(LoadLlama2cModel(path, opts).ok());
}

TEST(Llama2cReaderTest, TokenizerOfAnotherModelIsAnError) {
  TinyDims d;
  Expected e;
  const std::string dir = testing::TempDir();
  const std::string path = WriteModel(dir, testdata::MakeLlama2c(d, &e));
  testdata::WriteFresh(dir + "/tokenizer.bin",
                       testdata::MakeLlama2cTokenizer(testdata::Llama2cPieces(50)));
  auto r = LoadLlama2cModel(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.bin"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("trailing"), std::string::npos) << r.status().ToString();
}

TEST(Llama2cReaderTest, RealStories260K) {
  const std::string path = testing::SharedPath("models/stories260K/stories260K.bin");
  if (!testing::FileExists(path)) GTEST_SKIP() << path << " absent";
  auto r = LoadLlama2cModel(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelFile& m = *r;
  const LlamaConfig& c = m.config;
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.d_ff, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.ctx_len, 512);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_EQ(m.tensors.size(), 2u + 9u * 5u);
  // tok512.bin is found beside it.
  EXPECT_EQ(m.tokenizer.kind, TokenizerSpec::Kind::kSentencePiece);
  EXPECT_EQ(m.tokenizer.tokens.size(), 512u);
  // Views are the file's bytes: compare against an independent read at the documented offsets.
  const std::string bytes = testing::ReadFile(path);
  const TensorView* emb = m.Find("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(emb->data) % 4, 0u);
  EXPECT_EQ(std::memcmp(emb->data, bytes.data() + 28, 512 * 64 * 4), 0);
  // rms_final sits right before the freq_cis tables and the end of the file.
  const size_t final_off = bytes.size() - 2 * 512 * 4 * 4 - 64 * 4;
  EXPECT_EQ(std::memcmp(m.Find("output_norm.weight")->data, bytes.data() + final_off, 64 * 4), 0);
  // blk.4.ffn_up (w3, last layer) ends right before rms_final.
  const TensorView* up4 = m.Find("blk.4.ffn_up.weight");
  ASSERT_NE(up4, nullptr);
  EXPECT_EQ(up4->shape, (Shape{172, 64}));
  EXPECT_EQ(std::memcmp(up4->data, bytes.data() + final_off - 172 * 64 * 4, 172 * 64 * 4), 0);
}

TEST(Llama2cReaderTest, HeaderErrorsNameTheField) {
  TinyDims d;
  Expected e;
  const std::string good = testdata::MakeLlama2c(d, &e);
  const std::string dir = testing::TempDir();
  struct Case {
    int field;  // index of the i32 in the header
    int32_t value;
    const char* needle;
  } cases[] = {
      {0, 0, "dim = 0"},
      {0, -16, "dim = -16"},
      {1, 0, "hidden_dim = 0"},
      {2, 0, "n_layers = 0"},
      {2, 1 << 30, "n_layers = 1073741824"},
      {3, 0, "n_heads = 0"},
      {3, 3, "not a multiple of n_heads 3"},
      {3, 8, "head size 2"},  // 16 / 8 = 2 is even: passes; n_kv 2 divides 8 -> size error
      {4, 8, "n_kv_heads = 8"},
      {4, 3, "not a multiple of n_kv_heads 3"},
      {5, 0, "|vocab_size| = 0"},
      {5, INT32_MIN, "|vocab_size| = 2147483648"},
      {6, 0, "seq_len = 0"},
  };
  for (const Case& c : cases) {
    std::string bytes = good;
    std::memcpy(&bytes[4 * c.field], &c.value, 4);
    const std::string path = WriteModel(dir, bytes);
    auto r = LoadLlama2cModel(path);
    ASSERT_FALSE(r.ok()) << c.needle;
    const std::string& msg = r.status().message();
    if (std::string(c.needle) == "head size 2") {
      // dim 16 / 8 heads = 2 is fine; the file size no longer matches and says so.
      EXPECT_NE(msg.find("should be"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    }
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  // Odd head size.
  std::string odd = good;
  int32_t dim = 12, heads = 4;  // head size 3
  std::memcpy(&odd[0], &dim, 4);
  std::memcpy(&odd[12], &heads, 4);
  auto r = LoadLlama2cModel(WriteModel(dir, odd));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("must be even"), std::string::npos) << r.status().ToString();
  // Version 1/2 exports.
  std::string v1 = good;
  std::memcpy(&v1[0], "ak42", 4);
  r = LoadLlama2cModel(WriteModel(dir, v1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(r.status().message().find("ak42"), std::string::npos);
}

TEST(Llama2cReaderTest, WrongSizeGivesExpectedAndActual) {
  TinyDims d;
  Expected e;
  const std::string good = testdata::MakeLlama2c(d, &e);
  const std::string dir = testing::TempDir();
  // Truncated at many offsets (all of them past the header), and one byte too long.
  for (size_t cut = 28; cut < good.size(); cut += 97) {
    const std::string path = WriteModel(dir, good.substr(0, cut));
    auto r = LoadLlama2cModel(path);
    ASSERT_FALSE(r.ok()) << cut;
    const std::string msg = r.status().message();
    EXPECT_NE(msg.find("should be " + std::to_string(good.size()) + " bytes"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("has " + std::to_string(cut) + " bytes"), std::string::npos) << msg;
  }
  for (size_t cut = 0; cut < 28; ++cut) {
    auto r = LoadLlama2cModel(WriteModel(dir, good.substr(0, cut)));
    ASSERT_FALSE(r.ok()) << cut;
  }
  auto r = LoadLlama2cModel(WriteModel(dir, good + "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorrupt);
  auto missing = LoadLlama2cModel(dir + "/nope.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos);
}

}  // namespace
}  // namespace weir::format
