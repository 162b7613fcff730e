// GGUF reader: the real files in shared/ (skipped when absent), and hand-built files that break
// one rule each, which must give a one-line error naming the file, the field and the values.
#include "format/gguf_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "format/gguf_writer.h"
#include "format/llama_gguf_writer.h"
#include "format/synth_llama.h"
#include "tensor/quantize.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

// IQ2_XXS: a ggml type weir does not compute with (256 values in 66 bytes).
constexpr uint32_t kF32 = 0, kQ8 = 8, kIq2Xxs = 16;

struct ByteBacking : Backing {
  std::vector<uint8_t> bytes;
};

// Little-endian GGUF bytes assembled field by field, so each test can break exactly one.
struct Raw {
  std::string b;
  Raw& U32(uint32_t v) {
    b.append(reinterpret_cast<const char*>(&v), 4);
    return *this;
  }
  Raw& U64(uint64_t v) {
    b.append(reinterpret_cast<const char*>(&v), 8);
    return *this;
  }
  Raw& Str(const std::string& s) {
    U64(s.size());
    b += s;
    return *this;
  }
  Raw& Kv(const std::string& key, const GgufValue& v) {
    Str(key);
    U32(static_cast<uint32_t>(v.type()));
    b += v.encoded();
    return *this;
  }
  Raw& Tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    Str(name);
    U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) U64(d);
    U32(type);
    U64(offset);
    return *this;
  }
  Raw& PadTo(uint64_t a) {
    b.append((a - b.size() % a) % a, '\0');
    return *this;
  }
  Raw& Zeros(uint64_t n) {
    b.append(n, '\0');
    return *this;
  }
};

Raw Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Raw r;
  r.b = "GGUF";
  r.U32(version).U64(n_tensors).U64(n_kv);
  return r;
}

Result<GgufFile> ParseBytes(const std::string& bytes) {
  auto keep = std::make_shared<ByteBacking>();
  keep->bytes.assign(bytes.begin(), bytes.end());
  const uint8_t* p = keep->bytes.data();
  uint64_t n = keep->bytes.size();
  return GgufFile::Parse("raw.gguf", p, n, keep);
}

// Asserts the bytes fail to parse with a one-line message naming the file and `expect`.
void ExpectParseError(const std::string& bytes, const std::string& expect) {
  auto f = ParseBytes(bytes);
  ASSERT_FALSE(f.ok()) << "expected an error containing: " << expect;
  const std::string& m = f.status().message();
  EXPECT_NE(m.find("raw.gguf"), std::string::npos) << m;
  EXPECT_NE(m.find(expect), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// ------------------------------------------------------------------------------------------
// Real files.

TEST(GgufReaderTest, Stories260KF32) {
  std::string path = testing::SharedPath("models/stories260K/stories260K-F32.gguf");
  if (!testing::FileExists(path)) GTEST_SKIP() << path << " not present";
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetU32("llama.block_count"), 5u);
  for (const GgufTensorInfo& t : f->tensors()) {
    EXPECT_EQ(t.ggml_type, kF32) << t.name;
    EXPECT_EQ(t.nbytes, static_cast<uint64_t>(t.shape.numel()) * 4) << t.name;
    EXPECT_LE(t.offset + t.nbytes, f->file_size());
  }
  const GgufTensorInfo* down = f->FindTensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (Shape{64, 172}));  // [d_model, d_ff], outermost first

  auto m = LoadGgufModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const LlamaConfig& c = m->config;
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.d_ff, 172);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.ctx_len, 128);  // the converter's quirk, see SOURCES.md
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.rope_theta, 10000.0f);  // key absent: default
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_FALSE(c.tied_output);
  ASSERT_EQ(c.layers.size(), 5u);
  for (const LayerDims& l : c.layers) {
    EXPECT_EQ(l.n_head, 8);
    EXPECT_EQ(l.n_head_kv, 4);
    EXPECT_EQ(l.d_ff, 172);
  }
  EXPECT_EQ(m->format, FileFormat::kGguf);
  EXPECT_EQ(m->tensors.size(), 48u);
  EXPECT_EQ(m->tensor_order.size(), 48u);
  EXPECT_FALSE(m->backing.empty());
  const TokenizerSpec& t = m->tokenizer;
  EXPECT_EQ(t.kind, TokenizerSpec::Kind::kSentencePiece);
  EXPECT_EQ(t.tokens.size(), 512u);
  EXPECT_EQ(t.scores.size(), 512u);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.pad_id, -1);  // stored as 4294967295
  EXPECT_EQ(t.tokens[1], "<s>");
  EXPECT_EQ(t.types[3 + 0x41], TokenType::kByte);  // <0x41>
  bool found = false;
  for (const auto& [k, v] : m->metadata) {
    if (k == "tokenizer.ggml.tokens") {
      EXPECT_EQ(v, "[string x 512]");
      found = true;
    }
  }
  EXPECT_TRUE(found);
  // The views point into the mapping: token_embd and its copy output.weight are equal.
  const TensorView* emb = m->Find("token_embd.weight");
  const TensorView* out = m->Find("output.weight");
  ASSERT_TRUE(emb && out);
  EXPECT_EQ(emb->shape, (Shape{512, 64}));
  EXPECT_EQ(std::memcmp(emb->data, out->data, emb->nbytes()), 0);
}

TEST(GgufReaderTest, TinyStoriesQ8MatchesF32) {
  std::string q8 = testing::SharedPath("models/tinystories-656k/tinystories-656k-Q8_0.gguf");
  std::string f32 = testing::SharedPath("models/tinystories-656k/tinystories-656k-F32.gguf");
  if (!testing::FileExists(q8)) GTEST_SKIP() << q8 << " not present";
  auto mq = LoadGgufModel(q8);
  ASSERT_TRUE(mq.ok()) << mq.status().ToString();
  EXPECT_EQ(mq->tensors.size(), 20u);
  int n_q8 = 0;
  for (const auto& [name, v] : mq->tensors) {
    if (v.dtype == DType::kQ8_0) ++n_q8;
    if (v.shape.ndim == 1) {
      EXPECT_EQ(v.dtype, DType::kF32) << name;
    }
  }
  EXPECT_EQ(n_q8, 15);
  const LlamaConfig& c = mq->config;
  EXPECT_EQ(c.d_model, 128);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.d_ff, 384);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(c.ctx_len, 512);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_TRUE(c.tied_output);  // no output.weight
  EXPECT_EQ(mq->tokenizer.tokens.size(), 2048u);
  EXPECT_EQ(mq->tokenizer.pad_id, 0);

  if (!testing::FileExists(f32)) return;
  auto mf = LoadGgufModel(f32);
  ASSERT_TRUE(mf.ok()) << mf.status().ToString();
  // Every Q8_0 row dequantizes to within one quantization step of the F32 row.
  for (const char* name : {"token_embd.weight", "blk.1.ffn_down.weight", "blk.0.attn_q.weight"}) {
    const TensorView* a = mq->Find(name);
    const TensorView* b = mf->Find(name);
    ASSERT_TRUE(a && b) << name;
    ASSERT_EQ(a->shape, b->shape);
    std::vector<float> row(static_cast<size_t>(a->cols()));
    double max_err = 0;
    for (int64_t r = 0; r < a->rows(); ++r) {
      DequantizeRow(*a, r, row.data());
      const float* ref = reinterpret_cast<const float*>(b->row(r));
      float amax = 0;
      for (int64_t i = 0; i < a->cols(); ++i) amax = std::max(amax, std::fabs(ref[i]));
      for (int64_t i = 0; i < a->cols(); ++i) {
        max_err =
            std::max(max_err, static_cast<double>(std::fabs(row[i] - ref[i]) / (amax + 1e-12f)));
      }
    }
    EXPECT_LT(max_err, 1.0 / 127 + 1e-3) << name;
  }
}

TEST(GgufReaderTest, TokenizerOnlyFileOpens) {
  std::string path = testing::SharedPath("models/llama2-tokenizer/ggml-vocab-llama-spm.gguf");
  if (!testing::FileExists(path)) GTEST_SKIP() << path << " not present";
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->tensors().size(), 0u);
  EXPECT_EQ(f->kvs().size(), 22u);
  auto tok = ReadGgufTokenizer(*f);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(tok->kind, TokenizerSpec::Kind::kSentencePiece);
  EXPECT_EQ(tok->tokens.size(), 32000u);
  EXPECT_EQ(tok->scores.size(), 32000u);
  EXPECT_EQ(tok->types.size(), 32000u);
  EXPECT_EQ(tok->bos_id, 1);
  EXPECT_EQ(tok->eos_id, 2);
  EXPECT_EQ(tok->unk_id, 0);
  EXPECT_TRUE(tok->add_bos);
  EXPECT_TRUE(tok->add_space_prefix);
  EXPECT_EQ(tok->tokens[2], "</s>");
  EXPECT_EQ(tok->tokens[3], "<0x00>");
  EXPECT_EQ(tok->types[3], TokenType::kByte);
  EXPECT_EQ(tok->types[1], TokenType::kControl);
  // Llama-2-7B hyperparameters, no weights: the config reads, the model does not load.
  auto c = ReadGgufLlamaConfig(*f);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->d_model, 4096);
  EXPECT_EQ(c->n_layers, 32);
  EXPECT_EQ(c->vocab_size, 32000);
  auto m = LoadGgufModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("token_embd.weight"), std::string::npos)
      << m.status().message();
  // Rendering every value works.
  for (const auto& [k, v] : f->RenderMetadata()) EXPECT_FALSE(v.empty()) << k;
}

TEST(GgufReaderTest, MissingFileAndNotGguf) {
  auto f = GgufFile::Open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("/nonexistent/model.gguf"), std::string::npos);
  std::string path = testing::TempDir() + "/text.gguf";
  testing::WriteFile(path, "hello world, not a model");
  auto g = GgufFile::Open(path);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(g.status().message().find("not a GGUF file"), std::string::npos);
  testing::WriteFile(path, "");
  EXPECT_FALSE(GgufFile::Open(path).ok());
}

// ------------------------------------------------------------------------------------------
// Hand-built files, one broken rule each.

TEST(GgufReaderTest, HeaderErrors) {
  ExpectParseError("GGU", "too short");
  Raw bad = Header(0, 0);
  bad.b[0] = 'X';
  ExpectParseError(bad.b, "magic is 0x");
  ExpectParseError(Header(0, 0, 1).b, "GGUF version 1 is not supported");
  ExpectParseError(Header(0, 0, 0x03000000).b, "big-endian");
  ExpectParseError(Header(0, 0).b.substr(0, 20), "header metadata count");
  ExpectParseError(Header(0, 1ull << 60).b, "entries cannot fit");
  ExpectParseError(Header(~0ull, 0).b, "tensors cannot fit");
  // A minimal valid file: no tensors, no metadata.
  auto ok = ParseBytes(Header(0, 0).b);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->version(), 3u);
  EXPECT_TRUE(ParseBytes(Header(0, 0, 2).b).ok());  // v2
}

TEST(GgufReaderTest, MetadataErrors) {
  {
    Raw r = Header(0, 1);
    r.U64(1ull << 62).Zeros(64);  // key length far past the end
    ExpectParseError(r.b, "string length 4611686018427387904");
  }
  {
    Raw r = Header(0, 1);
    r.Str("k").U32(13).U32(0);
    ExpectParseError(r.b, "unknown value type 13");
  }
  {
    Raw r = Header(0, 1);
    r.Str("").U32(4).U32(0);
    ExpectParseError(r.b, "empty key");
  }
  {
    Raw r = Header(0, 2);
    r.Kv("dup", GgufValue::U32(1)).Kv("dup", GgufValue::U32(2));
    ExpectParseError(r.b, "'dup' appears twice");
  }
  {
    Raw r = Header(0, 1);
    r.Str("flag").U32(static_cast<uint32_t>(GgufType::kBool)).b += '\x02';
    ExpectParseError(r.b, "bool value is 2");
  }
  {
    Raw r = Header(0, 1);  // array of 2^61 u32: 2^63 bytes
    r.Str("arr").U32(9).U32(4).U64(1ull << 61).U32(0);
    ExpectParseError(r.b, "array of 2305843009213693952 u32 elements");
  }
  {
    Raw r = Header(0, 1);  // array of 2^40 strings: each needs 8 bytes at least
    r.Str("arr").U32(9).U32(8).U64(1ull << 40).Str("a");
    ExpectParseError(r.b, "string elements");
  }
  {
    Raw r = Header(0, 1);  // array of 10 strings, the 3rd one's length runs off the end
    r.Str("toks").U32(9).U32(8).U64(10).Str("a").Str("b").U64(1000).Zeros(100);
    ExpectParseError(r.b, "metadata 'toks' array element");
  }
  {
    // Arrays nested five deep.
    GgufValue v = GgufValue::I32Array({1});
    for (int i = 0; i < 4; ++i) v = GgufValue::Array(GgufType::kArray, {v});
    Raw r = Header(0, 1);
    r.Kv("deep", v);
    ExpectParseError(r.b, "nested deeper than 4");
    GgufValue ok = GgufValue::I32Array({1});
    for (int i = 0; i < 3; ++i) ok = GgufValue::Array(GgufType::kArray, {ok});
    Raw r2 = Header(0, 1);
    r2.Kv("deep", ok);
    EXPECT_TRUE(ParseBytes(r2.b).ok());
  }
  {
    Raw r = Header(0, 1);
    r.Str("arr").U32(9).U32(77).U64(0);
    ExpectParseError(r.b, "unknown value type 77");
  }
  for (uint32_t a : {0u, 24u}) {
    Raw r = Header(0, 1);
    r.Kv("general.alignment", GgufValue::U32(a));
    ExpectParseError(r.b, StrFormat("general.alignment is %u, expected a power of two", a));
  }
  {
    Raw r = Header(0, 1);
    r.Kv("general.alignment", GgufValue::String("32"));
    ExpectParseError(r.b, "general.alignment has type string");
  }
}

TEST(GgufReaderTest, TensorInfoErrors) {
  auto one = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t off,
                uint64_t data_bytes) {
    Raw r = Header(1, 0);
    r.Tensor(name, std::move(ne), type, off).PadTo(32).Zeros(data_bytes);
    return r.b;
  };
  EXPECT_TRUE(ParseBytes(one("w", {4, 2}, kF32, 0, 32)).ok());
  ExpectParseError(one("w", {4, 2}, kF32, 0, 31), "tensor 'w': data at offset 0 + 32 bytes");
  ExpectParseError(one("w", {4, 2}, kF32, 32, 32), "extends past the end of the file");
  ExpectParseError(one("w", {4, 2}, kF32, 8, 64),
                   "data offset 8 is not a multiple of the alignment 32");
  ExpectParseError(one("w", {4, 2}, kF32, ~0ull - 31, 64), "extends past the end");
  ExpectParseError(one("w", {4, 0}, kF32, 0, 32), "ne[1] is 0");
  ExpectParseError(one("w", {1ull << 63}, kF32, 0, 32), "ne[0] is 9223372036854775808");
  ExpectParseError(one("w", {1ull << 32, 1ull << 32}, kF32, 0, 32), "element count overflows");
  ExpectParseError(one("w", {1ull << 31, 1ull << 31}, kF32, 0, 32),
                   "byte size of 4611686018427387904 F32");
  ExpectParseError(one("w", {1, 1, 1, 1, 1}, kF32, 0, 32), "n_dims is 5");
  ExpectParseError(one("w", {}, kF32, 0, 32), "n_dims is 0");
  ExpectParseError(one("w", {48, 2}, kQ8, 0, 200),
                   "row length ne[0] = 48 is not a multiple of the Q8_0 block size 32");
  ExpectParseError(one("w", {4, 2}, 99, 0, 64), "unknown ggml type id 99");
  ExpectParseError(one("w", {4, 2}, 4, 0, 64), "unknown ggml type id 4");  // Q4_2, removed
  ExpectParseError(one("", {4, 2}, kF32, 0, 32), "empty name");
  {
    Raw r = Header(2, 0);
    r.Tensor("w", {4}, kF32, 0).Tensor("w", {4}, kF32, 32).PadTo(32).Zeros(64);
    ExpectParseError(r.b, "tensor 'w' appears twice");
  }
  {
    // An IQ2_XXS tensor (256 values = 66 bytes per row) is listed and bounds-checked.
    auto f = ParseBytes(one("k", {256, 3}, kIq2Xxs, 0, 3 * 66));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_FALSE(f->tensors()[0].dtype.has_value());
    EXPECT_EQ(f->tensors()[0].nbytes, 3u * 66);
    ExpectParseError(one("k", {256, 3}, kIq2Xxs, 0, 3 * 66 - 1), "extends past the end");
  }
  {
    // Tensor names in messages are made printable.
    ExpectParseError(one("bad\nname", {4, 0}, kF32, 0, 32), "tensor 'bad\\nname'");
  }
  {
    // Tensor infos that end past the data: the data section would start past the file.
    Raw r = Header(1, 0);
    r.Tensor("w", {4}, kF32, 0);
    ExpectParseError(r.b, "data section starts at");
  }
}

// ------------------------------------------------------------------------------------------
// Model loading from synthesized files.

SynthSpec SmallSpec(int d_ff = 64) {
  SynthSpec s;
  s.name = "small";
  s.d_model = 32, s.n_layers = 2, s.n_head = 4, s.n_head_kv = 2, s.d_ff = d_ff, s.vocab_size = 272;
  s.ctx_len = 64;
  return s;
}

// Rewrites `src` with its metadata changed by `edit` and one extra tensor.
std::string Rewrite(const ModelFile& m, const std::function<void(GgufWriter*)>& edit,
                    const LlamaConfig* config = nullptr) {
  GgufWriter w;
  EXPECT_TRUE(AddLlamaGgufMetadata(config ? *config : m.config, m.tokenizer, "t", 0, &w).ok());
  edit(&w);
  for (const std::string& n : m.tensor_order) {
    const TensorView* v = m.Find(n);
    w.AddTensor(n, v->dtype, v->shape, v->data);
  }
  std::string path = testing::TempDir() + "/rewritten.gguf";
  EXPECT_TRUE(w.Write(path).ok());
  return path;
}

// Replaces the type id of tensor `name` in the file's tensor info.
void PatchTensorType(const std::string& path, const std::string& name, uint32_t type) {
  std::string b = testing::ReadFile(path);
  std::string key;
  uint64_t len = name.size();
  key.append(reinterpret_cast<const char*>(&len), 8);
  key += name;
  size_t at = b.find(key);
  ASSERT_NE(at, std::string::npos);
  size_t p = at + key.size();
  uint32_t n_dims;
  std::memcpy(&n_dims, &b[p], 4);
  p += 4 + 8 * n_dims;
  std::memcpy(&b[p], &type, 4);
  testing::WriteFile(path, b);
}

TEST(GgufReaderTest, UnsupportedTypeIsAnErrorOnlyWhenTheModelNeedsIt) {
  // d_ff 256 so that ffn_down rows (256 values) can be relabelled as one IQ2_XXS block each;
  // F32 rows are larger, so the data stays inside the file.
  std::string path = testing::TempDir() + "/q4k.gguf";
  ASSERT_TRUE(WriteRandomLlamaGguf(SmallSpec(256), DType::kF32, 1, path, nullptr).ok());
  auto m = LoadGgufModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();

  std::vector<float> extra(256 * 2, 0.5f);
  std::string with_extra = Rewrite(*m, [&](GgufWriter* w) {
    w->AddTensor("extra.weight", DType::kF32, {2, 256}, extra.data());
  });
  PatchTensorType(with_extra, "extra.weight", kIq2Xxs);
  auto ok = LoadGgufModel(with_extra);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->Find("extra.weight"), nullptr);  // left out, not an error
  auto f = GgufFile::Open(with_extra);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(GgmlTypeName(f->FindTensor("extra.weight")->ggml_type), "IQ2_XXS");

  PatchTensorType(path, "blk.0.ffn_down.weight", kIq2Xxs);
  auto bad = LoadGgufModel(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(bad.status().message().find("unsupported type IQ2_XXS in tensor blk.0.ffn_down.weight"),
            std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find(path), std::string::npos);
}

TEST(GgufReaderTest, LlamaMetadataErrors) {
  std::string path = testing::TempDir() + "/small.gguf";
  ASSERT_TRUE(WriteRandomLlamaGguf(SmallSpec(), DType::kF32, 2, path, nullptr).ok());
  auto m = LoadGgufModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();

  auto expect_load_error = [&](const LlamaConfig& c, const std::function<void(GgufWriter*)>& edit,
                               const std::string& expect) {
    std::string p = Rewrite(*m, edit, &c);
    auto r = LoadGgufModel(p);
    ASSERT_FALSE(r.ok()) << expect;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  };
  // Per-layer dims that disagree with the tensors: ValidateLlama names the tensor.
  LlamaConfig ragged = m->config;
  ragged.layers[1].d_ff = 32;
  expect_load_error(
      ragged, [](GgufWriter*) {},
      "tensor blk.1.ffn_gate.weight has shape [64, 32], expected [d_ff, d_model] = [32, 32]");
  // A vocabulary larger than the embedding.
  LlamaConfig c = m->config;
  std::string p = Rewrite(*m, [](GgufWriter*) {});
  ASSERT_TRUE(LoadGgufModel(p).ok());
  {
    // general.architecture must be a row of the architecture table (format/arch_spec.h).
    GgufWriter w;
    w.AddString("general.architecture", "gpt2");
    std::string p = testing::TempDir() + "/arch.gguf";
    ASSERT_TRUE(w.Write(p).ok());
    auto r = LoadGgufModel(p);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("general.architecture is 'gpt2'; weir loads llama, qwen2, qwen3, gemma3"),
              std::string::npos)
        << r.status().message();
  }
}

// Writes a metadata-only file with the given llama.* keys and reads its config.
Result<LlamaConfig> ConfigFrom(const std::function<void(GgufWriter*)>& keys) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  keys(&w);
  std::string p = testing::TempDir() + "/cfg.gguf";
  Status st = w.Write(p);
  if (!st.ok()) return st;
  WEIR_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Open(p));
  return ReadGgufLlamaConfig(f);
}

void BaseKeys(GgufWriter* w) {
  w->AddU32("llama.embedding_length", 64);
  w->AddU32("llama.block_count", 3);
  w->AddF32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  w->AddU32("llama.vocab_size", 300);
}

TEST(GgufReaderTest, LlamaConfigKeysAndDefaults) {
  auto c = ConfigFrom([](GgufWriter* w) {
    BaseKeys(w);
    w->AddU32("llama.attention.head_count", 8);
    w->AddU32("llama.feed_forward_length", 96);
  });
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->n_head_kv, 8);  // defaults to head_count
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->rope_dim, 8);  // defaults to head_dim
  EXPECT_EQ(c->rope_theta, 10000.0f);
  EXPECT_EQ(c->ctx_len, 0);
  EXPECT_EQ(c->vocab_size, 300);
  EXPECT_TRUE(c->tied_output);

  // Per-layer arrays (structured pruning), as u32 or i32.
  auto p = ConfigFrom([](GgufWriter* w) {
    BaseKeys(w);
    w->Add("llama.attention.head_count", GgufValue::U32Array({8, 6, 4}));
    w->Add("llama.attention.head_count_kv", GgufValue::I32Array({4, 2, 2}));
    w->Add("llama.feed_forward_length", GgufValue::U32Array({96, 64, 32}));
    w->AddU32("llama.attention.key_length", 8);
    w->AddU32("llama.attention.value_length", 8);
    w->AddF32("llama.rope.freq_base", 500000.0f);
    w->AddU32("llama.rope.dimension_count", 4);
    w->AddU32("llama.context_length", 1024);
  });
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->layers.size(), 3u);
  EXPECT_EQ(p->layers[1].n_head, 6);
  EXPECT_EQ(p->layers[2].n_head_kv, 2);
  EXPECT_EQ(p->layers[2].d_ff, 32);
  EXPECT_EQ(p->n_head, 8);
  EXPECT_EQ(p->d_ff, 96);
  EXPECT_EQ(p->head_dim, 8);
  EXPECT_EQ(p->rope_dim, 4);
  EXPECT_EQ(p->rope_theta, 500000.0f);
  EXPECT_EQ(p->ctx_len, 1024);

  auto err = [](const std::function<void(GgufWriter*)>& keys, const std::string& expect) {
    auto r = ConfigFrom(keys);
    ASSERT_FALSE(r.ok()) << expect;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  };
  err(
      [](GgufWriter* w) {
        BaseKeys(w);
        w->Add("llama.attention.head_count", GgufValue::U32Array({8, 8}));
        w->AddU32("llama.feed_forward_length", 96);
      },
      "'llama.attention.head_count' has 2 per-layer values, expected llama.block_count = 3");
  err(
      [](GgufWriter* w) {
        BaseKeys(w);
        w->AddU32("llama.attention.head_count", 7);
        w->AddU32("llama.feed_forward_length", 96);
      },
      "llama.embedding_length 64 is not a multiple of llama.attention.head_count 7");
  err(
      [](GgufWriter* w) {
        BaseKeys(w);
        w->AddU32("llama.attention.head_count", 8);
      },
      "'llama.feed_forward_length' is missing");
  err(
      [](GgufWriter* w) {
        BaseKeys(w);
        w->AddI32("llama.attention.head_count", -8);
        w->AddU32("llama.feed_forward_length", 96);
      },
      "'llama.attention.head_count' = -8 is out of range");
  err(
      [](GgufWriter* w) {
        w->AddU32("llama.embedding_length", 64);
        w->AddU32("llama.block_count", 1u << 30);
      },
      "'llama.block_count' = 1073741824 is out of range");
  err(
      [](GgufWriter* w) {
        BaseKeys(w);
        w->AddU32("llama.attention.head_count", 8);
        w->AddU32("llama.feed_forward_length", 96);
        w->AddF32("llama.rope.freq_base", -1.0f);
      },
      "'llama.rope.freq_base' = -1, expected a positive");
  err(
      [](GgufWriter* w) {
        BaseKeys(w);
        w->AddU32("llama.attention.head_count", 8);
        w->AddU32("llama.feed_forward_length", 96);
        w->AddString("llama.rope.scaling.type", "yarn");
      },
      "llama.rope.scaling.type is 'yarn'");
  err(
      [](GgufWriter* w) {
        BaseKeys(w);
        w->AddString("llama.attention.head_count", "8");
        w->AddU32("llama.feed_forward_length", 96);
      },
      "has type string, expected an integer");
}

// RoPE scaling keys as llama.cpp reads them: the type defaults to "linear" (so a factor alone
// scales), "none" ignores the factor, the older rope.scale_linear key is read, other types and a
// magnitude factor are refused by name.
TEST(GgufReaderTest, RopeScalingKeys) {
  auto factor = [](const std::function<void(GgufWriter*)>& extra) -> Result<float> {
    auto c = ConfigFrom([&](GgufWriter* w) {
      BaseKeys(w);
      w->AddU32("llama.attention.head_count", 8);
      w->AddU32("llama.feed_forward_length", 96);
      extra(w);
    });
    if (!c.ok()) return c.status();
    return c->rope_scaling_factor;
  };
  auto value = [&](const std::function<void(GgufWriter*)>& extra) {
    Result<float> r = factor(extra);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : -1.0f;
  };
  EXPECT_EQ(value([](GgufWriter*) {}), 1.0f);
  EXPECT_EQ(value([](GgufWriter* w) {
              w->AddString("llama.rope.scaling.type", "linear");
              w->AddF32("llama.rope.scaling.factor", 4.0f);
            }),
            4.0f);
  EXPECT_EQ(value([](GgufWriter* w) { w->AddF32("llama.rope.scaling.factor", 2.0f); }), 2.0f);
  EXPECT_EQ(value([](GgufWriter* w) { w->AddF32("llama.rope.scale_linear", 3.0f); }), 3.0f);
  EXPECT_EQ(value([](GgufWriter* w) {
              w->AddString("llama.rope.scaling.type", "none");
              w->AddF32("llama.rope.scaling.factor", 4.0f);
            }),
            1.0f);
  EXPECT_EQ(value([](GgufWriter* w) {
              w->AddString("llama.rope.scaling.type", "linear");
              w->AddF32("llama.rope.scaling.factor", 0.0f);  // llama.cpp: 0 = no scaling
            }),
            1.0f);
  EXPECT_EQ(value([](GgufWriter* w) { w->AddF32("llama.rope.scaling.attn_factor", 1.0f); }), 1.0f);
  auto err = [&](const std::function<void(GgufWriter*)>& extra, const std::string& expect) {
    Result<float> r = factor(extra);
    ASSERT_FALSE(r.ok()) << expect;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  };
  err([](GgufWriter* w) { w->AddString("llama.rope.scaling.type", "longrope"); },
      "llama.rope.scaling.type is 'longrope'; weir implements 'none' and 'linear'");
  err([](GgufWriter* w) { w->AddF32("llama.rope.scaling.factor", -2.0f); },
      "'llama.rope.scaling.factor' = -2");
  err([](GgufWriter* w) { w->AddF32("llama.rope.scaling.attn_factor", 1.5f); },
      "'llama.rope.scaling.attn_factor' = 1.5");
}

TEST(GgufReaderTest, TokenizerKeys) {
  auto tok = [](const std::function<void(GgufWriter*)>& keys) -> Result<TokenizerSpec> {
    GgufWriter w;
    keys(&w);
    std::string p = testing::TempDir() + "/tok.gguf";
    WEIR_RETURN_IF_ERROR(w.Write(p));
    WEIR_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Open(p));
    return ReadGgufTokenizer(f);
  };
  auto none = tok([](GgufWriter*) {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->kind, TokenizerSpec::Kind::kNone);

  auto gpt2 = tok([](GgufWriter* w) {
    w->AddString("tokenizer.ggml.model", "gpt2");
    w->Add("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "ab", "<|end|>"}));
    w->Add("tokenizer.ggml.token_type", GgufValue::I32Array({1, 1, 0, 3}));
    w->Add("tokenizer.ggml.merges", GgufValue::StringArray({"a b"}));
    w->AddU32("tokenizer.ggml.eos_token_id", 3);
  });
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().ToString();
  EXPECT_EQ(gpt2->kind, TokenizerSpec::Kind::kBpeMerges);
  EXPECT_TRUE(gpt2->byte_level);
  EXPECT_FALSE(gpt2->add_bos);
  EXPECT_FALSE(gpt2->add_space_prefix);
  EXPECT_EQ(gpt2->merges, (std::vector<std::string>{"a b"}));
  EXPECT_EQ(gpt2->types[2], TokenType::kNormal);  // 0 = undefined -> normal
  EXPECT_EQ(gpt2->types[3], TokenType::kControl);
  EXPECT_EQ(gpt2->eos_id, 3);
  EXPECT_EQ(gpt2->bos_id, -1);

  auto err = [&](const std::function<void(GgufWriter*)>& keys, const std::string& expect) {
    auto r = tok(keys);
    ASSERT_FALSE(r.ok()) << expect;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  };
  auto base = [](GgufWriter* w) {
    w->AddString("tokenizer.ggml.model", "llama");
    w->Add("tokenizer.ggml.tokens", GgufValue::StringArray({"<unk>", "<s>", "</s>"}));
  };
  err(
      [&](GgufWriter* w) {
        base(w);
        w->Add("tokenizer.ggml.scores", GgufValue::F32Array({0, 0}));
      },
      "tokenizer.ggml.scores has 2 entries but tokenizer.ggml.tokens has 3");
  err(
      [&](GgufWriter* w) {
        base(w);
        w->Add("tokenizer.ggml.token_type", GgufValue::I32Array({1, 9, 1}));
      },
      "tokenizer.ggml.token_type[1] = 9");
  err(
      [&](GgufWriter* w) {
        base(w);
        w->AddU32("tokenizer.ggml.bos_token_id", 3);
      },
      "'tokenizer.ggml.bos_token_id' = 3 is not a token id (the vocabulary has 3 tokens)");
  err([](GgufWriter* w) { w->AddString("tokenizer.ggml.model", "bert"); },
      "tokenizer.ggml.model is 'bert'");
  err(
      [](GgufWriter* w) {
        w->AddString("tokenizer.ggml.model", "gpt2");
        w->Add("tokenizer.ggml.tokens", GgufValue::StringArray({"a"}));
      },
      "'tokenizer.ggml.merges' is missing");
  auto none_id = tok([&](GgufWriter* w) {
    base(w);
    w->AddU32("tokenizer.ggml.padding_token_id", 0xffffffffu);
    w->AddBool("tokenizer.ggml.add_bos_token", false);
    w->AddBool("tokenizer.ggml.add_space_prefix", false);
  });
  ASSERT_TRUE(none_id.ok());
  EXPECT_EQ(none_id->pad_id, -1);
  EXPECT_FALSE(none_id->add_bos);
  EXPECT_FALSE(none_id->add_space_prefix);
}

}  // namespace
}  // namespace weir::format
