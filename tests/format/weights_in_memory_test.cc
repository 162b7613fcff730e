// CopyWeightsToMemory and the placement choice: every tensor's bytes are copied exactly (GGUF and
// llama2.c, with the tied output head still sharing the embedding's bytes), the views are
// repointed and aligned, the file mapping is let go, and reading a range a mapping was told it is
// done with still gives the file's bytes.
#include "format/weights_in_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "format/mapped_file.h"
#include "format/model_file.h"
#include "format/synth_llama.h"
#include "kernels/tiled.h"
#include "testing/testing.h"
#include "tiny_model_files.h"

namespace weir::format {
namespace {

std::map<std::string, std::string> TensorBytes(const ModelFile& m) {
  std::map<std::string, std::string> out;
  for (const auto& [name, v] : m.tensors) {
    out[name] = std::string(static_cast<const char*>(v.data), v.nbytes());
  }
  return out;
}

void ExpectCopied(const std::string& path) {
  auto mapped = LoadModel(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_FALSE(mapped->weights_in_memory);
  LoadOptions o;
  o.placement = WeightPlacement::kMemory;
  ThreadPool pool(3);  // tensors copied in parallel
  o.pool = &pool;
  auto copied = LoadModel(path, o);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_TRUE(copied->weights_in_memory);
  ASSERT_EQ(copied->backing.size(), 1u);
  EXPECT_EQ(TensorBytes(*copied), TensorBytes(*mapped));
  std::map<const void*, const void*> copy_of;  // mapped address -> copied address
  for (const auto& [name, v] : copied->tensors) {
    const TensorView& src = mapped->tensors.at(name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 64, 0u) << name;
    EXPECT_NE(v.data, src.data) << name;
    EXPECT_EQ(v.dtype, src.dtype) << name;
    EXPECT_EQ(v.shape, src.shape) << name;
    // Tensors that shared bytes in the file share them in memory, and only those.
    auto [it, fresh] = copy_of.emplace(src.data, v.data);
    if (!fresh) EXPECT_EQ(it->second, v.data) << name;
  }
  std::map<const void*, int> distinct;
  for (const auto& [from, to] : copy_of) ++distinct[to];
  EXPECT_EQ(distinct.size(), copy_of.size());
  EXPECT_EQ(WeightBytesInMemory(*mapped), WeightBytesInMemory(*copied));
}

TEST(WeightsInMemoryTest, GgufBytesCopiedExactly) {
  const std::string path = testing::TempDir() + "/tiny.gguf";
  auto spec = SynthPreset("tiny");
  ASSERT_TRUE(spec.ok());
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(DTypeName(t));
    ASSERT_TRUE(WriteRandomLlamaGguf(*spec, t, 3, path, nullptr).ok());
    ExpectCopied(path);
  }
}

TEST(WeightsInMemoryTest, Llama2cTiedHeadStaysShared) {
  testdata::TinyDims d;  // shared classifier: the output head is the embedding
  testdata::Expected e;
  const std::string path = testing::TempDir() + "/tiny.bin";
  testdata::WriteFresh(path, testdata::MakeLlama2c(d, &e));
  ExpectCopied(path);
  LoadOptions o;
  o.placement = WeightPlacement::kMemory;
  auto m = LoadModel(path, o);
  ASSERT_TRUE(m.ok());
  // The values the writer stored, read from the copy.
  for (const auto& [name, values] : e.values) {
    const TensorView* v = m->Find(name);
    ASSERT_NE(v, nullptr) << name;
    ASSERT_EQ(v->dtype, DType::kF32) << name;
    ASSERT_EQ(static_cast<size_t>(v->shape.numel()), values.size()) << name;
    EXPECT_EQ(std::memcmp(v->data, values.data(), values.size() * sizeof(float)), 0) << name;
  }
}

TEST(WeightsInMemoryTest, TilesOnlyTheLinearWeights) {
  const std::string path = testing::TempDir() + "/tiny.gguf";
  auto spec = SynthPreset("tiny");
  ASSERT_TRUE(spec.ok());
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kF16}) {
    SCOPED_TRACE(DTypeName(t));
    ASSERT_TRUE(WriteRandomLlamaGguf(*spec, t, 5, path, nullptr).ok());
    auto mapped = LoadModel(path);
    ASSERT_TRUE(mapped.ok());
    LoadOptions o;
    o.placement = WeightPlacement::kMemory;
    o.tile_linear = true;
    ThreadPool pool(2);
    o.pool = &pool;
    auto tiled = LoadModel(path, o);
    ASSERT_TRUE(tiled.ok()) << tiled.status().ToString();
    int expect = 0;
    for (const auto& [name, v] : tiled->tensors) {
      const TensorView& src = mapped->tensors.at(name);
      const bool want = kernels::HasFastTiledProduct() && IsLinearWeight(name) && kernels::CanTile(src);
      expect += want;
      ASSERT_EQ(v.layout, want ? Layout::kTiled16 : Layout::kRowMajor) << name;
      std::vector<uint8_t> row(v.row_bytes());
      for (int64_t r = 0; r < v.rows(); ++r) {
        if (want) {
          kernels::UntileRow(v, r, row.data());
        } else {
          std::memcpy(row.data(), v.row(r), row.size());
        }
        ASSERT_EQ(std::memcmp(row.data(), src.row(r), row.size()), 0) << name << " row " << r;
      }
    }
    EXPECT_EQ(tiled->TiledTensorCount(), expect);
    // Every projection of the tiny preset has a multiple of 16 rows; F16 is never tiled.
    if (kernels::HasFastTiledProduct() && t != DType::kF16) {
      EXPECT_EQ(expect, 7 * spec->n_layers + 1);
    } else {
      EXPECT_EQ(expect, 0);
    }
    EXPECT_EQ(tiled->tensors.at("token_embd.weight").layout, Layout::kRowMajor);
  }
  EXPECT_TRUE(IsLinearWeight("blk.0.attn_q.weight"));
  EXPECT_TRUE(IsLinearWeight("blk.12.ffn_down.weight"));
  EXPECT_TRUE(IsLinearWeight("output.weight"));
  EXPECT_FALSE(IsLinearWeight("token_embd.weight"));
  EXPECT_FALSE(IsLinearWeight("blk.0.attn_norm.weight"));
  EXPECT_FALSE(IsLinearWeight("blk.0.ffn_down.weight.x"));
}

TEST(WeightsInMemoryTest, AutoCopiesOnlyWhatFitsInThreeQuarters) {
  EXPECT_TRUE(AutoPlacementCopies(750, 1000));
  EXPECT_FALSE(AutoPlacementCopies(751, 1000));
  EXPECT_FALSE(AutoPlacementCopies(1, std::nullopt));
  EXPECT_FALSE(AutoPlacementCopies(1, 0));
  // Auto on a tiny model on this machine: it fits.
  const std::string path = testing::TempDir() + "/tiny.gguf";
  auto spec = SynthPreset("tiny");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(WriteRandomLlamaGguf(*spec, DType::kQ8_0, 3, path, nullptr).ok());
  LoadOptions o;
  o.placement = WeightPlacement::kAuto;
  auto m = LoadModel(path, o);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->weights_in_memory);
}

TEST(WeightsInMemoryTest, MappingReadAgainAfterDoneReading) {
  const std::string path = testing::TempDir() + "/pages.bin";
  std::string bytes(5 * 4096 + 123, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);
  testdata::WriteFresh(path, bytes);
  auto f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok());
  const uint8_t* p = (*f)->data();
  ASSERT_EQ(std::memcmp(p, bytes.data(), bytes.size()), 0);
  (*f)->DoneReading(p + 100, 3 * 4096);  // drops pages 1 and 2 only
  (*f)->DoneReading(p, bytes.size());
  (*f)->DoneReading(p + bytes.size() - 10, 20);  // past the end: ignored
  (*f)->DoneReading(bytes.data(), 10);           // not its memory: ignored
  EXPECT_EQ(std::memcmp(p, bytes.data(), bytes.size()), 0);
}

}  // namespace
}  // namespace weir::format
