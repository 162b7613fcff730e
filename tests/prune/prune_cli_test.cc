// `weir prune` and `weir prune-eval` as a user runs them: a pruned model with per-layer dims that
// `weir inspect` describes, the JSON report, Gemma 3 and Phi-3 models, and clear errors for bad
// arguments (P outside [0, 1), unknown method or mode, missing or empty calibration text, a model
// without the projections), refusals before calibration. Skips when the weir binary has not been
// built.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "format/gguf_writer.h"
#include "format/llama_gguf_writer.h"
#include "prune_test_util.h"

namespace weir::prune {
namespace {

bool HaveWeir() { return testing::FileExists(testing::WeirBin()); }

struct Files {
  std::string dir, model, text;
};

Files MakeFiles() {
  Files f;
  f.model = testutil::WriteTinyModel();
  f.dir = testing::TempDir();
  f.text = f.dir + "/calib.txt";
  testing::WriteFile(f.text, testutil::CalibrationText(2000));
  return f;
}

std::string Prune(const Files& f, const std::string& args) {
  return testing::WeirBin() + " prune -m " + f.model + " -f " + f.text +
         " --no-progress --nsamples 4 --seqlen 64 " + args;
}

TEST(PruneCliTest, StructuredModelWithPerLayerDims) {
  if (!HaveWeir()) GTEST_SKIP() << "no weir binary at " << testing::WeirBin();
  const Files f = MakeFiles();
  const std::string out = f.dir + "/out.gguf";
  auto r = testing::RunCommand(
      Prune(f, "--target 0.5 --method projection --mode structured --json -o " + out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["mean_params"].get<double>(), 0.5, 0.005);
  EXPECT_EQ(j["layers"].size(), 2u);
  EXPECT_LT(j["params_after"].get<int64_t>(), j["params_before"].get<int64_t>());
  EXPECT_EQ(j["calibration"]["sequences"].get<int>(), 4);
  EXPECT_TRUE(j["layers"][0]["projections"]["q"].contains("outlier_ratio"));
  // weir inspect shows the pruned per-layer dims and the targets.
  auto ins = testing::RunCommand(testing::WeirBin() + " inspect --json --metadata -m " + out);
  ASSERT_EQ(ins.exit_code, 0) << ins.err;
  const auto k = nlohmann::json::parse(ins.out);
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(k["layers"][l]["n_head"], j["layers"][l]["dims_after"]["n_head"]);
    EXPECT_EQ(k["layers"][l]["d_ff"], j["layers"][l]["dims_after"]["d_ff"]);
    EXPECT_LT(k["layers"][l]["d_ff"].get<int>(), 192);
  }
  EXPECT_EQ(k["metadata"]["weir.prune.mode"], "structured");
  // The pruned model runs.
  auto ppl = testing::RunCommand(testing::WeirBin() + " ppl --no-progress -c 64 -m " + out +
                                 " -f " + f.text);
  EXPECT_EQ(ppl.exit_code, 0) << ppl.err;
  // The text table.
  auto txt =
      testing::RunCommand(Prune(f, "--target 0.3 --method layer --mode unstructured -o " + out));
  ASSERT_EQ(txt.exit_code, 0) << txt.err;
  EXPECT_NE(txt.out.find("method layer, P = 0.3000"), std::string::npos) << txt.out;
  EXPECT_NE(txt.out.find("gate"), std::string::npos);
}

TEST(PruneCliTest, BadArgumentsAreClearErrors) {
  if (!HaveWeir()) GTEST_SKIP() << "no weir binary at " << testing::WeirBin();
  const Files f = MakeFiles();
  const std::string out = f.dir + "/bad.gguf";
  for (const char* p : {"1", "1.5", "-0.2"}) {
    auto r = testing::RunCommand(Prune(f, std::string("--target ") + p + " -o " + out));
    EXPECT_EQ(r.exit_code, 2) << p;
    EXPECT_NE(r.err.find("outside [0, 1)"), std::string::npos) << r.err;
  }
  auto m = testing::RunCommand(Prune(f, "--target 0.2 --method owl -o " + out));
  EXPECT_EQ(m.exit_code, 2);
  EXPECT_NE(m.err.find("owl"), std::string::npos) << m.err;
  auto missing = testing::RunCommand(testing::WeirBin() + " prune -m " + f.model + " -f " + f.dir +
                                     "/nope.txt --target 0.2 -o " + out);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nope.txt"), std::string::npos) << missing.err;
  testing::WriteFile(f.dir + "/empty.txt", "");
  auto empty = testing::RunCommand(testing::WeirBin() + " prune --no-progress -m " + f.model +
                                   " -f " + f.dir + "/empty.txt --target 0.2 -o " + out);
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("empty.txt"), std::string::npos) << empty.err;
  EXPECT_FALSE(testing::FileExists(out));

  // A GGUF whose layer 1 has no ffn_gate.
  auto model = testutil::LoadOrDie(f.model);
  ASSERT_TRUE(model);
  format::GgufWriter w;
  ASSERT_TRUE(
      format::AddLlamaGgufMetadata(model->config(), model->file().tokenizer, "no-gate", 0, &w)
          .ok());
  for (const std::string& name : format::LlamaTensorNames(model->config())) {
    if (name == "blk.1.ffn_gate.weight") continue;
    const TensorView& v = *model->file().Find(name);
    w.AddTensor(name, v.dtype, v.shape, v.data);
  }
  const std::string no_gate = f.dir + "/no_gate.gguf";
  ASSERT_TRUE(w.Write(no_gate).ok());
  auto ng = testing::RunCommand(testing::WeirBin() + " prune --no-progress -m " + no_gate + " -f " +
                                f.text + " --target 0.2 -o " + out);
  EXPECT_EQ(ng.exit_code, 1);
  EXPECT_NE(ng.err.find("blk.1.ffn_gate.weight"), std::string::npos) << ng.err;
}

// Gemma 3 (QK-norm, post-norms, GeGLU, sliding layers) and Phi-3 (fused tensors) through the
// command: a structured model that `weir inspect` and `weir ppl` read.
TEST(PruneCliTest, OtherArchitecturesPruneAndRun) {
  if (!HaveWeir()) GTEST_SKIP() << "no weir binary at " << testing::WeirBin();
  Files f = MakeFiles();
  for (const char* arch : {"gemma3", "phi3"}) {
    f.model = testutil::WriteTinyArchModel(arch);
    const std::string out = f.dir + "/out-" + arch + ".gguf";
    auto r = testing::RunCommand(
        Prune(f, "--target 0.4 --method projection --mode composite --json -o " + out));
    ASSERT_EQ(r.exit_code, 0) << arch << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_LT(j["params_after"].get<int64_t>(), j["params_before"].get<int64_t>()) << arch;
    auto ins = testing::RunCommand(testing::WeirBin() + " inspect --json -m " + out);
    ASSERT_EQ(ins.exit_code, 0) << ins.err;
    EXPECT_NE(ins.out.find(arch), std::string::npos) << ins.out;
    auto ppl = testing::RunCommand(testing::WeirBin() + " ppl --no-progress -c 64 -m " + out +
                                   " -f " + f.text);
    EXPECT_EQ(ppl.exit_code, 0) << arch << ": " << ppl.err;
  }
}

// Refusals come before calibration: with an empty calibration text (which calibration would
// reject, naming the file) the error is the model's, not the text's.
TEST(PruneCliTest, RefusalsComeBeforeCalibration) {
  if (!HaveWeir()) GTEST_SKIP() << "no weir binary at " << testing::WeirBin();
  const Files f = MakeFiles();
  const std::string empty = f.dir + "/empty-calib.txt", out = f.dir + "/refused.gguf";
  testing::WriteFile(empty, "");
  auto run = [&](const std::string& model, const std::string& args) {
    return testing::RunCommand(testing::WeirBin() + " prune --no-progress -m " + model + " -f " +
                               empty + " " + args + " -o " + out);
  };
  for (const char* arch : {"mixtral", "qwen3moe"}) {
    auto r = run(testutil::WriteTinyArchModel(arch), "--target 0.3");
    EXPECT_EQ(r.exit_code, 1) << arch;
    EXPECT_NE(r.err.find(std::string("mixture-of-experts architecture ") + arch), std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("empty-calib.txt"), std::string::npos) << r.err;
  }
  // Gemma 3 27B's query scale follows its head count: no structured pruning.
  const std::string g62 = testutil::WriteTinyArchModel(
      "gemma3", [](format::SynthSpec& s) { s.n_layers = 62; }, "-62");
  auto r = run(g62, "--target 0.3 --mode structured");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("query scale"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("empty-calib.txt"), std::string::npos) << r.err;
  // An output directory that does not exist.
  auto d = testing::RunCommand(testing::WeirBin() + " prune --no-progress -m " +
                               testutil::WriteTinyArchModel("gemma3") + " -f " + empty +
                               " --target 0.3 -o " + f.dir + "/no/such/dir/x.gguf");
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_NE(d.err.find("no/such/dir"), std::string::npos) << d.err;
  EXPECT_EQ(d.err.find("empty-calib.txt"), std::string::npos) << d.err;
  EXPECT_FALSE(testing::FileExists(out));
}

TEST(PruneEvalCliTest, SmallGridAsJson) {
  if (!HaveWeir()) GTEST_SKIP() << "no weir binary at " << testing::WeirBin();
  const Files f = MakeFiles();
  auto r =
      testing::RunCommand(testing::WeirBin() +
                          " prune-eval --json --no-progress -c 64 --chunks 2 --decode 8 "
                          "--nsamples 2 --seqlen 64 --targets 0.3,0.6 --methods global,projection "
                          "--modes unstructured,composite -m " +
                          f.model + " -f " + f.text + " --tmp " + f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 1u + 2 * 2 * 2);
  EXPECT_EQ(j["rows"][0]["method"], "dense");
  const uint64_t dense_bytes = j["rows"][0]["file_bytes"].get<uint64_t>();
  for (size_t i = 1; i < j["rows"].size(); ++i) {
    const auto& row = j["rows"][i];
    EXPECT_NEAR(row["sparsity"].get<double>(), row["p"].get<double>(),
                row["mode"] == "unstructured" ? 0.005 : 0.1);
    // Unstructured pruning leaves the tensors' size alone (the file gains only the metadata).
    if (row["mode"] == "unstructured") {
      EXPECT_NEAR(static_cast<double>(row["file_bytes"].get<uint64_t>()), dense_bytes, 2048);
    }
    if (row["mode"] == "composite") {
      EXPECT_LT(row["file_bytes"].get<uint64_t>(), dense_bytes);
    }
    EXPECT_GT(row["ppl"]["calib.txt"].get<double>(), 1.0);
  }
  auto bad = testing::RunCommand(testing::WeirBin() + " prune-eval --targets 0.2,1.2 -m " +
                                 f.model + " -f " + f.text);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("1.2"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace weir::prune
