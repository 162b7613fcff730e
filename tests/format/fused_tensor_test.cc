// Fused tensors (TensorSpec::fused_in, format/arch_spec.h): the phi3 row's attn_qkv and ffn_up
// are split at load into zero-copy views of their parts, for every element type weir reads; a
// fused tensor of the wrong size, a part stored twice and LongRoPE factors are errors naming the
// file and the tensor; a file without attn_qkv may store attn_q/k/v on their own; and the GGUF
// writer puts the parts back together byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "format/arch_spec.h"
#include "format/gguf_reader.h"
#include "format/gguf_writer.h"
#include "format/llama_gguf_writer.h"
#include "format/model_file.h"
#include "format/synth_llama.h"
#include "tensor/quantize.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

const ArchSpec& Phi3() { return *FindArch("phi3"); }

TEST(FusedTensorTest, Phi3StoredTensors) {
  std::vector<std::string> fused;
  for (const StoredTensor& s : StoredTensors(Phi3())) {
    if (!s.fused()) {
      EXPECT_EQ(s.parts.size(), 1u) << s.name;
      EXPECT_STREQ(s.name, s.parts.front().name);
      continue;
    }
    std::string parts;
    for (const TensorSpec& t : s.parts) parts += std::string(parts.empty() ? "" : ",") + t.name;
    fused.push_back(std::string(s.name) + "=" + parts);
  }
  EXPECT_EQ(fused,
            (std::vector<std::string>{"attn_qkv.weight=attn_q.weight,attn_k.weight,attn_v.weight",
                                      "attn_qkv.bias=attn_q.bias,attn_k.bias,attn_v.bias",
                                      "ffn_up.weight=ffn_gate.weight,ffn_up.weight"}));
  LlamaConfig c;
  c.d_model = 64, c.n_layers = 2, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 16, c.d_ff = 96;
  c.vocab_size = 300;
  c.layers = {{4, 2, 96}, {4, 1, 48}};
  const std::vector<StoredTensor> stored = StoredTensors(Phi3());
  const StoredTensor& qkv = stored[2];
  ASSERT_STREQ(qkv.name, "attn_qkv.weight");
  EXPECT_EQ(StoredShape(qkv, c, 0), (Shape{64 + 32 + 32, 64}));
  EXPECT_EQ(StoredShape(qkv, c, 1), (Shape{64 + 16 + 16, 64}));  // the layer's own kv heads
  EXPECT_EQ(StoredShapeDerivation(qkv),
            "[n_head * head_dim + n_head_kv * head_dim + n_head_kv * head_dim, d_model]");
  EXPECT_EQ(StoredTensorName(qkv, 1), "blk.1.attn_qkv.weight");
  const StoredTensor& bias = stored[3];
  EXPECT_EQ(StoredShape(bias, c, 0), (Shape{128}));
  EXPECT_EQ(StoredShapeDerivation(bias),
            "[n_head * head_dim + n_head_kv * head_dim + n_head_kv * head_dim]");
  const StoredTensor& gate_up = stored[6];
  ASSERT_STREQ(gate_up.name, "ffn_up.weight");
  EXPECT_EQ(StoredShape(gate_up, c, 1), (Shape{96, 64}));
  EXPECT_EQ(StoredShapeDerivation(gate_up), "[d_ff + d_ff, d_model]");
}

// Every row of every architecture: the parts of one fused tensor are consecutive rows with one
// row length, no part is a 3-D stack, and a fused tensor's name is no other tensor's.
TEST(FusedTensorTest, FusedPartsAreWellFormed) {
  for (const ArchSpec* a : AllArchs()) {
    SCOPED_TRACE(a->name);
    std::set<std::string> fused_names;
    for (const StoredTensor& s : StoredTensors(*a)) {
      if (!s.fused()) continue;
      EXPECT_TRUE(fused_names.insert(s.name).second) << s.name << " is not one run of rows";
      for (const TensorSpec& t : s.parts) {
        EXPECT_EQ(t.per_layer, s.parts.front().per_layer) << t.name;
        EXPECT_EQ(t.inner, s.parts.front().inner) << t.name;
        EXPECT_EQ(t.stack, Dim::kNone) << t.name;
      }
      for (const TensorSpec& t : a->tensors) {
        const bool is_part = t.fused_in != nullptr && std::string(t.fused_in) == s.name;
        if (!is_part) {
          EXPECT_NE(std::string(t.name), s.name);
        }
      }
    }
  }
}

// A phi3 model generated in `type`: the file holds the fused tensors; the loaded model holds
// their parts as views into the fused tensor's bytes (row offset times row bytes), and no
// tensor under the fused name but ffn_up (the up part).
void CheckSplitViews(DType type) {
  SCOPED_TRACE(DTypeName(type));
  SynthSpec spec;
  spec.arch = "phi3";
  spec.name = "split";
  const bool k_type = BlockSize(type) == 256;
  spec.d_model = k_type ? 256 : 64, spec.n_layers = 2, spec.n_head = 4, spec.n_head_kv = 2;
  spec.d_ff = k_type ? 256 : 96, spec.vocab_size = 320;
  const std::string path = testing::TempDir() + "/phi3_" + DTypeName(type) + ".gguf";
  Status st = WriteRandomLlamaGguf(spec, type, 11, path, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto m = LoadGgufModel(*file);  // views into `file`'s mapping
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int D = spec.d_model, hd = D / spec.n_head, q = spec.n_head * hd, kv = spec.n_head_kv * hd;
  const size_t row_bytes = RowBytes(type, D);
  for (int l = 0; l < spec.n_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    const GgufTensorInfo* qkv = file->FindTensor(blk + "attn_qkv.weight");
    const GgufTensorInfo* up = file->FindTensor(blk + "ffn_up.weight");
    ASSERT_NE(qkv, nullptr);
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(qkv->shape, (Shape{q + 2 * kv, D}));
    EXPECT_EQ(up->shape, (Shape{2 * spec.d_ff, D}));
    EXPECT_EQ(file->FindTensor(blk + "attn_q.weight"), nullptr);
    EXPECT_EQ(file->FindTensor(blk + "ffn_gate.weight"), nullptr);
    EXPECT_EQ(m->Find(blk + "attn_qkv.weight"), nullptr);
    const uint8_t* qkv_data = file->TensorData(*qkv);
    const uint8_t* up_data = file->TensorData(*up);
    struct Want {
      std::string name;
      const uint8_t* fused;
      int64_t first_row, rows;
    } wants[] = {{"attn_q.weight", qkv_data, 0, q},
                 {"attn_k.weight", qkv_data, q, kv},
                 {"attn_v.weight", qkv_data, q + kv, kv},
                 {"ffn_gate.weight", up_data, 0, spec.d_ff},
                 {"ffn_up.weight", up_data, spec.d_ff, spec.d_ff}};
    for (const Want& w : wants) {
      const TensorView* v = m->Find(blk + w.name);
      ASSERT_NE(v, nullptr) << w.name;
      EXPECT_EQ(v->dtype, type) << w.name;
      EXPECT_EQ(v->shape, (Shape{w.rows, D})) << w.name;
      // Zero-copy: the view points into the file's bytes of the fused tensor.
      EXPECT_EQ(static_cast<const uint8_t*>(v->data), w.fused + w.first_row * row_bytes) << w.name;
      // And its rows are the fused tensor's rows, dequantized.
      std::vector<float> got(static_cast<size_t>(D)), want(static_cast<size_t>(D));
      for (int64_t r : {int64_t{0}, w.rows - 1}) {
        DequantizeRow(type, v->row(r), got.data(), D);
        DequantizeRow(type, w.fused + (w.first_row + r) * row_bytes, want.data(), D);
        EXPECT_EQ(got, want) << w.name << " row " << r;
      }
    }
    // Tensor order: the parts where the fused tensor was.
    auto at = [&](const std::string& n) {
      return std::find(m->tensor_order.begin(), m->tensor_order.end(), blk + n) -
             m->tensor_order.begin();
    };
    EXPECT_EQ(at("attn_k.weight"), at("attn_q.weight") + 1);
    EXPECT_EQ(at("attn_v.weight"), at("attn_q.weight") + 2);
    EXPECT_EQ(at("ffn_up.weight"), at("ffn_gate.weight") + 1);
  }
}

TEST(FusedTensorTest, SplitViewsForEveryType) {
  for (const DTypeTraits& t : AllDTypeTraits()) CheckSplitViews(t.type);
}

// A loaded phi3 model written back (weir convert's path) gives the same file tensors, fused.
TEST(FusedTensorTest, WriterFusesThePartsBack) {
  const std::string dir = testing::TempDir();
  auto spec = SynthPreset("tiny", "phi3");
  ASSERT_TRUE(spec.ok());
  const std::string src = dir + "/phi3_src.gguf", out = dir + "/phi3_out.gguf";
  ASSERT_TRUE(WriteRandomLlamaGguf(*spec, DType::kQ8_0, 7, src, nullptr).ok());
  auto m = LoadModel(src);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Status st = WriteLlamaGguf(*m, out, std::nullopt);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto a = GgufFile::Open(src);
  auto b = GgufFile::Open(out);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const GgufTensorInfo& t : a->tensors()) {
    const GgufTensorInfo* u = b->FindTensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->shape, t.shape) << t.name;
    ASSERT_EQ(u->ggml_type, t.ggml_type) << t.name;
    ASSERT_EQ(u->nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(a->TensorData(t), b->TensorData(*u), t.nbytes), 0) << t.name;
  }
  // Converting re-quantizes each part's rows into the fused tensor.
  const std::string f32 = dir + "/phi3_f32.gguf";
  ASSERT_TRUE(WriteLlamaGguf(*m, f32, DType::kF32).ok());
  auto c = LoadModel(f32);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const TensorView* k8 = m->Find("blk.1.attn_k.weight");
  const TensorView* k32 = c->Find("blk.1.attn_k.weight");
  ASSERT_TRUE(k8 && k32);
  std::vector<float> want(static_cast<size_t>(k8->cols()));
  DequantizeRow(*k8, 3, want.data());
  EXPECT_EQ(std::vector<float>(k32->f32() + 3 * k32->cols(), k32->f32() + 4 * k32->cols()), want);
}

// Rewrites a generated phi3 file (F32): tensors dropped, tensors added (`rows` rows of a source
// tensor's bytes: a prefix of it), or attn_qkv stored as attn_q/k/v.
struct AddTensor {
  std::string name, source;
  int64_t rows;
};
struct Edit {
  std::vector<std::string> drop;
  std::vector<AddTensor> add;
  bool split_qkv = false;
};
Edit Drop(std::vector<std::string> names, std::vector<AddTensor> add = {}) {
  Edit e;
  e.drop = std::move(names);
  e.add = std::move(add);
  return e;
}
Edit Add(std::vector<AddTensor> add) { return Drop({}, std::move(add)); }

std::string Phi3File(const std::string& name, const Edit& e) {
  const std::string dir = testing::TempDir();
  auto spec = SynthPreset("tiny", "phi3");
  EXPECT_TRUE(spec.ok());
  const std::string src = dir + "/src_" + name + ".gguf";
  EXPECT_TRUE(WriteRandomLlamaGguf(*spec, DType::kF32, 5, src, nullptr).ok());
  auto f = GgufFile::Open(src);
  EXPECT_TRUE(f.ok());
  auto m = LoadModel(src);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  GgufWriter w;
  EXPECT_TRUE(AddLlamaGgufMetadata(m->config, m->tokenizer, name, 0, &w).ok());
  std::set<std::string> drop(e.drop.begin(), e.drop.end());
  for (const GgufTensorInfo& t : f->tensors()) {
    if (drop.count(t.name)) continue;
    if (e.split_qkv && t.name.ends_with(".attn_qkv.weight")) {
      const std::string blk =
          t.name.substr(0, t.name.size() - std::string("attn_qkv.weight").size());
      for (const char* part : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) {
        const TensorView* v = m->Find(blk + part);
        w.AddTensor(blk + part, v->dtype, v->shape, v->data);
      }
      continue;
    }
    w.AddTensor(t.name, *t.dtype, t.shape, f->TensorData(t));
  }
  for (const AddTensor& a : e.add) {
    const GgufTensorInfo* t = f->FindTensor(a.source);
    EXPECT_NE(t, nullptr) << a.source;
    Shape s = t->shape;
    s.dims[0] = a.rows;
    w.AddTensor(a.name, *t->dtype, s, f->TensorData(*t));
  }
  const std::string out = dir + "/" + name + ".gguf";
  EXPECT_TRUE(w.Write(out, nullptr).ok());
  return out;
}

void ExpectError(const std::string& path, const std::string& want) {
  auto m = LoadModel(path);
  ASSERT_FALSE(m.ok()) << "loaded " << path;
  EXPECT_NE(m.status().message().find(want), std::string::npos) << m.status().message();
}

TEST(FusedTensorTest, FusedTensorOfTheWrongSizeIsAnError) {
  // tiny: 4 heads and 2 kv heads of 16 dims, d_ff 192.
  ExpectError(Phi3File("short_qkv", Drop({"blk.1.attn_qkv.weight"},
                                         {{"blk.1.attn_qkv.weight", "blk.1.attn_qkv.weight", 96}})),
              ": fused tensor blk.1.attn_qkv.weight has shape [96, 64], expected [n_head * "
              "head_dim + n_head_kv * head_dim + n_head_kv * head_dim, d_model] = [128, 64]");
  // An ffn_up of d_ff rows (a gate-less up projection) is not Phi-3's gate + up.
  ExpectError(Phi3File("half_up", Drop({"blk.0.ffn_up.weight"},
                                       {{"blk.0.ffn_up.weight", "blk.0.ffn_up.weight", 192}})),
              ": fused tensor blk.0.ffn_up.weight has shape [192, 64], expected [d_ff + d_ff, "
              "d_model] = [384, 64]");
}

TEST(FusedTensorTest, PartStoredTwiceIsAnError) {
  ExpectError(Phi3File("twice", Add({{"blk.0.attn_k.weight", "blk.0.attn_qkv.weight", 32}})),
              ": blk.0.attn_k.weight is stored both on its own and as rows of "
              "blk.0.attn_qkv.weight");
  ExpectError(Phi3File("gate_too", Add({{"blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", 192}})),
              ": blk.1.ffn_gate.weight is stored both on its own and as rows of "
              "blk.1.ffn_up.weight");
}

TEST(FusedTensorTest, MissingFusedTensorNamesAPart) {
  ExpectError(Phi3File("no_up", Drop({"blk.1.ffn_up.weight"})),
              ": required tensor blk.1.ffn_gate.weight is missing (expected shape [d_ff, d_model] "
              "= [192, 64]), and so is blk.1.ffn_up.weight, the fused tensor that holds it");
  ExpectError(Phi3File("no_qkv", Drop({"blk.0.attn_qkv.weight"})),
              ": required tensor blk.0.attn_q.weight is missing (expected shape [n_head * "
              "head_dim, d_model] = [64, 64]), and so is blk.0.attn_qkv.weight, the fused tensor "
              "that holds it");
}

// llama.cpp's phi3 reads attn_q/k/v when attn_qkv is absent; so does weir, with the same logits.
TEST(FusedTensorTest, SeparateQkvLoadsAsTheFusedOne) {
  auto fused = LoadModel(Phi3File("fused", {}));
  auto split = LoadModel(Phi3File("split_qkv", [] {
    Edit e;
    e.split_qkv = true;
    return e;
  }()));
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  for (const char* n : {"blk.0.attn_q.weight", "blk.1.attn_v.weight", "blk.1.ffn_gate.weight"}) {
    const TensorView* a = fused->Find(n);
    const TensorView* b = split->Find(n);
    ASSERT_TRUE(a && b) << n;
    EXPECT_EQ(a->shape, b->shape) << n;
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes()), 0) << n;
  }
}

// A fused bias (llama.cpp's attn_qkv.bias) is split like the weight: q, k, v elements in order.
TEST(FusedTensorTest, FusedBiasIsSplit) {
  const std::string dir = testing::TempDir();
  auto spec = SynthPreset("tiny", "phi3");
  ASSERT_TRUE(spec.ok());
  const std::string src = dir + "/bias_src.gguf", out = dir + "/bias.gguf";
  ASSERT_TRUE(WriteRandomLlamaGguf(*spec, DType::kF32, 5, src, nullptr).ok());
  auto f = GgufFile::Open(src);
  auto m = LoadModel(src);
  ASSERT_TRUE(f.ok() && m.ok());
  std::vector<float> bias(128);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i);
  GgufWriter w;
  ASSERT_TRUE(AddLlamaGgufMetadata(m->config, m->tokenizer, "bias", 0, &w).ok());
  for (const GgufTensorInfo& t : f->tensors())
    w.AddTensor(t.name, *t.dtype, t.shape, f->TensorData(t));
  w.AddTensor("blk.1.attn_qkv.bias", DType::kF32, Shape{128}, bias.data());
  ASSERT_TRUE(w.Write(out, nullptr).ok());
  auto b = LoadModel(out);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const TensorView* q = b->Find("blk.1.attn_q.bias");
  const TensorView* k = b->Find("blk.1.attn_k.bias");
  const TensorView* v = b->Find("blk.1.attn_v.bias");
  ASSERT_TRUE(q && k && v);
  EXPECT_EQ(q->shape, (Shape{64}));
  EXPECT_EQ(k->shape, (Shape{32}));
  EXPECT_EQ(v->shape, (Shape{32}));
  EXPECT_EQ(q->f32()[0], 0.0f);
  EXPECT_EQ(k->f32()[0], 64.0f);
  EXPECT_EQ(v->f32()[31], 127.0f);
  EXPECT_EQ(b->Find("blk.0.attn_q.bias"), nullptr);  // layer 0 has none
  // Written back fused.
  const std::string again = dir + "/bias_again.gguf";
  ASSERT_TRUE(WriteLlamaGguf(*b, again, std::nullopt).ok());
  auto g = GgufFile::Open(again);
  ASSERT_TRUE(g.ok());
  const GgufTensorInfo* t = g->FindTensor("blk.1.attn_qkv.bias");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::memcmp(g->TensorData(*t), bias.data(), 128 * sizeof(float)), 0);
  EXPECT_EQ(g->FindTensor("blk.0.attn_qkv.bias"), nullptr);
  EXPECT_EQ(g->FindTensor("blk.1.attn_q.bias"), nullptr);
}

// Phi-3-mini-4k states phi3.attention.sliding_window = 2047; llama.cpp's phi3 graph ignores it,
// and so does weir (no sliding layers).
TEST(FusedTensorTest, Phi3SlidingWindowIsIgnored) {
  auto m = LoadModel(Phi3File("swa", {}));
  ASSERT_TRUE(m.ok());
  const std::string dir = testing::TempDir();
  GgufWriter w;
  ASSERT_TRUE(AddLlamaGgufMetadata(m->config, m->tokenizer, "swa", 0, &w).ok());
  w.AddU32("phi3.attention.sliding_window", 2);
  auto f = GgufFile::Open(m->path);
  ASSERT_TRUE(f.ok());
  for (const GgufTensorInfo& t : f->tensors())
    w.AddTensor(t.name, *t.dtype, t.shape, f->TensorData(t));
  ASSERT_TRUE(w.Write(dir + "/swa2.gguf", nullptr).ok());
  auto s = LoadModel(dir + "/swa2.gguf");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->config.sliding_window, 0);
  EXPECT_FALSE(s->config.IsSliding(0));
}

TEST(FusedTensorTest, LongRopeFactorsAreRefused) {
  const std::string dir = testing::TempDir();
  auto m = LoadModel(Phi3File("longrope_src", {}));
  ASSERT_TRUE(m.ok());
  auto f = GgufFile::Open(m->path);
  ASSERT_TRUE(f.ok());
  const std::vector<float> factors(6, 1.0f);  // rope_dim / 2
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    GgufWriter w;
    ASSERT_TRUE(AddLlamaGgufMetadata(m->config, m->tokenizer, "lr", 0, &w).ok());
    for (const GgufTensorInfo& t : f->tensors())
      w.AddTensor(t.name, *t.dtype, t.shape, f->TensorData(t));
    w.AddTensor(name, DType::kF32, Shape{6}, factors.data());
    const std::string path = dir + "/" + name + ".gguf";
    ASSERT_TRUE(w.Write(path, nullptr).ok());
    auto r = LoadModel(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
    EXPECT_NE(r.status().message().find(path + ": tensor " + name + " (LongRoPE"),
              std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace weir::format
