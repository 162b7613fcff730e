// PackFile: a valid pack opens; damaged packs (wrong version, layout, alignment, group arrays,
// bundle shape, a missing tensor, a plain GGUF) give errors that name the file and the field.
#include "format/weir_pack_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "format/gguf_writer.h"
#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_writer.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

class PackReader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir();
    SynthSpec s;
    s.d_model = 64;
    s.n_layers = 4;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.d_ff = 64;
    s.vocab_size = 280;
    gguf_ = dir_ + "/m.gguf";
    ASSERT_TRUE(WriteRandomLlamaGguf(s, DType::kQ8_0, 3, gguf_, nullptr).ok());
    auto m = LoadModel(gguf_);
    ASSERT_TRUE(m.ok());
    PackOptions o;
    o.group_size = 2;
    pack_ = dir_ + "/m.weir";
    ASSERT_TRUE(WritePack(*m, pack_, o).ok());
    bytes_ = testing::ReadFile(pack_);
  }

  // Writes the pack with `edit` applied and returns the error of opening it.
  Status OpenEdited(const std::function<void(std::string*)>& edit) {
    std::string b = bytes_;
    edit(&b);
    const std::string p = dir_ + "/edited.weir";
    testing::WriteFile(p, b);
    auto r = PackFile::Open(p);
    return r.ok() ? Status::Ok() : r.status();
  }

  // Offset of the value of metadata key `key` (just after its u32 type tag).
  size_t ValueOffset(const std::string& key) const {
    const size_t at = bytes_.find(key);
    EXPECT_NE(at, std::string::npos) << key;
    return at + key.size() + 4;
  }

  std::string dir_, gguf_, pack_, bytes_;
};

void PutU32(std::string* b, size_t at, uint32_t v) { std::memcpy(b->data() + at, &v, 4); }

TEST_F(PackReader, OpensValidPack) {
  auto p = PackFile::Open(pack_);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->groups().size(), 2u);
  EXPECT_EQ(p->groups()[1].first_layer, 2);
  EXPECT_EQ(p->path(), pack_);
  EXPECT_GT(p->static_bytes(), 0u);
  EXPECT_GT(p->bundle_bytes(), 0u);
}

TEST_F(PackReader, PlainGgufIsNotAPack) {
  auto g = GgufFile::Open(gguf_);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(PackFile::IsPack(*g));
  auto p = PackFile::Open(gguf_);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("not a weir pack"), std::string::npos)
      << p.status().ToString();
  EXPECT_NE(p.status().message().find(gguf_), std::string::npos);
}

TEST_F(PackReader, WrongVersion) {
  Status st = OpenEdited([&](std::string* b) { PutU32(b, ValueOffset("weir.pack.version"), 7); });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("weir.pack.version is 7"), std::string::npos) << st.ToString();
}

TEST_F(PackReader, WrongLayout) {
  Status st = OpenEdited([&](std::string* b) {
    const size_t at = ValueOffset("weir.pack.layout") + 8;  // after the string's u64 length
    (*b)[at] = 'X';
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("weir.pack.layout is 'Xfn_bundles"), std::string::npos)
      << st.ToString();
}

TEST_F(PackReader, GroupArrays) {
  // group_layer_count is a u32 array: type u32, count u64, then the values {2, 2}.
  const size_t counts = ValueOffset("weir.pack.group_layer_count") + 4 + 8;
  Status st = OpenEdited([&](std::string* b) { PutU32(b, counts, 3); });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layer group 0 starts at layer 0 with 3 layers"), std::string::npos)
      << st.ToString();
  st = OpenEdited([&](std::string* b) { PutU32(b, counts + 4, 1); });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("weir.ffn_bundles.1 has shape [384, 64], expected"),
            std::string::npos)
      << st.ToString();  // group 1 now claims 1 layer: its tensor is checked first
  const size_t firsts = ValueOffset("weir.pack.group_first_layer") + 4 + 8;
  st = OpenEdited([&](std::string* b) { PutU32(b, firsts + 4, 1); });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layer group 1 starts at layer 1"), std::string::npos)
      << st.ToString();
  st = OpenEdited([&](std::string* b) { PutU32(b, ValueOffset("weir.pack.group_size"), 1); });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("with 1..1 layers"), std::string::npos) << st.ToString();
}

TEST_F(PackReader, BundleTensorMissingOrMisshaped) {
  Status st = OpenEdited([&](std::string* b) {
    const size_t at = b->find("weir.ffn_bundles.1");
    ASSERT_NE(at, std::string::npos);
    (*b)[at + 17] = '7';  // renamed to weir.ffn_bundles.7
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("MLP tensor weir.ffn_bundles.1 of layers 2..3 is missing"),
            std::string::npos)
      << st.ToString();
  st = OpenEdited([&](std::string* b) {
    // ne[0] (d_model) of weir.ffn_bundles.0: name, u32 n_dims, then u64 dims innermost first.
    const size_t at = b->find("weir.ffn_bundles.0") + 18 + 4;
    const uint64_t ne0 = 32;
    std::memcpy(b->data() + at, &ne0, 8);
    const uint64_t ne1 = 64 * 2 * 3 * 2;  // same bytes, other shape
    std::memcpy(b->data() + at + 8, &ne1, 8);
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("weir.ffn_bundles.0 has shape [768, 32]"), std::string::npos)
      << st.ToString();
}

TEST_F(PackReader, Alignment) {
  // general.alignment is not written by weir's default writer, so a pack names it explicitly.
  Status st =
      OpenEdited([&](std::string* b) { PutU32(b, ValueOffset("general.alignment"), 8192); });
  ASSERT_FALSE(st.ok());  // tensors are no longer multiples of 8192 (or the header moves)
}

TEST_F(PackReader, StaticTensorMissing) {
  Status st = OpenEdited([&](std::string* b) {
    const size_t at = b->find("blk.3.attn_v.weight");
    ASSERT_NE(at, std::string::npos);
    (*b)[at + 9] = 'w';  // attn_w
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("static tensor blk.3.attn_v.weight is missing"), std::string::npos)
      << st.ToString();
}

TEST_F(PackReader, TruncatedFile) {
  Status st = OpenEdited([&](std::string* b) { b->resize(b->size() - 5000); });
  ASSERT_FALSE(st.ok());
}

}  // namespace
}  // namespace weir::format
