#include "format/safetensors_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "format/hf_config.h"
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
  nlohmann::json mistral = good;
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["model_type"] = "mistral";
  expect(mistral, Status::Code::kUnsupported, "MistralForCausalLM");
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

}  // namespace
}  // namespace weir::format
