// The architecture table (format/arch_spec.h) and the GGUF loader's use of it: every row is
// well formed, a generated file of each architecture round-trips its switches through the GGUF
// writer and loader, the sliding-window pattern keys are read as llama.cpp reads them, and a
// missing tensor or an unknown architecture is an error that names the file and the tensor.
#include "format/arch_spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "format/gguf_reader.h"
#include "format/gguf_writer.h"
#include "format/llama_gguf_writer.h"
#include "format/model_file.h"
#include "format/synth_llama.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

TEST(ArchSpecTest, EveryRowIsWellFormed) {
  for (const ArchSpec* a : AllArchs()) {
    SCOPED_TRACE(a->name);
    EXPECT_EQ(FindArch(a->name), a);
    std::set<std::string> names;
    std::set<TensorRole> roles;
    for (const TensorSpec& t : a->tensors) {
      EXPECT_TRUE(names.insert(t.name).second) << "duplicate tensor " << t.name;
      EXPECT_TRUE(roles.insert(t.role).second) << "duplicate role of " << t.name;
      EXPECT_NE(t.outer, Dim::kNone) << t.name;
    }
    // The core every forward pass reads; the MLP is dense or a mixture of experts.
    std::vector<TensorRole> core = {TensorRole::kTokenEmbd, TensorRole::kOutputNorm,
                                    TensorRole::kAttnNorm,  TensorRole::kAttnQ,
                                    TensorRole::kAttnK,     TensorRole::kAttnV,
                                    TensorRole::kAttnOutput, TensorRole::kFfnNorm};
    const std::vector<TensorRole> dense = {TensorRole::kFfnGate, TensorRole::kFfnUp,
                                           TensorRole::kFfnDown};
    const std::vector<TensorRole> moe = {TensorRole::kFfnGateInp, TensorRole::kFfnGateExps,
                                         TensorRole::kFfnUpExps, TensorRole::kFfnDownExps};
    core.insert(core.end(), (a->moe ? moe : dense).begin(), (a->moe ? moe : dense).end());
    for (TensorRole r : core) {
      const TensorSpec* t = FindTensorSpec(*a, r);
      ASSERT_NE(t, nullptr) << static_cast<int>(r);
      EXPECT_TRUE(t->required) << t->name;
    }
    for (TensorRole r : a->moe ? dense : moe) EXPECT_EQ(FindTensorSpec(*a, r), nullptr);
    for (const TensorSpec& t : a->tensors) {  // only expert stacks are 3-D
      const bool stack = t.role == TensorRole::kFfnGateExps || t.role == TensorRole::kFfnUpExps ||
                         t.role == TensorRole::kFfnDownExps;
      EXPECT_EQ(t.stack == Dim::kExperts, stack) << t.name;
    }
    EXPECT_EQ(FindGgufArch(a->gguf_name, a->moe), a);
    EXPECT_EQ(a->qk_norm, FindTensorSpec(*a, TensorRole::kAttnQNorm) != nullptr);
    EXPECT_EQ(a->post_norms, FindTensorSpec(*a, TensorRole::kPostFfnNorm) != nullptr);
    EXPECT_FALSE(FindTensorSpec(*a, TensorRole::kOutput)->required);  // absent = tied
  }
  EXPECT_EQ(FindArch("gpt2"), nullptr);
  EXPECT_EQ(&LlamaArch(), FindArch("llama"));
  EXPECT_EQ(ArchNameList(), "llama, qwen2, qwen3, gemma3, mixtral, qwen3moe, phi3");
}

TEST(ArchSpecTest, ShapesFollowTheConfig) {
  LlamaConfig c;
  c.d_model = 64, c.n_layers = 2, c.n_head = 4, c.n_head_kv = 1, c.head_dim = 32, c.d_ff = 96;
  c.vocab_size = 300;
  c.layers = {{4, 1, 96}, {2, 1, 48}};
  const ArchSpec& g = *FindArch("gemma3");
  EXPECT_EQ(ExpectedShape(*FindTensorSpec(g, TensorRole::kAttnQ), c, 1), (Shape{64, 64}));
  EXPECT_EQ(ExpectedShape(*FindTensorSpec(g, TensorRole::kAttnOutput), c, 0), (Shape{64, 128}));
  EXPECT_EQ(ExpectedShape(*FindTensorSpec(g, TensorRole::kAttnQNorm), c, 0), (Shape{32}));
  EXPECT_EQ(ExpectedShape(*FindTensorSpec(g, TensorRole::kFfnDown), c, 1), (Shape{64, 48}));
  EXPECT_EQ(ExpectedShape(*FindTensorSpec(g, TensorRole::kTokenEmbd), c, -1), (Shape{300, 64}));
  EXPECT_EQ(ShapeDerivation(*FindTensorSpec(g, TensorRole::kAttnOutput)),
            "[d_model, n_head * head_dim]");
  EXPECT_EQ(TensorName(*FindTensorSpec(g, TensorRole::kPostFfnNorm), 3),
            "blk.3.post_ffw_norm.weight");
}

// A generated model of every architecture loads back with the row's switches.
TEST(ArchSpecTest, GeneratedModelsRoundTrip) {
  const std::string dir = testing::TempDir();
  for (const ArchSpec* a : AllArchs()) {
    SCOPED_TRACE(a->name);
    auto spec = SynthPreset("tiny", a->name);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    const std::string path = dir + "/" + a->name + ".gguf";
    ASSERT_TRUE(WriteRandomLlamaGguf(*spec, DType::kF32, 3, path, nullptr).ok());
    auto m = LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const LlamaConfig& c = m->config;
    const LlamaConfig want = SynthConfig(*spec);
    EXPECT_EQ(c.arch, a);
    EXPECT_EQ(c.rope_style, a->rope_style);
    EXPECT_EQ(c.head_dim, want.head_dim);
    EXPECT_FLOAT_EQ(c.embed_scale, a->embed_scale_sqrt_d ? 8.0f : 1.0f);
    EXPECT_EQ(c.sliding_window, want.sliding_window);
    EXPECT_EQ(c.layer_sliding, want.layer_sliding);
    EXPECT_FLOAT_EQ(c.rope_theta, want.rope_theta);
    for (int l = 0; l < c.n_layers; ++l) EXPECT_FLOAT_EQ(c.RopeTheta(l), want.RopeTheta(l));
    EXPECT_EQ(m->Find("blk.0.attn_q.bias") != nullptr, a->qkv_bias);
    EXPECT_EQ(m->Find("blk.1.attn_k_norm.weight") != nullptr, a->qk_norm);
    EXPECT_EQ(m->Find("blk.1.post_ffw_norm.weight") != nullptr, a->post_norms);
  }
}

TEST(ArchSpecTest, Gemma3TinyHasSlidingAndGlobalLayers) {
  auto spec = SynthPreset("tiny", "gemma3");
  ASSERT_TRUE(spec.ok());
  const LlamaConfig c = SynthConfig(*spec);
  EXPECT_EQ(c.sliding_window, 4);
  for (int l = 0; l < 5; ++l) EXPECT_TRUE(c.IsSliding(l)) << l;
  EXPECT_FALSE(c.IsSliding(5));
  EXPECT_FLOAT_EQ(c.RopeTheta(0), 10000.0f);
  EXPECT_FLOAT_EQ(c.RopeTheta(5), 1e6f);
  EXPECT_FLOAT_EQ(c.AttnScale(), 1.0f / std::sqrt(32.0f));
}

// Rewrites a generated gemma3 file with extra metadata (after the writer's keys).
std::string Gemma3WithKeys(const std::string& dir, const std::string& name,
                           const std::vector<std::pair<std::string, GgufValue>>& extra,
                           const std::vector<std::string>& drop_tensors = {}) {
  auto spec = SynthPreset("tiny", "gemma3");
  EXPECT_TRUE(spec.ok());
  const std::string src = dir + "/src_" + name + ".gguf";
  EXPECT_TRUE(WriteRandomLlamaGguf(*spec, DType::kF32, 5, src, nullptr).ok());
  auto m = LoadModel(src);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  for (const std::string& t : drop_tensors) m->tensors.erase(t);
  // The writer validates its input; write the tensors by hand when some are dropped.
  const std::string out = dir + "/" + name + ".gguf";
  GgufWriter w;
  EXPECT_TRUE(AddLlamaGgufMetadata(m->config, m->tokenizer, name, 0, &w).ok());
  for (const auto& [k, v] : extra) w.Add(k, v);
  for (const std::string& n : m->tensor_order) {
    auto it = m->tensors.find(n);
    if (it != m->tensors.end()) w.AddTensor(n, it->second.dtype, it->second.shape, it->second.data);
  }
  EXPECT_TRUE(w.Write(out, nullptr).ok());
  return out;
}

TEST(ArchSpecTest, SlidingWindowPatternKeys) {
  const std::string dir = testing::TempDir();
  {  // a period: llama.cpp's n_pattern (layer l slides when l % n < n - 1)
    auto m = LoadModel(Gemma3WithKeys(
        dir, "period", {{"gemma3.attention.sliding_window_pattern", GgufValue::U32(3)}}));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->config.layer_sliding, (std::vector<uint8_t>{1, 1, 0, 1, 1, 0}));
  }
  {  // one bool per layer
    std::vector<GgufValue> flags;
    for (bool b : {true, false, true, false, false, true}) flags.push_back(GgufValue::Bool(b));
    auto m = LoadModel(Gemma3WithKeys(
        dir, "bools",
        {{"gemma3.attention.sliding_window_pattern", GgufValue::Array(GgufType::kBool, flags)}}));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->config.layer_sliding, (std::vector<uint8_t>{1, 0, 1, 0, 0, 1}));
  }
  {  // a per-layer array of the wrong length names the key and the layer count
    auto m = LoadModel(Gemma3WithKeys(
        dir, "short", {{"gemma3.attention.sliding_window_pattern", GgufValue::U32Array({1, 0})}}));
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("'gemma3.attention.sliding_window_pattern' has 2 per-layer "
                                        "values, expected gemma3.block_count = 6"),
              std::string::npos)
        << m.status().message();
  }
  {  // a soft-cap is read
    auto m = LoadModel(Gemma3WithKeys(dir, "softcap",
                                      {{"gemma3.final_logit_softcapping", GgufValue::F32(30.0f)}}));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_FLOAT_EQ(m->config.final_logit_softcap, 30.0f);
  }
}

TEST(ArchSpecTest, MissingTensorNamesFileAndTensor) {
  const std::string dir = testing::TempDir();
  const std::string path = Gemma3WithKeys(dir, "noqnorm", {}, {"blk.2.attn_q_norm.weight"});
  auto m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(
      m.status().message().find(path + ": required tensor blk.2.attn_q_norm.weight is missing "
                                       "(expected shape [head_dim] = [32])"),
      std::string::npos)
      << m.status().message();
}

TEST(ArchSpecTest, UnknownArchitectureIsUnsupported) {
  const std::string path = testing::TempDir() + "/phi.gguf";
  GgufWriter w;
  w.AddString("general.architecture", "phi2");
  ASSERT_TRUE(w.Write(path, nullptr).ok());
  auto m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(m.status().message().find("general.architecture is 'phi2'; weir loads llama, qwen2, "
                                      "qwen3, gemma3, qwen3moe, phi3"),
            std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace weir::format
