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
    // rope_freqs: llama.cpp reads it for the llama family only (llama.cpp's models/llama.cpp),
    // as one optional global F32 vector of rope_dim / 2 factors.
    const TensorSpec* rf = FindTensorSpec(*a, TensorRole::kRopeFreqs);
    EXPECT_EQ(rf != nullptr, std::string(a->gguf_name) == "llama");
    if (rf != nullptr) {
      EXPECT_FALSE(rf->required);
      EXPECT_FALSE(rf->per_layer);
      EXPECT_TRUE(rf->vector());
      EXPECT_EQ(rf->outer, Dim::kRopeHalf);
      LlamaConfig c;
      c.head_dim = 64, c.rope_dim = 48;
      EXPECT_EQ(ExpectedShape(*rf, c, -1), Shape{24});
      EXPECT_EQ(ShapeDerivation(*rf), "[rope_dim / 2]");
    }
  }
  // Gemma 3 leaves its sliding layers unscaled by linear RoPE scaling (llama.cpp, transformers).
  EXPECT_FALSE(FindArch("gemma3")->rope_scale_sliding);
  LlamaConfig g;
  g.arch = FindArch("gemma3");
  g.rope_scaling_factor = 8.0f;
  g.sliding_window = 4;
  g.layer_sliding = {1, 0};
  EXPECT_EQ(g.RopeFreqScale(0), 1.0f);     // sliding: plain RoPE
  EXPECT_EQ(g.RopeFreqScale(1), 0.125f);   // global: positions / 8
  g.sliding_window = 0;                    // no sliding layers: every layer is scaled
  EXPECT_EQ(g.RopeFreqScale(0), 0.125f);
  // A Hugging Face Mistral (the llama row with a window on every layer) scales every layer, as
  // transformers does; so do Gemma 2 (llama.cpp) and Mixtral.
  LlamaConfig mistral = g;
  mistral.arch = FindArch("llama");
  mistral.sliding_window = 4;
  mistral.layer_sliding = {1, 1};
  EXPECT_EQ(mistral.RopeFreqScale(0), 0.125f);
  EXPECT_TRUE(FindArch("gemma2")->rope_scale_sliding);
  EXPECT_TRUE(FindArch("mixtral")->rope_scale_sliding);
  EXPECT_EQ(FindArch("gpt2"), nullptr);
  EXPECT_EQ(&LlamaArch(), FindArch("llama"));
  EXPECT_EQ(ArchNameList(), "llama, qwen2, qwen3, gemma3, mixtral, qwen3moe, gemma2, phi3");
}

// Every HF entry names each required tensor of its row once.
TEST(ArchSpecTest, EveryHfEntryCoversItsRow) {
  std::set<std::string> architectures;
  for (const HfArch& h : AllHfArchs()) {
    SCOPED_TRACE(h.architecture);
    ASSERT_NE(h.arch, nullptr);
    EXPECT_TRUE(architectures.insert(h.architecture).second);
    EXPECT_EQ(FindHfArch(h.architecture), &h);
    std::set<std::string> names;
    std::set<TensorRole> roles;
    for (const HfTensorName& n : h.tensors) {
      EXPECT_TRUE(names.insert(n.name).second) << "duplicate name " << n.name;
      EXPECT_TRUE(roles.insert(n.role).second) << "duplicate role of " << n.name;
      // A family's name table may serve a row that lacks some of its roles (Gemma's names for a
      // row without QK-norm): those names are never read.
      const TensorSpec* t = FindTensorSpec(*h.arch, n.role);
      if (t == nullptr) continue;
      // Expert slices carry the expert's number; nothing else does.
      EXPECT_EQ(std::string(n.name).find("{E}") != std::string::npos, t->stack == Dim::kExperts)
          << n.name;
      // Global tensors are named in full, per-layer ones relative to model.layers.N.
      EXPECT_EQ(std::string(n.name).rfind("model.", 0) == 0 || n.role == TensorRole::kOutput,
                !t->per_layer)
          << n.name;
    }
    for (const TensorSpec& t : h.arch->tensors) {
      // A later part of a fused tensor is named by its first part's entry (the fused tensor).
      const bool later_part =
          t.fused_in != nullptr && &t != &h.arch->tensors.front() &&
          std::string_view((&t - 1)->fused_in ? (&t - 1)->fused_in : "") == t.fused_in;
      if ((t.required || t.role == TensorRole::kOutput) && !later_part) {
        EXPECT_NE(FindHfTensorName(h, t.role), nullptr) << t.name;
      }
      if (later_part) EXPECT_EQ(FindHfTensorName(h, t.role), nullptr) << t.name;
    }
    const std::string row = h.arch->name;
    EXPECT_EQ(h.norm_plus_one, row == "gemma3" || row == "gemma2");
  }
  EXPECT_EQ(FindHfArch("GPT2LMHeadModel"), nullptr);
  EXPECT_EQ(FindHfModelType("gemma3_text"), FindHfArch("Gemma3ForCausalLM"));
  EXPECT_EQ(FindHfArch("MistralForCausalLM")->arch, &LlamaArch());
  EXPECT_STREQ(FindHfModelType("gemma2")->arch->name, "gemma2");
  const HfArch& phi3 = *FindHfModelType("phi3");
  EXPECT_STREQ(phi3.architecture, "Phi3ForCausalLM");
  // The fused tensors are named once, on their first part.
  EXPECT_STREQ(FindHfTensorName(phi3, TensorRole::kAttnQ)->name, "self_attn.qkv_proj.weight");
  EXPECT_STREQ(FindHfTensorName(phi3, TensorRole::kFfnGate)->name, "mlp.gate_up_proj.weight");
  EXPECT_EQ(FindHfTensorName(phi3, TensorRole::kAttnK), nullptr);
  EXPECT_EQ(FindHfTensorName(phi3, TensorRole::kFfnUp), nullptr);
  const HfArch& mixtral = *FindHfArch("MixtralForCausalLM");
  EXPECT_EQ(HfName(*FindHfTensorName(mixtral, TensorRole::kFfnUpExps), true, 3, 7),
            "model.layers.3.block_sparse_moe.experts.7.w3.weight");
  EXPECT_EQ(HfName(*FindHfTensorName(mixtral, TensorRole::kOutputNorm), false, -1, -1),
            "model.norm.weight");
  EXPECT_EQ(HfArchNameList().rfind("LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM", 0),
            0u);
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
    EXPECT_FLOAT_EQ(c.attn_logit_softcap, want.attn_logit_softcap);
    EXPECT_FLOAT_EQ(c.final_logit_softcap, want.final_logit_softcap);
    EXPECT_EQ(c.tied_output, a->tied_head);
    EXPECT_EQ(m->Find("output.weight") == nullptr, a->tied_head);
  }
}

// Gemma 2 (llama.cpp's gemma2: load_swa_pattern(ml, 2)): layers 0, 2, ... slide, 1, 3, ... are
// global, and both rotate with the one RoPE base. The tiny model's window (4) is far below its
// context (512), and its soft-caps are on.
TEST(ArchSpecTest, Gemma2TinySlidesOnEvenLayersWithOneRopeBase) {
  auto spec = SynthPreset("tiny", "gemma2");
  ASSERT_TRUE(spec.ok());
  const LlamaConfig c = SynthConfig(*spec);
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.sliding_window, 4);
  EXPECT_LT(c.sliding_window, c.ctx_len);
  EXPECT_EQ(c.layer_sliding, (std::vector<uint8_t>{1, 0, 1, 0}));
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(c.IsSliding(l), l % 2 == 0) << l;
    EXPECT_FLOAT_EQ(c.RopeTheta(l), 1e5f) << l;
  }
  EXPECT_FLOAT_EQ(c.AttnScale(), 1.0f / std::sqrt(32.0f));
  EXPECT_GT(c.attn_logit_softcap, 0.0f);
  EXPECT_GT(c.final_logit_softcap, 0.0f);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(c.arch->qk_norm, false);
  EXPECT_EQ(c.arch->post_norms, true);
  // The file states what llama.cpp's converter writes, and no RoPE base of sliding layers.
  const std::string path = testing::TempDir() + "/gemma2_keys.gguf";
  ASSERT_TRUE(WriteRandomLlamaGguf(*spec, DType::kF32, 3, path, nullptr).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (const char* key : {"gemma2.attention.sliding_window", "gemma2.attn_logit_softcapping",
                          "gemma2.final_logit_softcapping", "gemma2.attention.key_length"}) {
    EXPECT_TRUE(f->Has(key)) << key;
  }
  EXPECT_FALSE(f->Has("gemma2.rope.freq_base_swa"));
  EXPECT_FALSE(f->Has("gemma2.attention.sliding_window_pattern"));
  EXPECT_EQ(f->FindTensor("output.weight"), nullptr);
}

// Rewrites a generated gemma2 file (n_layers layers) with its metadata minus the soft-cap and
// sliding-window keys (as in files converted before llama.cpp wrote them), plus `extra`.
std::string Gemma2File(const std::string& dir, const std::string& name,
                       const std::vector<std::pair<std::string, GgufValue>>& extra,
                       int n_layers = 4) {
  auto spec = SynthPreset("tiny", "gemma2");
  EXPECT_TRUE(spec.ok());
  spec->n_layers = n_layers;
  const std::string src = dir + "/src_" + name + ".gguf";
  EXPECT_TRUE(WriteRandomLlamaGguf(*spec, DType::kF32, 5, src, nullptr).ok());
  auto m = LoadModel(src);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  // A copy of the row without those switches: the writer then leaves their keys out.
  ArchSpec bare = *m->config.arch;
  bare.attn_softcap = bare.logit_softcap = false;
  bare.sliding_window_period = 0;
  LlamaConfig c = m->config;
  c.arch = &bare;
  // ... and without the window, which the writer refuses on a row without sliding layers.
  c.sliding_window = 0;
  c.layer_sliding.clear();
  const std::string out = dir + "/" + name + ".gguf";
  GgufWriter w;
  Status meta = AddLlamaGgufMetadata(c, m->tokenizer, name, 0, &w);
  EXPECT_TRUE(meta.ok()) << meta.ToString();
  for (const auto& [k, v] : extra) w.Add(k, v);
  for (const std::string& n : m->tensor_order) {
    const TensorView& t = m->tensors.at(n);
    w.AddTensor(n, t.dtype, t.shape, t.data);
  }
  EXPECT_TRUE(w.Write(out, nullptr).ok());
  return out;
}

// The gemma2 keys as llama.cpp reads them: absent, a file gets Gemma 2's own values (window 4096,
// soft-caps 50 and 30); a stated 0 turns a switch off; a negative or non-finite cap is an error
// naming the file, the key and the value; the 46-layer model (27B) scales queries by
// 1/sqrt(d_model / n_head).
TEST(ArchSpecTest, Gemma2KeysAsLlamaCppReadsThem) {
  const std::string dir = testing::TempDir();
  {
    auto m = LoadModel(Gemma2File(dir, "bare", {}));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const LlamaConfig& c = m->config;
    EXPECT_EQ(c.sliding_window, 4096);
    EXPECT_EQ(c.layer_sliding, (std::vector<uint8_t>{1, 0, 1, 0}));
    EXPECT_FLOAT_EQ(c.attn_logit_softcap, 50.0f);
    EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
    EXPECT_FLOAT_EQ(c.rope_theta, 1e5f);
    EXPECT_FLOAT_EQ(c.RopeTheta(0), 1e5f);  // the global base, not gemma3's 10000
    EXPECT_FLOAT_EQ(c.AttnScale(), 1.0f / std::sqrt(32.0f));
  }
  {
    auto m = LoadModel(Gemma2File(dir, "zeros",
                                  {{"gemma2.attention.sliding_window", GgufValue::U32(0)},
                                   {"gemma2.attn_logit_softcapping", GgufValue::F32(0.0f)},
                                   {"gemma2.final_logit_softcapping", GgufValue::F32(0.0f)}}));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->config.sliding_window, 0);
    EXPECT_FALSE(m->config.IsSliding(0));
    EXPECT_EQ(m->config.attn_logit_softcap, 0.0f);
    EXPECT_EQ(m->config.final_logit_softcap, 0.0f);
  }
  {
    auto m = LoadModel(Gemma2File(dir, "swa_base",
                                  {{"gemma2.attention.sliding_window", GgufValue::U32(8)},
                                   {"gemma2.rope.freq_base_swa", GgufValue::F32(500.0f)}}));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->config.sliding_window, 8);
    EXPECT_FLOAT_EQ(m->config.RopeTheta(0), 500.0f);
    EXPECT_FLOAT_EQ(m->config.RopeTheta(1), 1e5f);
  }
  {
    const std::string path =
        Gemma2File(dir, "negative", {{"gemma2.attn_logit_softcapping", GgufValue::F32(-1.0f)}});
    auto m = LoadModel(path);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(m.status().message().find(path + ": metadata 'gemma2.attn_logit_softcapping' = -1, "
                                               "expected a finite number >= 0"),
              std::string::npos)
        << m.status().message();
  }
  {
    auto m = LoadModel(Gemma2File(
        dir, "nan", {{"gemma2.final_logit_softcapping", GgufValue::F32(std::nanf(""))}}));
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("'gemma2.final_logit_softcapping' = nan"),
              std::string::npos)
        << m.status().message();
  }
  {
    auto m = LoadModel(Gemma2File(
        dir, "wrong_type", {{"gemma2.attn_logit_softcapping", GgufValue::String("50")}}));
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("gemma2.attn_logit_softcapping"), std::string::npos)
        << m.status().message();
  }
  {  // 27B: d_model / n_head = 64 / 4 = 16 here, head_dim 32
    auto m = LoadModel(Gemma2File(dir, "l46", {}, 46));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_FLOAT_EQ(m->config.AttnScale(), 0.25f);
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
  EXPECT_NE(m.status().message().find(
                "general.architecture is 'phi2'; weir loads llama, qwen2, qwen3, gemma3, qwen3moe, "
                "gemma2, phi3"),
            std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace weir::format
