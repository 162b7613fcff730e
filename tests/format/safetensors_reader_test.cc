#include "format/safetensors_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/hf_config.h"
#include "format/llama_gguf_writer.h"
#include "format/weir_pack_reader.h"
#include "format/weir_pack_writer.h"
#include "testing/testing.h"
#include "tiny_model_files.h"

namespace weir::format {
namespace {

using testdata::Expected;
using testdata::HfConfig;
using testdata::HfLlamaTensors;
using testdata::MakeSafetensors;
using testdata::StTensor;
using testdata::TinyDims;

void ExpectValues(const ModelFile& m, const std::string& name, const std::vector<float>& vals,
                  const Shape& shape) {
  const TensorView* t = m.Find(name);
  ASSERT_NE(t, nullptr) << name;
  ASSERT_EQ(t->dtype, DType::kF32) << name;
  EXPECT_EQ(t->shape, shape) << name << " " << t->shape.ToString();
  ASSERT_EQ(t->shape.numel(), static_cast<int64_t>(vals.size()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 4, 0u) << name;
  EXPECT_EQ(std::memcmp(t->data, vals.data(), vals.size() * 4), 0) << name;
}

void ExpectAll(const ModelFile& m, const Expected& e) {
  for (const auto& [name, vals] : e.values) ExpectValues(m, name, vals, e.shapes.at(name));
}

// Writes model.safetensors + config.json (+ tokenizer.json) into a fresh directory.
std::string WriteModelDir(const std::string& st_bytes, const nlohmann::json& config,
                          const nlohmann::json* tokenizer = nullptr) {
  const std::string dir = testing::TempDir();
  testdata::WriteFresh(dir + "/model.safetensors", st_bytes);
  testdata::WriteFresh(dir + "/config.json", config.dump(2));
  if (tokenizer) testdata::WriteFresh(dir + "/tokenizer.json", tokenizer->dump());
  return dir;
}

TEST(SafetensorsReaderTest, UntiedSyntheticModel) {
  TinyDims d;
  Expected e;
  auto tensors = HfLlamaTensors(d, /*with_embed=*/true, /*with_head=*/true, &e);
  nlohmann::json tok = testdata::HfTokenizerJson(d.vocab);
  const std::string dir = WriteModelDir(MakeSafetensors(tensors), HfConfig(d, false), &tok);
  auto r = LoadSafetensorsModel(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelFile& m = *r;
  EXPECT_EQ(m.format, FileFormat::kSafetensors);
  EXPECT_EQ(m.config.d_model, 16);
  EXPECT_EQ(m.config.n_layers, 2);
  EXPECT_EQ(m.config.n_head, 4);
  EXPECT_EQ(m.config.n_head_kv, 2);
  EXPECT_EQ(m.config.head_dim, 4);
  EXPECT_EQ(m.config.rope_dim, 4);
  EXPECT_EQ(m.config.d_ff, 24);
  EXPECT_EQ(m.config.vocab_size, 40);
  EXPECT_EQ(m.config.ctx_len, 8);
  EXPECT_FLOAT_EQ(m.config.rms_eps, 1e-5f);
  EXPECT_EQ(m.config.rope_style, RopeStyle::kRotateHalf);
  EXPECT_FALSE(m.config.tied_output);
  EXPECT_EQ(m.tensors.size(), e.values.size());
  ExpectAll(m, e);
  EXPECT_EQ(m.tensor_order.size(), m.tensors.size());
  EXPECT_EQ(m.tensor_order.front(), "token_embd.weight");  // file order
  EXPECT_EQ(m.tokenizer.kind, TokenizerSpec::Kind::kBpeMerges);
  EXPECT_EQ(m.tokenizer.bos_id, 1);
  EXPECT_EQ(m.tokenizer.eos_id, 2);  // from config.json: tokenizer.json alone names none
  // The same weights through the .safetensors file path.
  auto r2 = LoadSafetensorsModel(dir + "/model.safetensors");
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  ExpectAll(*r2, e);
}

// config.json rope_scaling: "linear" sets the factor; "llama3" becomes rope_freqs.weight, Llama
// 3.1's factors, here checked against transformers' formulation (the smoothed inverse frequency
// (1 - s) * inv / factor + s * inv in the middle band; the factor is inv / smoothed).
TEST(SafetensorsReaderTest, RopeScaling) {
  TinyDims d;
  Expected e;
  auto tensors = HfLlamaTensors(d, true, true, &e);
  nlohmann::json cfg = HfConfig(d, false);
  cfg["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  auto lin = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), cfg));
  ASSERT_TRUE(lin.ok()) << lin.status().ToString();
  EXPECT_EQ(lin->config.rope_scaling_factor, 4.0f);
  EXPECT_EQ(lin->Find("rope_freqs.weight"), nullptr);

  cfg["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 1024}};
  auto l3 = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), cfg));
  ASSERT_TRUE(l3.ok()) << l3.status().ToString();
  EXPECT_EQ(l3->config.rope_scaling_factor, 1.0f);
  const TensorView* f = l3->Find("rope_freqs.weight");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->shape, Shape{d.dim / d.n_heads / 2});
  const int hd = d.dim / d.n_heads;
  for (int i = 0; i < hd / 2; ++i) {
    const double inv = std::pow(10000.0, -2.0 * i / hd), wavelen = 2 * M_PI / inv;
    double scaled = wavelen > 1024 / 1.0 ? inv / 8 : inv;
    const double s = (1024 / wavelen - 1.0) / (4.0 - 1.0);
    if (wavelen >= 1024 / 4.0 && wavelen <= 1024 / 1.0) scaled = (1 - s) * scaled / 8 + s * scaled;
    EXPECT_NEAR(f->f32()[i], inv / scaled, 1e-5 * inv / scaled) << "pair " << i;
  }
  // head_dim 4, base 1e4: wavelengths 6.3 (kept) and 628 (in the band 256..1024).
  EXPECT_EQ(f->f32()[0], 1.0f);
  EXPECT_GT(f->f32()[1], 1.5f);
  EXPECT_LT(f->f32()[1], 8.0f);
}

TEST(SafetensorsReaderTest, TiedEmbeddingsAllForms) {
  TinyDims d;
  {  // Both stored, tie_word_embeddings: token_embd is embed_tokens, no output.weight.
    Expected e;
    auto tensors = HfLlamaTensors(d, true, true, &e);
    auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), HfConfig(d, true)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->config.tied_output);
    EXPECT_EQ(r->Find("output.weight"), nullptr);
    ExpectValues(*r, "token_embd.weight", e.values["token_embd.weight"], Shape{40, 16});
  }
  {  // Only lm_head stored, aliased in __metadata__ (TinyStories-656K's layout).
    Expected e;
    auto tensors = HfLlamaTensors(d, false, true, &e);
    std::map<std::string, std::string> meta = {{"format", "pt"},
                                               {"model.embed_tokens.weight", "lm_head.weight"}};
    auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors, meta), HfConfig(d, true)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->config.tied_output);
    EXPECT_EQ(r->Find("output.weight"), nullptr);
    ExpectValues(*r, "token_embd.weight", e.values["output.weight"], Shape{40, 16});
    EXPECT_EQ(r->tensor_order.back(), "token_embd.weight");  // stored last, as lm_head
  }
  {  // Only lm_head, no alias, and config without tie_word_embeddings.
    Expected e;
    auto tensors = HfLlamaTensors(d, false, true, &e);
    nlohmann::json cfg = HfConfig(d, false);
    cfg.erase("tie_word_embeddings");
    auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), cfg));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->config.tied_output);
    ExpectValues(*r, "token_embd.weight", e.values["output.weight"], Shape{40, 16});
  }
  {  // Only embed_tokens.
    Expected e;
    auto tensors = HfLlamaTensors(d, true, false, &e);
    auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), HfConfig(d, false)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->config.tied_output);
    ExpectValues(*r, "token_embd.weight", e.values["token_embd.weight"], Shape{40, 16});
  }
  {  // Neither: a clear missing-tensor error.
    Expected e;
    auto tensors = HfLlamaTensors(d, false, false, &e);
    auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), HfConfig(d, true)));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("token_embd.weight is missing"), std::string::npos)
        << r.status().ToString();
  }
}

TEST(SafetensorsReaderTest, HalfNormsAreConvertedAndHalfWeightsKept) {
  TinyDims d;
  Expected e;
  auto tensors = HfLlamaTensors(d, true, false, &e);
  std::vector<float> norm_ref, q_ref;
  for (StTensor& t : tensors) {
    const bool is_norm = t.name.find("norm") != std::string::npos;
    const bool is_q0 = t.name == "model.layers.0.self_attn.q_proj.weight";
    if (!is_norm && !is_q0) continue;
    std::vector<float> f(t.bytes.size() / 4);
    std::memcpy(f.data(), t.bytes.data(), t.bytes.size());
    std::vector<uint16_t> h(f.size());
    const bool bf16 = t.name == "model.norm.weight" || is_q0;
    for (size_t i = 0; i < f.size(); ++i) h[i] = bf16 ? F32ToBF16(f[i]) : F32ToF16(f[i]);
    t.dtype = bf16 ? "BF16" : "F16";
    t.bytes = testdata::U16Bytes(h);
    if (t.name == "model.layers.1.input_layernorm.weight") {
      for (uint16_t x : h) norm_ref.push_back(F16ToF32(x));
    }
    if (is_q0) q_ref.assign(h.begin(), h.end());
  }
  auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), HfConfig(d, true)));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectValues(*r, "blk.1.attn_norm.weight", norm_ref, Shape{16});
  EXPECT_EQ(r->Find("output_norm.weight")->dtype, DType::kF32);
  const TensorView* q = r->Find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kBF16);
  for (size_t i = 0; i < q_ref.size(); ++i) {
    uint16_t x;
    std::memcpy(&x, static_cast<const uint8_t*>(q->data) + 2 * i, 2);
    ASSERT_EQ(x, q_ref[i]) << i;
  }
}

TEST(SafetensorsReaderTest, MisalignedDataIsCopiedNotCrashed) {
  TinyDims d;
  Expected e;
  auto tensors = HfLlamaTensors(d, true, false, &e);
  for (int mod : {1, 2, 3, 5}) {
    auto r =
        LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors, {}, mod), HfConfig(d, true)));
    ASSERT_TRUE(r.ok()) << mod << " " << r.status().ToString();
    ExpectAll(*r, e);  // checks 4-byte alignment of every F32 view too
  }
}

TEST(SafetensorsReaderTest, ShardedCheckpoint) {
  TinyDims d;
  Expected e;
  auto tensors = HfLlamaTensors(d, true, true, &e);
  const size_t half = tensors.size() / 2;
  std::vector<StTensor> a(tensors.begin(), tensors.begin() + half);
  std::vector<StTensor> b(tensors.begin() + half, tensors.end());
  const std::string dir = testing::TempDir();
  testdata::WriteFresh(dir + "/model-00001-of-00002.safetensors", MakeSafetensors(a));
  testdata::WriteFresh(dir + "/model-00002-of-00002.safetensors", MakeSafetensors(b));
  testdata::WriteFresh(dir + "/config.json", HfConfig(d, false).dump());
  nlohmann::json index;
  for (const auto& t : a) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  testdata::WriteFresh(dir + "/model.safetensors.index.json", index.dump());
  auto r = LoadSafetensorsModel(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectAll(*r, e);

  // A weight_map that disagrees with the shards is an error.
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  testdata::WriteFresh(dir + "/model.safetensors.index.json", index.dump());
  r = LoadSafetensorsModel(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.norm.weight"), std::string::npos)
      << r.status().ToString();
  index["weight_map"]["model.norm.weight"] = "../../etc/passwd";
  testdata::WriteFresh(dir + "/model.safetensors.index.json", index.dump());
  r = LoadSafetensorsModel(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a plain file name"), std::string::npos);
}

TEST(SafetensorsReaderTest, UnknownAndIgnoredTensors) {
  TinyDims d;
  Expected e;
  auto tensors = HfLlamaTensors(d, true, true, &e);
  auto with = [&](StTensor extra) {
    auto t = tensors;
    t.push_back(extra);
    return LoadSafetensorsModel(WriteModelDir(MakeSafetensors(t), HfConfig(d, false)));
  };
  std::vector<float> two = {1, 2};
  auto r =
      with({"model.layers.1.self_attn.rotary_emb.inv_freq", "F32", {2}, testdata::F32Bytes(two)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tensors.size(), e.values.size());
  r = with({"model.layers.0.self_attn.q_proj.bias", "F32", {2}, testdata::F32Bytes(two)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(r.status().message().find("q_proj.bias"), std::string::npos);
  r = with({"model.layers.7.mlp.up_proj.weight", "F32", {2}, testdata::F32Bytes(two)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_hidden_layers=2"), std::string::npos)
      << r.status().ToString();
  r = with({"model.layers.01.mlp.up_proj.weight", "F32", {2}, testdata::F32Bytes(two)});
  ASSERT_FALSE(r.ok());
  r = with({"model.layers.0.mlp.up_proj.scales", "I64", {1}, std::string(8, '\0')});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(r.status().message().find("dtype 'I64'"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("up_proj.scales"), std::string::npos);
}

TEST(SafetensorsReaderTest, ShapeMismatchNamesTensorAndShapes) {
  TinyDims d;
  Expected e;
  auto tensors = HfLlamaTensors(d, true, true, &e);
  for (StTensor& t : tensors) {
    if (t.name == "model.layers.1.mlp.down_proj.weight") t.shape = {24, 16};  // transposed
  }
  auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), HfConfig(d, false)));
  ASSERT_FALSE(r.ok());
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("blk.1.ffn_down.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[24, 16]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[16, 24]"), std::string::npos) << msg;
}

// ---- header-level errors ----

std::string TinyFile() {
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  return MakeSafetensors(
      {{"a", "F32", {2, 2}, testdata::F32Bytes(a)}, {"b", "F32", {2}, testdata::F32Bytes(b)}});
}

Status ParseBytes(const std::string& bytes) {
  auto r = ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                  "x.safetensors");
  return r.status();
}

std::string WithHeader(const std::string& json, const std::string& data) {
  std::string out;
  testdata::AppendU64(&out, json.size());
  return out + json + data;
}

TEST(SafetensorsHeaderTest, ParsesTinyFile) {
  const std::string f = TinyFile();
  auto r = ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(f.data()), f.size(), "x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors.size(), 2u);
  EXPECT_EQ(r->tensors[0].name, "a");
  EXPECT_EQ(r->tensors[0].shape, (Shape{2, 2}));
  EXPECT_EQ(r->tensors[1].begin, 16u);
  EXPECT_EQ(r->tensors[1].end, 24u);
  EXPECT_EQ(r->data_offset % 8, 0u);
}

TEST(SafetensorsHeaderTest, ErrorsAreClear) {
  auto expect = [](const std::string& bytes, const std::string& needle) {
    Status st = ParseBytes(bytes);
    ASSERT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("x.safetensors"), std::string::npos) << st.ToString();
  };
  const std::string data(24, '\0');
  expect("", "too short");
  expect("1234567", "too short");
  // Header length: zero, larger than the file, hostile huge values.
  expect(WithHeader("", ""), "header length 0");
  {
    std::string f = TinyFile();
    uint64_t n = f.size();
    std::memcpy(&f[0], &n, 8);
    expect(f, "exceeds the");
    n = ~0ull;
    std::memcpy(&f[0], &n, 8);
    expect(f, "outside 2..100000000");
    n = (1ull << 63) + 5;
    std::memcpy(&f[0], &n, 8);
    expect(f, "outside 2..100000000");
  }
  expect(WithHeader("{\"a\": {\"dtype\": \"F32\", ", data), "invalid JSON");
  expect(WithHeader("\xff\xfe garbage", data), "invalid JSON");
  expect(WithHeader("[1, 2]", data), "must be a JSON object");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                        "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                    std::string(16, '\0')),
         "overlap");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                    std::string(16, '\0')),
         "belong to no tensor");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                    std::string(16, '\0')),
         "cover 8 of the 16");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
                    std::string(8, '\0')),
         "needs 12 bytes but data_offsets [0, 8] hold 8");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]}})",
                    std::string(8, '\0')),
         "do not lie inside the data section of 8 bytes");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})",
                    std::string(8, '\0')),
         "do not lie inside");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 16],
                              "data_offsets": [0, 8]}})",
                    std::string(8, '\0')),
         "overflows 64 bits");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})",
                    std::string(8, '\0')),
         "non-negative");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [1,1,1,1,2], "data_offsets": [0, 8]}})",
                    std::string(8, '\0')),
         "5 dimensions");
  expect(WithHeader(R"({"weird": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})",
                    std::string(8, '\0')),
         "tensor 'weird' has dtype 'F64'");
  expect(WithHeader(R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", std::string(8, '\0')),
         "missing 'dtype'");
  expect(WithHeader(R"({"a": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}})",
                    std::string(8, '\0')),
         "'dtype' must be a string");
  expect(WithHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})",
                    std::string(8, '\0')),
         "data_offsets");
  expect(WithHeader(R"({"a": 7})", std::string(8, '\0')), "must be an object");
  expect(WithHeader(R"({"__metadata__": {"k": 1}})", ""), "__metadata__['k']");
}

// ---- config.json ----

TEST(HfConfigTest, BadFieldsAreClearErrors) {
  TinyDims d;
  auto expect = [&](nlohmann::json cfg, Status::Code code, const std::string& needle) {
    auto r = ParseHfLlamaConfig(cfg.dump(), "config.json");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("config.json"), std::string::npos);
  };
  const nlohmann::json good = HfConfig(d, true);
  ASSERT_TRUE(ParseHfLlamaConfig(good.dump(), "config.json").ok());
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json c = good;
    c[key] = v;
    return c;
  };
  auto without = [&](const char* key) {
    nlohmann::json c = good;
    c.erase(key);
    return c;
  };
  expect(without("hidden_size"), Status::Code::kInvalidArgument,
         "missing required field 'hidden_size'");
  expect(with("hidden_size", "16"), Status::Code::kInvalidArgument,
         "'hidden_size' must be an integer");
  expect(with("hidden_size", 16.5), Status::Code::kInvalidArgument,
         "'hidden_size' must be an integer");
  expect(with("num_hidden_layers", -1), Status::Code::kInvalidArgument, "'num_hidden_layers' = -1");
  expect(with("num_hidden_layers", 1ll << 40), Status::Code::kInvalidArgument, "num_hidden_layers");
  expect(with("vocab_size", 0), Status::Code::kInvalidArgument, "'vocab_size' = 0");
  expect(with("num_key_value_heads", 3), Status::Code::kInvalidArgument,
         "not a multiple of num_key_value_heads 3");
  expect(with("num_attention_heads", 5), Status::Code::kInvalidArgument,
         "not a multiple of num_attention_heads 5");
  expect(with("rms_norm_eps", "small"), Status::Code::kInvalidArgument,
         "'rms_norm_eps' must be a number");
  expect(with("rms_norm_eps", -1.0), Status::Code::kInvalidArgument, "rms_norm_eps");
  expect(with("rope_theta", 0.0), Status::Code::kInvalidArgument, "rope_theta");
  expect(with("rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}), Status::Code::kUnsupported,
         "rope_scaling type 'dynamic' is not supported");
  expect(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}),
         Status::Code::kUnsupported, "rope_scaling type 'yarn'");
  expect(with("rope_scaling", {{"rope_type", "linear"}}), Status::Code::kInvalidArgument,
         "needs field 'factor'");
  expect(with("rope_scaling", {{"rope_type", "linear"}, {"factor", -1.0}}),
         Status::Code::kInvalidArgument, "rope_scaling.factor = -1");
  expect(with("rope_scaling", {{"factor", 2.0}}), Status::Code::kInvalidArgument,
         "names no rope_type");
  expect(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0}}),
         Status::Code::kInvalidArgument, "needs field 'original_max_position_embeddings'");
  expect(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0},
                               {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 8192}}),
         Status::Code::kInvalidArgument, "high_freq_factor = 4");
  expect(with("hidden_act", "gelu"), Status::Code::kUnsupported, "hidden_act 'gelu'");
  expect(with("attention_bias", true), Status::Code::kUnsupported, "attention_bias");
  expect(with("tie_word_embeddings", "yes"), Status::Code::kInvalidArgument, "tie_word_embeddings");
  expect(with("bos_token_id", -3), Status::Code::kInvalidArgument, "bos_token_id");
  nlohmann::json gpt2 = good;
  gpt2["architectures"] = {"GPT2LMHeadModel"};
  gpt2["model_type"] = "gpt2";
  expect(gpt2, Status::Code::kUnsupported, "GPT2LMHeadModel");
  expect(gpt2, Status::Code::kUnsupported, "weir reads LlamaForCausalLM, MistralForCausalLM");
  expect(with("architectures", {"Gemma3ForConditionalGeneration"}), Status::Code::kUnsupported,
         "Gemma3ForConditionalGeneration");
  expect(with("rope_parameters", {{"rope_theta", 1e6}}), Status::Code::kUnsupported,
         "rope_parameters");
  expect(with("use_sliding_window", true), Status::Code::kUnsupported, "use_sliding_window");
  expect(with("attn_logit_softcapping", 50.0), Status::Code::kUnsupported,
         "attn_logit_softcapping 50 is not supported for LlamaForCausalLM (row llama has no such "
         "soft-cap)");
  expect(with("final_logit_softcapping", 30.0), Status::Code::kUnsupported,
         "final_logit_softcapping 30 is not supported for LlamaForCausalLM");
  expect(with("layer_types", {"full_attention"}), Status::Code::kInvalidArgument,
         "'layer_types' must be a list of num_hidden_layers = 2 entries");
  expect(with("layer_types", {"full_attention", "chunked_attention"}), Status::Code::kUnsupported,
         "layer_types[1]");
  // Without architectures, model_type picks the entry.
  nlohmann::json by_type = without("architectures");
  by_type["model_type"] = "qwen3";
  auto q3 = ParseHfLlamaConfig(by_type.dump(), "config.json");
  ASSERT_TRUE(q3.ok()) << q3.status().ToString();
  EXPECT_STREQ(q3->config.arch->name, "qwen3");
  auto garbage = ParseHfLlamaConfig("{\"hidden_size\": 1,,}", "config.json");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("invalid JSON"), std::string::npos);

  // Defaults and list-valued eos.
  nlohmann::json c = without("num_key_value_heads");
  c.erase("rms_norm_eps");
  c["eos_token_id"] = {2, 7};
  auto r = ParseHfLlamaConfig(c.dump(), "config.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.n_head_kv, 4);
  EXPECT_FLOAT_EQ(r->config.rms_eps, 1e-6f);
  EXPECT_EQ(r->eos_token_id, 2);
  c["head_dim"] = 8;  // explicit head_dim need not be hidden / heads
  r = ParseHfLlamaConfig(c.dump(), "config.json");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config.head_dim, 8);
}

TEST(SafetensorsReaderTest, ModelLevelErrors) {
  TinyDims d;
  Expected e;
  auto tensors = HfLlamaTensors(d, true, true, &e);
  const std::string st = MakeSafetensors(tensors);
  {  // No config.json.
    const std::string dir = testing::TempDir();
    testdata::WriteFresh(dir + "/model.safetensors", st);
    auto r = LoadSafetensorsModel(dir);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
    EXPECT_NE(r.status().message().find("config.json"), std::string::npos);
  }
  {  // A config.json that disagrees with the weights.
    TinyDims other = d;
    other.hidden = 32;
    auto r = LoadSafetensorsModel(WriteModelDir(st, HfConfig(other, false)));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("blk.0.ffn_gate.weight has shape [24, 16], expected"),
              std::string::npos)
        << r.status().ToString();
  }
  {  // A tokenizer with more tokens than the embedding has rows.
    nlohmann::json tok = testdata::HfTokenizerJson(d.vocab + 4);
    auto r = LoadSafetensorsModel(WriteModelDir(st, HfConfig(d, false), &tok));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("44 tokens but the model's vocab_size is 40"),
              std::string::npos)
        << r.status().ToString();
  }
  {  // A broken tokenizer.json is reported with its path.
    const std::string dir = WriteModelDir(st, HfConfig(d, false));
    testdata::WriteFresh(dir + "/tokenizer.json", "{nope");
    auto r = LoadSafetensorsModel(dir);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("tokenizer.json"), std::string::npos);
  }
  {  // A directory without weights.
    auto r = LoadSafetensorsModel(testing::TempDir());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  }
}

TEST(SafetensorsReaderTest, RealTinyStories656K) {
  const std::string dir = testing::SharedPath("models/tinystories-656k");
  if (!testing::FileExists(dir + "/model.safetensors")) GTEST_SKIP() << dir << " absent";
  auto r = LoadSafetensorsModel(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelFile& m = *r;
  const LlamaConfig& c = m.config;
  EXPECT_EQ(c.d_model, 128);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.d_ff, 384);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(c.ctx_len, 512);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_style, RopeStyle::kRotateHalf);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(m.Find("output.weight"), nullptr);
  EXPECT_EQ(m.tensors.size(), 2u + 9u * 2u);
  EXPECT_EQ(m.tokenizer.kind, TokenizerSpec::Kind::kBpeMerges);
  EXPECT_EQ(m.tokenizer.tokens.size(), 2048u);
  EXPECT_EQ(m.tokenizer.merges.size(), 1967u);
  EXPECT_EQ(m.tokenizer.bos_id, 1);
  EXPECT_EQ(m.tokenizer.eos_id, 2);
  // token_embd is lm_head's bytes in the file, the first tensor after the 2160-byte header.
  const std::string bytes = testing::ReadFile(dir + "/model.safetensors");
  const TensorView* emb = m.Find("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->shape, (Shape{2048, 128}));
  EXPECT_EQ(std::memcmp(emb->data, bytes.data() + 8 + 2160, 2048 * 128 * 4), 0);
  // model.norm.weight is the last tensor in the file.
  EXPECT_EQ(std::memcmp(m.Find("output_norm.weight")->data, bytes.data() + bytes.size() - 512, 512),
            0);
}

// ---- the other families of the HF table ----

// A checkpoint written tensor by tensor under its HF names (F32 unless stated), with the values
// stored per HF name: the test's own list of names, independent of the table in arch_spec.cc.
struct HfBuilder {
  std::vector<StTensor> tensors;
  std::map<std::string, std::vector<float>> values;  // as stored (BF16 ones rounded)
  int n = 0;
  void Add(const std::string& name, std::vector<int64_t> shape, const char* dtype = "F32") {
    ++n;
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> v(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i) v[i] = testdata::TestValue(n, i) - 0.5f * (n % 3);
    if (std::string(dtype) == "BF16") {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = F32ToBF16(v[i]), v[i] = BF16ToF32(h[i]);
      tensors.push_back({name, dtype, shape, testdata::U16Bytes(h)});
    } else {
      tensors.push_back({name, dtype, shape, testdata::F32Bytes(v)});
    }
    values[name] = v;
  }
  void Drop(const std::string& name) {
    std::erase_if(tensors, [&](const StTensor& t) { return t.name == name; });
  }
};

nlohmann::json BaseConfig(const char* arch, const char* model_type) {
  TinyDims d;
  nlohmann::json c = HfConfig(d, false);
  c["architectures"] = {arch};
  c["model_type"] = model_type;
  return c;
}

std::vector<float> Plus(std::vector<float> v, float add) {
  for (float& x : v) x += add;
  return v;
}

// Gemma 3: dims of TinyDims with head_dim 8 (q_dim 32 != d_model 16), norms stored as w.
HfBuilder Gemma3Checkpoint(const TinyDims& d, const char* norm_dtype = "F32") {
  HfBuilder b;
  const int hd = 8, q = d.n_heads * hd, kv = d.n_kv_heads * hd;
  b.Add("model.embed_tokens.weight", {d.vocab, d.dim});
  for (int l = 0; l < d.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    b.Add(p + "input_layernorm.weight", {d.dim}, norm_dtype);
    b.Add(p + "self_attn.q_proj.weight", {q, d.dim});
    b.Add(p + "self_attn.k_proj.weight", {kv, d.dim});
    b.Add(p + "self_attn.v_proj.weight", {kv, d.dim});
    b.Add(p + "self_attn.q_norm.weight", {hd}, norm_dtype);
    b.Add(p + "self_attn.k_norm.weight", {hd}, norm_dtype);
    b.Add(p + "self_attn.o_proj.weight", {d.dim, q});
    b.Add(p + "post_attention_layernorm.weight", {d.dim}, norm_dtype);
    b.Add(p + "pre_feedforward_layernorm.weight", {d.dim}, norm_dtype);
    b.Add(p + "mlp.gate_proj.weight", {d.hidden, d.dim});
    b.Add(p + "mlp.up_proj.weight", {d.hidden, d.dim});
    b.Add(p + "mlp.down_proj.weight", {d.dim, d.hidden});
    b.Add(p + "post_feedforward_layernorm.weight", {d.dim}, norm_dtype);
  }
  b.Add("model.norm.weight", {d.dim}, norm_dtype);
  return b;
}

nlohmann::json Gemma3Config() {
  nlohmann::json c = BaseConfig("Gemma3ForCausalLM", "gemma3_text");
  c.erase("hidden_act");
  c.erase("tie_word_embeddings");  // Gemma3TextConfig's default (true) is not saved
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["head_dim"] = 8;
  c["query_pre_attn_scalar"] = 8;
  c["sliding_window"] = 3;
  c["layer_types"] = {"sliding_attention", "full_attention"};
  c["rope_theta"] = 1e6;
  c["rope_local_base_freq"] = 1e4;
  c["final_logit_softcapping"] = nullptr;
  c["attn_logit_softcapping"] = nullptr;
  return c;
}

TEST(SafetensorsFamiliesTest, Gemma3NormsAreOnePlusWAndConfigMaps) {
  TinyDims d;
  HfBuilder b = Gemma3Checkpoint(d);
  auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), Gemma3Config()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelFile& m = *r;
  const LlamaConfig& c = m.config;
  EXPECT_STREQ(c.arch->name, "gemma3");
  EXPECT_EQ(c.rope_style, RopeStyle::kRotateHalf);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_FLOAT_EQ(c.embed_scale, 4.0f);  // sqrt(16)
  EXPECT_EQ(c.attn_scale, 0.0f);         // query_pre_attn_scalar == head_dim
  EXPECT_EQ(c.sliding_window, 3);
  EXPECT_EQ(c.layer_sliding, (std::vector<uint8_t>{1, 0}));
  EXPECT_FLOAT_EQ(c.RopeTheta(0), 1e4f);
  EXPECT_FLOAT_EQ(c.RopeTheta(1), 1e6f);
  EXPECT_TRUE(c.tied_output);
  // Every norm is 1 + w; weights are the stored bytes.
  const struct {
    const char* hf;
    const char* gguf;
  } norms[] = {
      {"model.layers.1.input_layernorm.weight", "blk.1.attn_norm.weight"},
      {"model.layers.0.self_attn.q_norm.weight", "blk.0.attn_q_norm.weight"},
      {"model.layers.0.self_attn.k_norm.weight", "blk.0.attn_k_norm.weight"},
      {"model.layers.1.post_attention_layernorm.weight", "blk.1.post_attention_norm.weight"},
      {"model.layers.1.pre_feedforward_layernorm.weight", "blk.1.ffn_norm.weight"},
      {"model.layers.0.post_feedforward_layernorm.weight", "blk.0.post_ffw_norm.weight"},
      {"model.norm.weight", "output_norm.weight"}};
  for (const auto& n : norms) {
    const std::vector<float>& w = b.values.at(n.hf);
    ExpectValues(m, n.gguf, Plus(w, 1.0f), Shape{static_cast<int64_t>(w.size())});
  }
  ExpectValues(m, "blk.0.attn_q.weight", b.values.at("model.layers.0.self_attn.q_proj.weight"),
               Shape{32, 16});

  // BF16 norms: converted to F32, then 1 + w.
  HfBuilder h = Gemma3Checkpoint(d, "BF16");
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(h.tensors), Gemma3Config()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectValues(*r, "blk.0.ffn_norm.weight",
               Plus(h.values.at("model.layers.0.pre_feedforward_layernorm.weight"), 1.0f),
               Shape{16});

  // sliding_window_pattern instead of layer_types: layer i slides when (i + 1) % 2 != 0.
  nlohmann::json cfg = Gemma3Config();
  cfg.erase("layer_types");
  cfg["sliding_window_pattern"] = 2;
  cfg["query_pre_attn_scalar"] = 16;
  cfg["final_logit_softcapping"] = 30.0;
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.layer_sliding, (std::vector<uint8_t>{1, 0}));
  EXPECT_FLOAT_EQ(r->config.attn_scale, 0.25f);
  EXPECT_FLOAT_EQ(r->config.final_logit_softcap, 30.0f);
  Status st = WriteLlamaGguf(*r, testing::TempDir() + "/g.gguf", std::nullopt, nullptr);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported) << st.ToString();  // GGUF has no such key
  EXPECT_NE(st.message().find("query scale of 0.25"), std::string::npos) << st.ToString();
  // No pattern at all: the row's period (6): both layers slide.
  cfg.erase("sliding_window_pattern");
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.layer_sliding, (std::vector<uint8_t>{1, 1}));

  // Errors: a Llama activation, a missing QK-norm, a wrong norm shape, sliding layers without a
  // window.
  cfg = Gemma3Config();
  cfg["hidden_activation"] = "silu";
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("hidden_activation 'silu' is not supported for "
                                      "Gemma3ForCausalLM (only gelu_pytorch_tanh)"),
            std::string::npos)
      << r.status().ToString();
  HfBuilder missing = b;
  missing.Drop("model.layers.1.self_attn.k_norm.weight");
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(missing.tensors), Gemma3Config()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor 'model.layers.1.self_attn.k_norm.weight' = "
                                      "blk.1.attn_k_norm.weight is missing (a Gemma3ForCausalLM "
                                      "checkpoint has it; expected shape [head_dim] = [8])"),
            std::string::npos)
      << r.status().ToString();
  HfBuilder wrong = b;
  for (StTensor& t : wrong.tensors) {
    if (t.name == "model.layers.0.post_feedforward_layernorm.weight") t.shape = {4, 4};
  }
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(wrong.tensors), Gemma3Config()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor 'model.layers.0.post_feedforward_layernorm.weight' "
                                      "= blk.0.post_ffw_norm.weight has shape [4, 4], expected "
                                      "[d_model] = [16]"),
            std::string::npos)
      << r.status().ToString();
  cfg = Gemma3Config();
  cfg["sliding_window"] = nullptr;
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'sliding_window' = null"), std::string::npos)
      << r.status().ToString();
}

// Gemma 2: Gemma 3's checkpoint without QK-norm; soft-caps, every other layer sliding.
nlohmann::json Gemma2Config() {
  nlohmann::json c = Gemma3Config();
  c["architectures"] = {"Gemma2ForCausalLM"};
  c["model_type"] = "gemma2";
  c.erase("rope_local_base_freq");
  c["attn_logit_softcapping"] = 50.0;
  c["final_logit_softcapping"] = 30.0;
  return c;
}

TEST(SafetensorsFamiliesTest, Gemma2SoftCapsAndEvenSlidingLayers) {
  TinyDims d;
  HfBuilder b = Gemma3Checkpoint(d);
  for (int l = 0; l < d.n_layers; ++l) {
    b.Drop("model.layers." + std::to_string(l) + ".self_attn.q_norm.weight");
    b.Drop("model.layers." + std::to_string(l) + ".self_attn.k_norm.weight");
  }
  nlohmann::json cfg = Gemma2Config();
  auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const LlamaConfig& c = r->config;
  EXPECT_STREQ(c.arch->name, "gemma2");
  EXPECT_FLOAT_EQ(c.attn_logit_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c.embed_scale, 4.0f);
  EXPECT_EQ(c.sliding_window, 3);
  EXPECT_EQ(c.layer_sliding, (std::vector<uint8_t>{1, 0}));
  EXPECT_FLOAT_EQ(c.RopeTheta(0), 1e6f);  // one RoPE base: no rope_local_base_freq in Gemma 2
  EXPECT_FLOAT_EQ(c.RopeTheta(1), 1e6f);
  EXPECT_TRUE(c.tied_output);
  ExpectValues(*r, "blk.1.post_attention_norm.weight",
               Plus(b.values.at("model.layers.1.post_attention_layernorm.weight"), 1.0f),
               Shape{16});
  ExpectValues(*r, "output_norm.weight", Plus(b.values.at("model.norm.weight"), 1.0f), Shape{16});

  // Without layer_types: every other layer from layer 0 (Gemma2Config, llama.cpp's gemma2);
  // keys left out get Gemma2Config's defaults, null caps are off.
  cfg.erase("layer_types");
  cfg.erase("sliding_window");
  cfg.erase("attn_logit_softcapping");
  cfg["final_logit_softcapping"] = nullptr;
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.layer_sliding, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(r->config.sliding_window, 4096);
  EXPECT_FLOAT_EQ(r->config.attn_logit_softcap, 50.0f);
  EXPECT_EQ(r->config.final_logit_softcap, 0.0f);
  cfg["attn_logit_softcapping"] = nullptr;
  cfg.erase("final_logit_softcapping");
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.attn_logit_softcap, 0.0f);
  EXPECT_FLOAT_EQ(r->config.final_logit_softcap, 30.0f);

  // Gemma 3's QK-norm is no Gemma 2 tensor; a negative cap is an error.
  r = LoadSafetensorsModel(
      WriteModelDir(MakeSafetensors(Gemma3Checkpoint(d).tensors), Gemma2Config()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'model.layers.0.self_attn.q_norm.weight' is not part of a "
                                      "Gemma2ForCausalLM checkpoint"),
            std::string::npos)
      << r.status().ToString();
  cfg = Gemma2Config();
  cfg["attn_logit_softcapping"] = -1.0;
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("attn_logit_softcapping -1 must be >= 0"), std::string::npos)
      << r.status().ToString();
  // Gemma 3's row caps the logits only: a stated attention cap is refused, not dropped.
  cfg = Gemma3Config();
  cfg["attn_logit_softcapping"] = 50.0;
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(Gemma3Checkpoint(d).tensors), cfg));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(r.status().message().find("attn_logit_softcapping 50 is not supported for "
                                      "Gemma3ForCausalLM (row gemma3 has no such soft-cap)"),
            std::string::npos)
      << r.status().ToString();
}

// Phi-3: q, k, v in one qkv_proj and gate, up in one gate_up_proj, split into the row's parts.
HfBuilder Phi3Checkpoint(const TinyDims& d, int qkv_rows = 0) {
  HfBuilder b;
  const int hd = d.dim / d.n_heads, q = d.n_heads * hd, kv = d.n_kv_heads * hd;
  b.Add("model.embed_tokens.weight", {d.vocab, d.dim});
  for (int l = 0; l < d.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    b.Add(p + "input_layernorm.weight", {d.dim});
    b.Add(p + "self_attn.qkv_proj.weight", {qkv_rows > 0 ? qkv_rows : q + 2 * kv, d.dim});
    b.Add(p + "self_attn.o_proj.weight", {d.dim, q});
    b.Add(p + "post_attention_layernorm.weight", {d.dim});
    b.Add(p + "mlp.gate_up_proj.weight", {2 * d.hidden, d.dim});
    b.Add(p + "mlp.down_proj.weight", {d.dim, d.hidden});
  }
  b.Add("model.norm.weight", {d.dim});
  b.Add("lm_head.weight", {d.vocab, d.dim});
  return b;
}

std::vector<float> Rows(const std::vector<float>& v, int cols, int first, int n) {
  return std::vector<float>(v.begin() + static_cast<ptrdiff_t>(first) * cols,
                            v.begin() + static_cast<ptrdiff_t>(first + n) * cols);
}

TEST(SafetensorsFamiliesTest, Phi3FusedTensorsAreSplit) {
  TinyDims d;
  const int hd = d.dim / d.n_heads, q = d.n_heads * hd, kv = d.n_kv_heads * hd;
  HfBuilder b = Phi3Checkpoint(d);
  nlohmann::json cfg = BaseConfig("Phi3ForCausalLM", "phi3");
  cfg["sliding_window"] = 2047;  // Phi-3-mini-4k states it; ignored like the GGUF row
  cfg["partial_rotary_factor"] = 0.5;
  auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const LlamaConfig& c = r->config;
  EXPECT_STREQ(c.arch->name, "phi3");
  EXPECT_EQ(c.rope_dim, hd / 2);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(c.layer_sliding.empty());
  EXPECT_FALSE(c.tied_output);
  EXPECT_EQ(r->Find("blk.0.attn_qkv.weight"), nullptr);
  const std::vector<float>& qkv = b.values.at("model.layers.1.self_attn.qkv_proj.weight");
  ExpectValues(*r, "blk.1.attn_q.weight", Rows(qkv, d.dim, 0, q), Shape{q, d.dim});
  ExpectValues(*r, "blk.1.attn_k.weight", Rows(qkv, d.dim, q, kv), Shape{kv, d.dim});
  ExpectValues(*r, "blk.1.attn_v.weight", Rows(qkv, d.dim, q + kv, kv), Shape{kv, d.dim});
  const std::vector<float>& gu = b.values.at("model.layers.0.mlp.gate_up_proj.weight");
  ExpectValues(*r, "blk.0.ffn_gate.weight", Rows(gu, d.dim, 0, d.hidden), Shape{d.hidden, d.dim});
  ExpectValues(*r, "blk.0.ffn_up.weight", Rows(gu, d.dim, d.hidden, d.hidden),
               Shape{d.hidden, d.dim});

  // A fused tensor of the wrong size names both tensors and the sum of the parts.
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(Phi3Checkpoint(d, q + kv).tensors), cfg));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorrupt);
  EXPECT_NE(r.status().message().find(StrFormat(
                "tensor 'model.layers.0.self_attn.qkv_proj.weight' = blk.0.attn_qkv.weight has "
                "shape [%d, %d], expected [n_head * head_dim + n_head_kv * head_dim + n_head_kv "
                "* head_dim, d_model] = [%d, %d]",
                q + kv, d.dim, q + 2 * kv, d.dim)),
            std::string::npos)
      << r.status().ToString();
  HfBuilder missing = b;
  missing.Drop("model.layers.1.mlp.gate_up_proj.weight");
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(missing.tensors), cfg));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor 'model.layers.1.mlp.gate_up_proj.weight' = "
                                      "blk.1.ffn_up.weight is missing"),
            std::string::npos)
      << r.status().ToString();
  // Separate q/k/v are no Phi-3 checkpoint's tensors.
  HfBuilder split = b;
  split.Add("model.layers.0.self_attn.q_proj.weight", {q, d.dim});
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(split.tensors), cfg));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'model.layers.0.self_attn.q_proj.weight' is not part of a "
                                      "Phi3ForCausalLM checkpoint"),
            std::string::npos)
      << r.status().ToString();
  // Phi-3-128k / Phi-3.5 / Phi-4-mini's LongRoPE is refused; an odd rotated width too.
  for (const char* type : {"longrope", "su", "yarn"}) {
    nlohmann::json l = cfg;
    l["rope_scaling"] = {{"type", type}, {"long_factor", {1.0}}, {"short_factor", {1.0}}};
    r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), l));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
    EXPECT_NE(r.status().message().find(StrFormat("rope_scaling type '%s' is not supported", type)),
              std::string::npos)
        << r.status().ToString();
  }
  cfg["partial_rotary_factor"] = 0.3;
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("partial_rotary_factor 0.3"), std::string::npos)
      << r.status().ToString();
}

TEST(SafetensorsFamiliesTest, QwenBiasesAndQkNormAreRequired) {
  TinyDims d;
  Expected e;
  auto llama = HfLlamaTensors(d, true, true, &e);
  std::vector<float> q_bias(16, 0.25f), kv_bias(8, -0.5f), head_norm(4, 1.5f);
  {
    auto tensors = llama;
    for (int l = 0; l < d.n_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      tensors.push_back({p + "q_proj.bias", "F32", {16}, testdata::F32Bytes(q_bias)});
      tensors.push_back({p + "k_proj.bias", "F32", {8}, testdata::F32Bytes(kv_bias)});
      if (l == 0) tensors.push_back({p + "v_proj.bias", "F32", {8}, testdata::F32Bytes(kv_bias)});
    }
    const nlohmann::json cfg = BaseConfig("Qwen2ForCausalLM", "qwen2");
    auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), cfg));
    ASSERT_FALSE(r.ok());  // layer 1 has no v bias
    EXPECT_NE(r.status().message().find("'model.layers.1.self_attn.v_proj.bias' = "
                                        "blk.1.attn_v.bias is missing"),
              std::string::npos)
        << r.status().ToString();
    tensors.push_back(
        {"model.layers.1.self_attn.v_proj.bias", "F32", {8}, testdata::F32Bytes(kv_bias)});
    r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), cfg));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_STREQ(r->config.arch->name, "qwen2");
    ExpectValues(*r, "blk.1.attn_q.bias", q_bias, Shape{16});
    ExpectValues(*r, "blk.1.attn_v.bias", kv_bias, Shape{8});
    ExpectAll(*r, e);
  }
  {
    auto tensors = llama;
    for (int l = 0; l < d.n_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      tensors.push_back({p + "q_norm.weight", "F32", {4}, testdata::F32Bytes(head_norm)});
      tensors.push_back({p + "k_norm.weight", "F32", {4}, testdata::F32Bytes(head_norm)});
    }
    auto r = LoadSafetensorsModel(
        WriteModelDir(MakeSafetensors(tensors), BaseConfig("Qwen3ForCausalLM", "qwen3")));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_STREQ(r->config.arch->name, "qwen3");
    ExpectValues(*r, "blk.1.attn_k_norm.weight", head_norm, Shape{4});  // no 1 + w
    // The same QK-norm in a Llama checkpoint is not Llama's.
    r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), HfConfig(d, false)));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
    EXPECT_NE(r.status().message().find("not part of a LlamaForCausalLM checkpoint"),
              std::string::npos)
        << r.status().ToString();
  }
}

TEST(SafetensorsFamiliesTest, MistralSlidingWindowCoversEveryLayer) {
  TinyDims d;
  Expected e;
  auto tensors = HfLlamaTensors(d, true, true, &e);
  nlohmann::json cfg = BaseConfig("MistralForCausalLM", "mistral");
  cfg["sliding_window"] = 5;
  cfg["rope_theta"] = 1e6;
  auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), cfg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_STREQ(r->config.arch->name, "llama");
  EXPECT_EQ(r->config.sliding_window, 5);
  EXPECT_EQ(r->config.layer_sliding, (std::vector<uint8_t>{1, 1}));
  EXPECT_FLOAT_EQ(r->config.RopeTheta(0), 1e6f);  // one RoPE base
  ExpectAll(*r, e);
  // A pack holds the window in its own keys; a GGUF cannot hold a window on llama's row:
  // refused, not dropped.
  const std::string dir = testing::TempDir();
  Status st = WritePack(*r, dir + "/m.weirpack", PackOptions{}, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto pack = PackFile::Open(dir + "/m.weirpack");
  ASSERT_TRUE(pack.ok()) << pack.status().ToString();
  EXPECT_EQ(pack->config().sliding_window, 5);
  EXPECT_EQ(pack->config().layer_sliding, (std::vector<uint8_t>{1, 1}));
  EXPECT_FLOAT_EQ(pack->config().RopeTheta(0), 1e6f);
  st = WriteLlamaGguf(*r, dir + "/m.gguf", std::nullopt, nullptr);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported) << st.ToString();
  EXPECT_NE(st.message().find("a sliding window of 5 on llama has no GGUF key"), std::string::npos)
      << st.ToString();
  cfg["sliding_window"] = nullptr;  // Mistral 7B v0.2+: none
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), cfg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.sliding_window, 0);
  // Llama's config class has no sliding window: a stated one is not read.
  cfg = HfConfig(d, false);
  cfg["sliding_window"] = 5;
  r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(tensors), cfg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.sliding_window, 0);
}

// Mixtral with 3 experts of width 24, 2 per token; experts stored BF16.
HfBuilder MixtralCheckpoint(const TinyDims& d) {
  HfBuilder b;
  b.Add("model.embed_tokens.weight", {d.vocab, d.dim});
  for (int l = 0; l < d.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    b.Add(p + "input_layernorm.weight", {d.dim});
    b.Add(p + "self_attn.q_proj.weight", {d.dim, d.dim});
    b.Add(p + "self_attn.k_proj.weight", {d.kv_dim(), d.dim});
    b.Add(p + "self_attn.v_proj.weight", {d.kv_dim(), d.dim});
    b.Add(p + "self_attn.o_proj.weight", {d.dim, d.dim});
    b.Add(p + "post_attention_layernorm.weight", {d.dim});
    b.Add(p + "block_sparse_moe.gate.weight", {3, d.dim});
    for (int x = 0; x < 3; ++x) {
      const std::string e = p + "block_sparse_moe.experts." + std::to_string(x) + ".";
      b.Add(e + "w1.weight", {d.hidden, d.dim}, "BF16");
      b.Add(e + "w2.weight", {d.dim, d.hidden}, "BF16");
      b.Add(e + "w3.weight", {d.hidden, d.dim}, "BF16");
    }
  }
  b.Add("model.norm.weight", {d.dim});
  b.Add("lm_head.weight", {d.vocab, d.dim});
  return b;
}

nlohmann::json MixtralConfig() {
  nlohmann::json c = BaseConfig("MixtralForCausalLM", "mixtral");
  c["num_local_experts"] = 3;
  c["num_experts_per_tok"] = 2;
  c["sliding_window"] = nullptr;
  return c;
}

// The stacked tensor's bytes: expert x's BF16 values at slice x.
void ExpectStacked(const ModelFile& m, const std::string& name, const HfBuilder& b,
                   const std::string& layer_prefix, const char* w, const Shape& shape) {
  const TensorView* t = m.Find(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->dtype, DType::kBF16) << name;
  ASSERT_EQ(t->shape, shape) << name << " " << t->shape.ToString();
  const int64_t slice = shape[1] * shape[2];
  for (int x = 0; x < shape[0]; ++x) {
    const std::vector<float>& v = b.values.at(layer_prefix + "block_sparse_moe.experts." +
                                              std::to_string(x) + "." + w + ".weight");
    for (int64_t i = 0; i < slice; ++i) {
      uint16_t h;
      std::memcpy(&h, static_cast<const uint8_t*>(t->data) + 2 * (x * slice + i), 2);
      ASSERT_EQ(BF16ToF32(h), v[i]) << name << " expert " << x << " element " << i;
    }
  }
}

TEST(SafetensorsFamiliesTest, MixtralExpertsAreStacked) {
  TinyDims d;
  HfBuilder b = MixtralCheckpoint(d);
  auto r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), MixtralConfig()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelFile& m = *r;
  EXPECT_STREQ(m.config.arch->name, "mixtral");
  EXPECT_EQ(m.config.n_expert, 3);
  EXPECT_EQ(m.config.n_expert_used, 2);
  EXPECT_TRUE(m.config.expert_weights_norm);
  EXPECT_EQ(m.config.rope_style, RopeStyle::kRotateHalf);
  ExpectStacked(m, "blk.1.ffn_gate_exps.weight", b, "model.layers.1.", "w1", Shape{3, 24, 16});
  ExpectStacked(m, "blk.1.ffn_up_exps.weight", b, "model.layers.1.", "w3", Shape{3, 24, 16});
  ExpectStacked(m, "blk.0.ffn_down_exps.weight", b, "model.layers.0.", "w2", Shape{3, 16, 24});
  ExpectValues(m, "blk.0.ffn_gate_inp.weight",
               b.values.at("model.layers.0.block_sparse_moe.gate.weight"), Shape{3, 16});
  EXPECT_EQ(std::count(m.tensor_order.begin(), m.tensor_order.end(), "blk.0.ffn_up_exps.weight"),
            1);

  {  // A missing expert, named.
    HfBuilder x = b;
    x.Drop("model.layers.1.block_sparse_moe.experts.2.w3.weight");
    r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(x.tensors), MixtralConfig()));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("'model.layers.1.block_sparse_moe.experts.2.w3.weight' = "
                                        "blk.1.ffn_up_exps.weight (expert 2) is missing"),
              std::string::npos)
        << r.status().ToString();
  }
  {  // An expert of the wrong shape.
    HfBuilder x = b;
    for (StTensor& t : x.tensors) {
      if (t.name == "model.layers.0.block_sparse_moe.experts.1.w2.weight") t.shape = {24, 16};
    }
    r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(x.tensors), MixtralConfig()));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("= expert 1 of blk.0.ffn_down_exps.weight has shape "
                                        "[24, 16], expected [d_model, d_ff] = [16, 24]"),
              std::string::npos)
        << r.status().ToString();
  }
  {  // Experts of mixed types.
    HfBuilder x = b;
    for (StTensor& t : x.tensors) {
      if (t.name == "model.layers.0.block_sparse_moe.experts.1.w1.weight") {
        t.dtype = "F16";
      }
    }
    r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(x.tensors), MixtralConfig()));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
    EXPECT_NE(r.status().message().find("experts of blk.0.ffn_gate_exps.weight differ in type"),
              std::string::npos)
        << r.status().ToString();
  }
  {  // An expert past num_local_experts is not part of the checkpoint.
    HfBuilder x = b;
    x.Add("model.layers.0.block_sparse_moe.experts.3.w1.weight", {d.hidden, d.dim});
    r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(x.tensors), MixtralConfig()));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("experts.3.w1.weight' is not part of a "
                                        "MixtralForCausalLM checkpoint"),
              std::string::npos)
        << r.status().ToString();
  }
  {  // Config errors.
    nlohmann::json cfg = MixtralConfig();
    cfg["num_experts_per_tok"] = 4;
    r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("num_experts_per_tok 4 exceeds num_local_experts 3"),
              std::string::npos)
        << r.status().ToString();
    cfg = MixtralConfig();
    cfg.erase("num_local_experts");
    r = LoadSafetensorsModel(WriteModelDir(MakeSafetensors(b.tensors), cfg));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("missing required field 'num_experts'"), std::string::npos)
        << r.status().ToString();
  }
}

TEST(HfConfigTest, Qwen3MoeFields) {
  TinyDims d;
  nlohmann::json c = BaseConfig("Qwen3MoeForCausalLM", "qwen3_moe");
  c["num_experts"] = 8;
  c["num_experts_per_tok"] = 2;
  c["moe_intermediate_size"] = 32;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = nlohmann::json::array();
  auto r = ParseHfLlamaConfig(c.dump(), "config.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_STREQ(r->config.arch->name, "qwen3moe");
  EXPECT_EQ(r->config.d_ff, 32);  // the experts' width, not intermediate_size
  EXPECT_EQ(r->config.n_expert, 8);
  EXPECT_FALSE(r->config.expert_weights_norm);  // Qwen3MoeConfig's default
  c["norm_topk_prob"] = true;
  r = ParseHfLlamaConfig(c.dump(), "config.json");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->config.expert_weights_norm);
  c["mlp_only_layers"] = {1};
  r = ParseHfLlamaConfig(c.dump(), "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mlp_only_layers [1]"), std::string::npos)
      << r.status().ToString();
  (void)d;
}

}  // namespace
}  // namespace weir::format
