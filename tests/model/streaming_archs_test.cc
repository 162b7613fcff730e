// Every dense row of the architecture table streams: a generated tiny model of each (llama,
// qwen2, qwen3, gemma2, gemma3, phi3, and a Llama with Mistral's sliding window) packed in each
// dense layout and run under a budget that holds a quarter of what the pack streams gives the
// tokens and logits of the same pack with everything resident, bit for bit; a column pack does
// so under a sparsity policy too; and the pack runs close to the source model it was made from.
// A pack of an architecture the table lacks is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "format/gguf_reader.h"
#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_reader.h"
#include "format/weir_pack_writer.h"
#include "model/model.h"
#include "model/streaming_test_util.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

using streaming_test::Config;
using streaming_test::Memory;
using streaming_test::RunPack;
using streaming_test::Same;
using streaming_test::Trace;

constexpr int kSteps = 8;  // 5 prompt tokens and 8 more: the tiny Gemmas' windows of 4 wrap

// The tiny model of `arch` ("mistral": llama's tiny with a window of 4 on every layer, as a
// Hugging Face Mistral states it) loaded from a generated GGUF.
format::ModelFile TinySource(const std::string& arch, DType type) {
  const std::string row = arch == "mistral" ? "llama" : arch;
  const std::string path = testing::TempDir() + "/stream_" + arch + ".gguf";
  auto spec = format::SynthPreset("tiny", row);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(format::WriteRandomLlamaGguf(*spec, type, 23, path, nullptr).ok());
  auto m = format::LoadModel(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  format::ModelFile f = std::move(m).value();
  if (arch == "mistral") {
    f.config.sliding_window = 4;
    f.config.layer_sliding.assign(static_cast<size_t>(f.config.n_layers), 1);
    f.config.rope_theta_sliding = f.config.rope_theta;
  }
  return f;
}

std::string Pack(const format::ModelFile& src, const std::string& arch, format::PackLayout layout) {
  const std::string path = testing::TempDir() + "/stream_" + arch + "_" +
                           format::PackLayoutName(layout) + ".weir";
  format::PackOptions o;
  o.layout = layout;
  const Status st = format::WritePack(src, path, o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return path;
}

using testing::MaxRelDiff;

// The logits of a's steps before its tokens first differ from b's (at least the prompt's).
std::vector<float> SharedPrefix(const Trace& a, const Trace& b) {
  const size_t vocab = a.logits.size() / (a.tokens.size() + 1);
  size_t steps = 1;
  while (steps <= a.tokens.size() && steps <= b.tokens.size() &&
         a.tokens[steps - 1] == b.tokens[steps - 1]) {
    ++steps;
  }
  return std::vector<float>(a.logits.begin(), a.logits.begin() + steps * vocab);
}

struct Param {
  const char* arch;
  DType type;
};

class StreamingArchTest : public ::testing::TestWithParam<Param> {};

TEST_P(StreamingArchTest, EveryLayoutStreamedAtAQuarterIsTheResidentPack) {
  const Param p = GetParam();
  const format::ModelFile src = TinySource(p.arch, p.type);
  // The source model itself, every weight in memory (the oracle of "close to the source").
  auto model = Model::FromFile(format::ModelFile(src));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ThreadPool pool(2);
  auto source = streaming_test::Generate(**model, nullptr, nullptr, &pool, kSteps);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  for (format::PackLayout layout : {format::PackLayout::kBundles, format::PackLayout::kColumns,
                                    format::PackLayout::kSparseColumns}) {
    SCOPED_TRACE(std::string(p.arch) + " " + format::PackLayoutName(layout));
    const std::string pack = Pack(src, p.arch, layout);
    auto opened = format::PackFile::Open(pack);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    EXPECT_EQ(opened->config().arch, src.config.arch);
    EXPECT_EQ(opened->config().sliding_window, src.config.sliding_window);
    EXPECT_EQ(opened->config().layer_sliding, src.config.layer_sliding);
    // Column packs also run sparse (the layout's reason to be).
    std::vector<std::string> specs = {""};
    if (layout == format::PackLayout::kColumns) specs.push_back("dip:0.5");
    for (const std::string& spec : specs) {
      SCOPED_TRACE("sparsity '" + spec + "'");
      auto resident = RunPack(pack, Memory(pack), Config(UINT64_MAX, "lru"), spec, &pool, kSteps);
      ASSERT_TRUE(resident.ok()) << resident.status().ToString();
      const uint64_t quarter = resident->plan.minimum() + resident->plan.streamed_bytes / 4;
      auto streamed = RunPack(pack, Memory(pack), Config(quarter, "lru"), spec, &pool, kSteps);
      ASSERT_TRUE(streamed.ok()) << streamed.status().ToString();
      EXPECT_TRUE(Same(streamed->trace, resident->trace));
      if (spec.empty()) {
        // The budget bit: blocks were read again (a quarter does not hold the pack).
        EXPECT_GT(streamed->stats.storage_bytes, resident->plan.streamed_bytes);
        // Dense: the source model's computation up to the order of the MLP's sums (and Q8_0's
        // requantized W_down^T in column packs).
        // Compared while both saw the same tokens (a random model's near-ties may part them).
        const double tol = p.type == DType::kF32 ? 1e-4 : 5e-2;
        EXPECT_LT(MaxRelDiff(SharedPrefix(resident->trace, *source),
                             SharedPrefix(*source, resident->trace)),
                  tol);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Archs, StreamingArchTest,
    ::testing::Values(Param{"llama", DType::kF32}, Param{"qwen2", DType::kF32},
                      Param{"qwen3", DType::kQ8_0}, Param{"gemma2", DType::kF32},
                      Param{"gemma3", DType::kQ8_0}, Param{"gemma3", DType::kF32},
                      Param{"phi3", DType::kQ8_0}, Param{"mistral", DType::kF32}),
    [](const ::testing::TestParamInfo<Param>& i) {
      return std::string(i.param.arch) + "_" + DTypeName(i.param.type);
    });

// Mistral's window is the pack's own key: without it the same weights give other logits, so the
// key is what the streamed run obeys.
TEST(StreamingArchWindowTest, MistralsWindowChangesTheStreamedLogits) {
  ThreadPool pool(2);
  format::ModelFile windowed = TinySource("mistral", DType::kF32);
  format::ModelFile plain = windowed;
  plain.config.sliding_window = 0;
  plain.config.layer_sliding.clear();
  const std::string a = Pack(windowed, "mistral", format::PackLayout::kBundles);
  const std::string b = Pack(plain, "llama_plain", format::PackLayout::kBundles);
  auto ra = RunPack(a, Memory(a), Config(UINT64_MAX, "lru"), &pool, kSteps);
  auto rb = RunPack(b, Memory(b), Config(UINT64_MAX, "lru"), &pool, kSteps);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_GT(MaxRelDiff(ra->trace.logits, rb->trace.logits), 1e-3);
}

// A pack whose general.architecture names no row of the table: refused by name.
TEST(StreamingArchWindowTest, AnArchitectureTheTableLacksIsRefusedByName) {
  const format::ModelFile src = TinySource("llama", DType::kF32);
  const std::string pack = Pack(src, "llama", format::PackLayout::kBundles);
  std::string bytes = testing::ReadFile(pack);
  // "general.architecture" holds the 5 bytes "llama": the same length, another name.
  const std::string key = "general.architecture";
  auto at = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(at, bytes.end());
  const size_t value = static_cast<size_t>(at - bytes.begin()) + key.size() + 4 + 8;
  ASSERT_EQ(bytes.substr(value, 5), "llama");
  bytes.replace(value, 5, "mamba");
  const std::string other = testing::TempDir() + "/stream_mamba.weir";
  testing::WriteFile(other, bytes);
  auto opened = format::PackFile::Open(other);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("mamba"), std::string::npos)
      << opened.status().ToString();
}

}  // namespace
}  // namespace weir::model
