// Mixture-of-experts rows of the architecture table as the GGUF loader reads them: a "llama"
// file with expert_count > 0 is Mixtral, qwen3moe reads the experts' width from
// expert_feed_forward_length, and a file whose expert metadata or tensors do not add up is a
// clear error naming the file, the key or tensor and both values.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "format/arch_spec.h"
#include "format/gguf_reader.h"
#include "format/gguf_writer.h"
#include "format/llama_gguf_writer.h"
#include "format/model_file.h"
#include "format/synth_llama.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

// A generated tiny model of `arch`, rewritten with `edit` applied to its config and tensors and
// `extra` keys appended (the writer would refuse what these tests need, so it is done by hand).
std::string Rewrite(const std::string& arch, const std::string& name,
                    const std::function<void(ModelFile*)>& edit,
                    const std::vector<std::pair<std::string, GgufValue>>& extra = {}) {
  const std::string dir = testing::TempDir();
  auto spec = SynthPreset("tiny", arch);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  const std::string src = dir + "/src_" + name + ".gguf";
  EXPECT_TRUE(WriteRandomLlamaGguf(*spec, DType::kF32, 5, src, nullptr).ok());
  auto m = LoadModel(src);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (edit) edit(&*m);
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

void ExpectError(const Result<ModelFile>& m, Status::Code code, const std::string& text) {
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), code) << m.status().ToString();
  EXPECT_NE(m.status().message().find(text), std::string::npos) << m.status().message();
}

TEST(MoeFormatTest, RowsAndNames) {
  const ArchSpec* mixtral = FindArch("mixtral");
  const ArchSpec* qwen = FindArch("qwen3moe");
  ASSERT_NE(mixtral, nullptr);
  ASSERT_NE(qwen, nullptr);
  EXPECT_STREQ(mixtral->gguf_name, "llama");
  EXPECT_TRUE(mixtral->moe && qwen->moe && qwen->qk_norm && !mixtral->qk_norm);
  EXPECT_EQ(FindGgufArch("llama", false), &LlamaArch());
  EXPECT_EQ(FindGgufArch("llama", true), mixtral);
  EXPECT_EQ(FindGgufArch("qwen3moe", false), qwen);  // then refused for its expert count
  EXPECT_EQ(FindGgufArch("qwen3", true), FindArch("qwen3"));
  EXPECT_EQ(GgufArchNameList(), "llama, qwen2, qwen3, gemma3, qwen3moe, gemma2, phi3");
  LlamaConfig c;
  c.d_model = 64, c.n_layers = 1, c.n_expert = 8, c.layers = {{4, 2, 96}};
  const TensorSpec* down = FindTensorSpec(*mixtral, TensorRole::kFfnDownExps);
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(ExpectedShape(*down, c, 0), (Shape{8, 64, 96}));
  EXPECT_EQ(ShapeDerivation(*down), "[n_expert, d_model, d_ff]");
  EXPECT_EQ(ExpectedShape(*FindTensorSpec(*qwen, TensorRole::kFfnGateInp), c, 0), (Shape{8, 64}));
}

TEST(MoeFormatTest, GeneratedFilesLoadWithTheirExperts) {
  for (const char* arch : {"mixtral", "qwen3moe"}) {
    SCOPED_TRACE(arch);
    const std::string path = Rewrite(arch, std::string("ok_") + arch, nullptr);
    auto g = GgufFile::Open(path);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(*g->GetString("general.architecture"), FindArch(arch)->gguf_name);
    auto m = LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const SynthSpec spec = *SynthPreset("tiny", arch);
    EXPECT_EQ(m->config.arch, FindArch(arch));
    EXPECT_EQ(m->config.n_expert, spec.n_expert);
    EXPECT_EQ(m->config.n_expert_used, spec.n_expert_used);
    EXPECT_EQ(m->config.d_ff, spec.d_ff);
    EXPECT_TRUE(m->config.expert_weights_norm);
    // The router is F32 whatever the weight type, as llama-quantize leaves it.
    EXPECT_EQ(m->Find("blk.0.ffn_gate_inp.weight")->dtype, DType::kF32);
    EXPECT_EQ(m->Find("blk.1.ffn_up_exps.weight")->shape,
              (Shape{spec.n_expert, spec.d_ff, spec.d_model}));
  }
}

TEST(MoeFormatTest, ExpertFeedForwardLengthIsTheExpertsWidth) {
  // qwen3moe's feed_forward_length is a dense width no layer has (6144 in Qwen3-30B-A3B); the
  // experts' width is expert_feed_forward_length, written by weir, and the one read.
  const std::string path = Rewrite("qwen3moe", "fflen", nullptr);
  auto g = GgufFile::Open(path);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g->GetI64("qwen3moe.expert_feed_forward_length"), 32);
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->config.layers[1].d_ff, 32);
}

TEST(MoeFormatTest, MoreExpertsUsedThanThereAreIsAnError) {
  const std::string path =
      Rewrite("mixtral", "used9", [](ModelFile* m) { m->config.n_expert_used = 9; });
  ExpectError(LoadModel(path), Status::Code::kInvalidArgument,
              path + ": metadata 'llama.expert_used_count' = 9 exceeds 'llama.expert_count' = 8");
}

TEST(MoeFormatTest, ZeroExpertsIsAnError) {
  // qwen3moe has no dense form: zero experts is an error about the key.
  const std::string q = Rewrite("qwen3moe", "zero_q", [](ModelFile* m) { m->config.n_expert = 0; });
  ExpectError(LoadModel(q), Status::Code::kInvalidArgument,
              q + ": metadata 'qwen3moe.expert_count' = 0, but qwen3moe is a mixture-of-experts");
  // A llama file without experts is a dense Llama, whose MLP tensors a Mixtral file lacks.
  const std::string l = Rewrite("mixtral", "zero_l", [](ModelFile* m) { m->config.n_expert = 0; });
  ExpectError(LoadModel(l), Status::Code::kCorrupt,
              "required tensor blk.0.ffn_gate.weight is missing");
  // Zero experts used.
  const std::string u =
      Rewrite("mixtral", "used0", [](ModelFile* m) { m->config.n_expert_used = 0; });
  ExpectError(LoadModel(u), Status::Code::kInvalidArgument,
              "metadata 'llama.expert_used_count' = 0 is out of range [1, 1024]");
}

TEST(MoeFormatTest, TooManyExpertsIsAnError) {
  const std::string path =
      Rewrite("mixtral", "many", [](ModelFile* m) { m->config.n_expert = 5000; });
  ExpectError(LoadModel(path), Status::Code::kInvalidArgument,
              "metadata 'llama.expert_count' = 5000 is out of range [0, 1024]");
}

TEST(MoeFormatTest, ShapeMismatchesNameTheTensorAndTheDerivation) {
  {  // the file says 8 experts, layer 1's stack holds 7
    const std::string path = Rewrite("mixtral", "seven", [](ModelFile* m) {
      TensorView& v = m->tensors["blk.1.ffn_down_exps.weight"];
      v.shape = Shape{7, v.shape[1], v.shape[2]};
    });
    ExpectError(LoadModel(path), Status::Code::kCorrupt,
                path +
                    ": tensor blk.1.ffn_down_exps.weight has shape [7, 64, 64], expected "
                    "[n_expert, d_model, d_ff] = [8, 64, 64]");
  }
  {  // a router for fewer experts
    const std::string path = Rewrite("qwen3moe", "router", [](ModelFile* m) {
      TensorView& v = m->tensors["blk.0.ffn_gate_inp.weight"];
      v.shape = Shape{12, v.shape[1]};
    });
    ExpectError(LoadModel(path), Status::Code::kCorrupt,
                "tensor blk.0.ffn_gate_inp.weight has shape [12, 64], expected [n_expert, d_model] "
                "= [16, 64]");
  }
  {  // an expert stack stored 2-D
    const std::string path = Rewrite("mixtral", "flat", [](ModelFile* m) {
      TensorView& v = m->tensors["blk.0.ffn_gate_exps.weight"];
      v.shape = Shape{v.shape[0] * v.shape[1], v.shape[2]};
    });
    ExpectError(LoadModel(path), Status::Code::kCorrupt,
                "tensor blk.0.ffn_gate_exps.weight has shape [512, 64], expected");
  }
  {  // a missing expert stack
    const std::string path = Rewrite(
        "qwen3moe", "noup", [](ModelFile* m) { m->tensors.erase("blk.1.ffn_up_exps.weight"); });
    ExpectError(LoadModel(path), Status::Code::kCorrupt,
                "required tensor blk.1.ffn_up_exps.weight is missing (expected shape "
                "[n_expert, d_ff, d_model] = [16, 32, 64])");
  }
}

TEST(MoeFormatTest, WhatWeirDoesNotComputeIsRefusedByName) {
  const std::string shared =
      Rewrite("qwen3moe", "shared", nullptr, {{"qwen3moe.expert_shared_count", GgufValue::U32(1)}});
  ExpectError(LoadModel(shared), Status::Code::kUnsupported, "expert_shared_count' = 1");
  const std::string sigmoid =
      Rewrite("mixtral", "sigmoid", nullptr, {{"llama.expert_gating_func", GgufValue::U32(2)}});
  ExpectError(LoadModel(sigmoid), Status::Code::kUnsupported, "expert_gating_func' = 2");
}

// weir convert: expert stacks are converted like any weight, the router keeps its type, and the
// file loads back as the same architecture with the same experts.
TEST(MoeFormatTest, ConvertKeepsTheRouterAndConvertsTheExperts) {
  for (const char* arch : {"mixtral", "qwen3moe"}) {
    SCOPED_TRACE(arch);
    auto m = LoadModel(Rewrite(arch, std::string("conv_src_") + arch, nullptr));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const std::string out = testing::TempDir() + "/conv_" + arch + ".gguf";
    ASSERT_TRUE(WriteLlamaGguf(*m, out, DType::kQ8_0).ok());
    auto back = LoadModel(out);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->config.arch, FindArch(arch));
    EXPECT_EQ(back->config.n_expert, m->config.n_expert);
    EXPECT_EQ(back->config.n_expert_used, m->config.n_expert_used);
    EXPECT_EQ(back->Find("blk.1.ffn_gate_inp.weight")->dtype, DType::kF32);
    EXPECT_EQ(back->Find("blk.1.ffn_down_exps.weight")->dtype, DType::kQ8_0);
    EXPECT_EQ(back->Find("blk.1.ffn_down_exps.weight")->shape,
              m->Find("blk.1.ffn_down_exps.weight")->shape);
  }
}

TEST(MoeFormatTest, ExpertWeightsNormIsReadAndWritten) {
  const std::string path =
      Rewrite("qwen3moe", "nonorm", [](ModelFile* m) { m->config.expert_weights_norm = false; });
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->config.expert_weights_norm);
}

}  // namespace
}  // namespace weir::format
