// weir pack writer: every bundle chunk holds what the layout says (gate/up rows and W_down's
// blocks bit for bit; a narrower last chunk for float types; ffn_down^T of the column layouts
// exact for float types and within half a new quantization step for Q8_0/Q4_0),
// static tensors are copied, every tensor is page-aligned, and packing twice gives the same bytes.
#include "format/weir_pack_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "format/gguf_reader.h"
#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_format.h"
#include "format/weir_pack_reader.h"
#include "kernels/sparse_column.h"
#include "tensor/quantize.h"
#include "kernels/tiled.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

SynthSpec PackSpec(int n_layers = 5, int d_ff = 96) {
  SynthSpec s;
  s.d_model = 64;
  s.n_layers = n_layers;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.d_ff = d_ff;
  s.vocab_size = 300;
  s.ctx_len = 64;
  return s;
}

ModelFile Synth(DType type, const std::string& dir, int n_layers = 5, int d_ff = 96) {
  const std::string path = dir + "/m.gguf";
  EXPECT_TRUE(WriteRandomLlamaGguf(PackSpec(n_layers, d_ff), type, 11, path, nullptr).ok());
  auto m = LoadModel(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

// Column c of w as floats (the reference for ffn_down^T rows).
std::vector<float> Column(const TensorView& w, int64_t c) {
  std::vector<float> row(static_cast<size_t>(w.cols())), col(static_cast<size_t>(w.rows()));
  for (int64_t r = 0; r < w.rows(); ++r) {
    DequantizeRow(w, r, row.data());
    col[static_cast<size_t>(r)] = row[static_cast<size_t>(c)];
  }
  return col;
}

// Checks every bundle chunk of `pack` against the source model: gate and up rows are the
// source rows, and the down pieces the source's W_down blocks, bit for bit (converted row by
// row when the pack has another type).
// A chunk's piece of `rows` x `cols` values at p, in row-major order: untiled when the group's
// chunks are tiled (kernels/tiled.h), as is otherwise.
std::vector<uint8_t> RowMajorPiece(const PackGroup& g, const uint8_t* p, int64_t rows, int64_t cols) {
  const size_t row_bytes = RowBytes(g.dtype, cols);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  if (!g.tiled) {
    std::memcpy(out.data(), p, out.size());
    return out;
  }
  TensorView tiled{g.dtype, Shape{rows, cols}, p};
  tiled.layout = Layout::kTiled16;
  for (int64_t r = 0; r < rows; ++r) kernels::UntileRow(tiled, r, out.data() + r * row_bytes);
  return out;
}

void CheckBundles(const ModelFile& src, const PackFile& pack, DType type) {
  const GgufFile& f = pack.gguf();
  std::vector<float> tmp;
  std::vector<uint8_t> want;
  for (const PackGroup& g : pack.groups()) {
    ASSERT_EQ(g.dtype, type);
    // Quantized chunks are tiled (every test model has d_model a multiple of 16).
    ASSERT_EQ(g.tiled, type == DType::kQ8_0 || type == DType::kQ4_0);
    ASSERT_EQ(g.offset % kPackAlignment, 0u);
    const uint8_t* base = f.data() + g.offset;
    TensorView bundles{g.dtype, Shape{g.rows(), g.d_model}, base};
    for (int j = 0; j < g.n_layers; ++j) {
      const std::string b = StrFormat("blk.%d.", g.first_layer + j);
      const TensorView gate = *src.Find(b + "ffn_gate.weight");
      const TensorView up = *src.Find(b + "ffn_up.weight");
      const TensorView down = *src.Find(b + "ffn_down.weight");
      auto converted = [&](const TensorView& w, int64_t r, int64_t c0, int64_t n) {
        // Values [c0, c0 + n) of row r of w in the pack's type.
        want.resize(RowBytes(type, n));
        if (w.dtype == type) {
          std::memcpy(want.data(), w.row(r) + RowBytes(w.dtype, c0), want.size());
        } else {
          tmp.resize(static_cast<size_t>(n));
          DequantizeRow(w.dtype, w.row(r) + RowBytes(w.dtype, c0), tmp.data(), n);
          QuantizeRow(type, tmp.data(), want.data(), n);
        }
        return want.data();
      };
      for (int64_t c0 = 0; c0 < g.d_ff; c0 += kBundleChunk) {
        const int64_t w = g.chunk_width(c0);
        // A chunk is contiguous: 3 w n rows from c0 * bundle_bytes, layer j's 3 w rows at j.
        const uint8_t* chunk = base + c0 * g.bundle_bytes + j * 3 * w * g.row_bytes;
        const std::vector<uint8_t> gates = RowMajorPiece(g, chunk, w, g.d_model);
        const std::vector<uint8_t> ups = RowMajorPiece(g, chunk + w * g.row_bytes, w, g.d_model);
        for (int64_t c = c0; c < c0 + w; ++c) {
          ASSERT_EQ(bundles.row(g.Row(c, j, BundleOp::kGate)), chunk + (c - c0) * g.row_bytes);
          ASSERT_EQ(bundles.row(g.Row(c, j, BundleOp::kUp)), chunk + (w + c - c0) * g.row_bytes);
          ASSERT_EQ(0, std::memcmp(gates.data() + (c - c0) * g.row_bytes,
                                   converted(gate, c, 0, g.d_model), g.row_bytes))
              << "gate: group " << g.index << " layer " << j << " channel " << c;
          ASSERT_EQ(0, std::memcmp(ups.data() + (c - c0) * g.row_bytes,
                                   converted(up, c, 0, g.d_model), g.row_bytes))
              << "up: group " << g.index << " layer " << j << " channel " << c;
        }
        const uint8_t* at = bundles.row(g.ChunkRow(c0, j, BundleOp::kDown));
        ASSERT_EQ(at, chunk + 2 * w * g.row_bytes);
        const std::vector<uint8_t> pieces = RowMajorPiece(g, at, g.d_model, w);
        const size_t piece = RowBytes(type, w);
        for (int64_t r = 0; r < g.d_model; ++r) {
          ASSERT_EQ(0, std::memcmp(pieces.data() + r * piece, converted(down, r, c0, w), piece))
              << "down: group " << g.index << " layer " << j << " chunk " << c0 << " output " << r;
        }
      }
    }
  }
}

// Packs src twice into dir (the bytes must agree: packing is deterministic) and opens one.
Result<PackFile> PackTwice(const ModelFile& src, const std::string& dir, const PackOptions& o) {
  WEIR_RETURN_IF_ERROR(WritePack(src, dir + "/a.weir", o));
  WEIR_RETURN_IF_ERROR(WritePack(src, dir + "/b.weir", o));
  EXPECT_TRUE(testing::ReadFile(dir + "/a.weir") == testing::ReadFile(dir + "/b.weir"));
  return PackFile::Open(dir + "/a.weir");
}

class PackTypes : public ::testing::TestWithParam<DType> {};

TEST_P(PackTypes, BundlesStaticsAlignmentForGroupSizes) {
  const DType type = GetParam();
  const std::string dir = testing::TempDir();
  ModelFile src = Synth(type, dir);
  for (int group : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(group);
    const std::string out = dir + StrFormat("/g%d.weir", group);
    PackOptions o;
    o.group_size = group;
    ASSERT_TRUE(WritePack(src, out, o).ok());
    auto pack = PackFile::Open(out);
    ASSERT_TRUE(pack.ok()) << pack.status().ToString();
    // Groups tile the 5 layers with up to `group` each.
    ASSERT_EQ(static_cast<int>(pack->groups().size()), (5 + group - 1) / group);
    int next = 0;
    for (const PackGroup& g : pack->groups()) {
      EXPECT_EQ(g.first_layer, next);
      EXPECT_EQ(g.n_layers, std::min(group, 5 - next));
      for (int j = 0; j < g.n_layers; ++j) EXPECT_EQ(&pack->GroupOf(next + j), &g);
      next += g.n_layers;
    }
    EXPECT_EQ(pack->group_size(), group);
    EXPECT_EQ(pack->down_t(), "none");
    EXPECT_EQ(pack->source(), "m.gguf");
    EXPECT_EQ(pack->config().n_layers, 5);
    EXPECT_EQ(pack->config().d_ff, 96);
    EXPECT_EQ(pack->tokenizer().tokens.size(), src.tokenizer.tokens.size());
    // Every tensor page-aligned; static tensors bit for bit.
    for (const GgufTensorInfo& t : pack->gguf().tensors()) EXPECT_EQ(t.offset % 4096, 0u) << t.name;
    const auto present = [&](const std::string& n) { return src.Find(n) != nullptr; };
    ASSERT_EQ(pack->static_tensors().size(), PackStaticTensorNames(src.config, present).size());
    int n_tiled = 0;
    for (const PackTensor& t : pack->static_tensors()) n_tiled += t.layout == Layout::kTiled16;
    // Every layer's four attention projections, and the output head when it has its own tensor
    // with a multiple of 16 rows, for the quantized types.
    const PackTensor* head = pack->FindStatic("output.weight");
    const int head_tiled = head != nullptr && head->shape[0] % 16 == 0;
    EXPECT_EQ(n_tiled, type == DType::kQ8_0 || type == DType::kQ4_0 ? 5 * 4 + head_tiled : 0);
    for (const PackTensor& t : pack->static_tensors()) {
      const TensorView* s = src.Find(t.name);
      ASSERT_NE(s, nullptr) << t.name;
      EXPECT_EQ(t.dtype, s->dtype);
      EXPECT_TRUE(t.shape == s->shape);
      ASSERT_EQ(t.nbytes, s->nbytes());
      // Quantized projections are stored tiled (weir.pack.tiled_static): untiled, the same bytes.
      const bool tiled = TiledStatic(t.name, t.dtype, t.shape);
      EXPECT_EQ(t.layout, tiled ? Layout::kTiled16 : Layout::kRowMajor) << t.name;
      std::vector<uint8_t> bytes(pack->gguf().data() + t.offset, pack->gguf().data() + t.offset + t.nbytes);
      if (tiled) {
        TensorView v{t.dtype, t.shape, pack->gguf().data() + t.offset};
        v.layout = Layout::kTiled16;
        for (int64_t r = 0; r < v.rows(); ++r) kernels::UntileRow(v, r, bytes.data() + r * v.row_bytes());
      }
      EXPECT_EQ(0, std::memcmp(bytes.data(), s->data, t.nbytes)) << t.name;
    }
    EXPECT_EQ(pack->static_bytes() + pack->bundle_bytes(), [&] {
      uint64_t n = 0;
      for (auto& [k, v] : src.tensors) n += v.nbytes();
      return n;
    }());
    CheckBundles(src, *pack, type);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PackTypes,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(WeirPack, Deterministic) {
  const std::string dir = testing::TempDir();
  ModelFile src = Synth(DType::kQ4_0, dir);
  PackOptions o;
  o.group_size = 2;
  ASSERT_TRUE(WritePack(src, dir + "/a.weir", o).ok());
  ASSERT_TRUE(WritePack(src, dir + "/b.weir", o).ok());
  const std::string a = testing::ReadFile(dir + "/a.weir"), b = testing::ReadFile(dir + "/b.weir");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "packing twice gave different bytes";
  // A different group size is a different file.
  o.group_size = 3;
  ASSERT_TRUE(WritePack(src, dir + "/c.weir", o).ok());
  EXPECT_FALSE(a == testing::ReadFile(dir + "/c.weir"));
}

// A model with RoPE scaling keeps it in the pack: the linear factor in the metadata and
// rope_freqs.weight among the static tensors (after the per-layer ones), bit for bit.
TEST(WeirPack, KeepsRopeScaling) {
  const std::string dir = testing::TempDir();
  SynthSpec spec = PackSpec(3);
  spec.rope_scaling_factor = 4.0f;
  spec.rope_freqs = {1.0f, 1.0f, 2.0f, 3.0f, 5.0f, 8.0f, 8.0f, 8.0f};  // head_dim 16
  ASSERT_TRUE(WriteRandomLlamaGguf(spec, DType::kQ8_0, 3, dir + "/m.gguf", nullptr).ok());
  auto src = LoadModel(dir + "/m.gguf");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_TRUE(WritePack(*src, dir + "/m.weir", PackOptions{}).ok());
  auto pack = PackFile::Open(dir + "/m.weir");
  ASSERT_TRUE(pack.ok()) << pack.status().ToString();
  EXPECT_EQ(pack->config().rope_scaling_factor, 4.0f);
  const auto present = [&](const std::string& n) { return src->Find(n) != nullptr; };
  EXPECT_EQ(pack->static_tensors().size(), PackStaticTensorNames(src->config, present).size());
  const PackTensor* f = pack->FindStatic("rope_freqs.weight");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->nbytes, 32u);
  EXPECT_EQ(std::memcmp(pack->gguf().data() + f->offset, spec.rope_freqs.data(), 32), 0);
  EXPECT_EQ(PackStaticTensorNames(src->config, present).back(), "rope_freqs.weight");
}

TEST(WeirPack, ConvertsTypeFirst) {
  const std::string dir = testing::TempDir();
  ModelFile src = Synth(DType::kF32, dir, 2);
  PackOptions o;
  o.type = DType::kQ8_0;
  ASSERT_TRUE(WritePack(src, dir + "/q.weir", o).ok());
  auto pack = PackFile::Open(dir + "/q.weir");
  ASSERT_TRUE(pack.ok()) << pack.status().ToString();
  const PackGroup& g = pack->groups()[0];
  ASSERT_EQ(g.dtype, DType::kQ8_0);
  TensorView bundles{g.dtype, Shape{g.rows(), g.d_model}, pack->gguf().data() + g.offset};
  const TensorView gate = *src.Find("blk.0.ffn_gate.weight");
  std::vector<uint8_t> want(g.row_bytes);
  for (int64_t c0 = 0; c0 < g.d_ff; c0 += kBundleChunk) {
    const std::vector<uint8_t> gates = RowMajorPiece(g, bundles.row(g.ChunkRow(c0, 0, BundleOp::kGate)),
                                                     g.chunk_width(c0), g.d_model);
    for (int64_t c = c0; c < c0 + g.chunk_width(c0); ++c) {
      QuantizeRow(DType::kQ8_0, gate.f32() + c * g.d_model, want.data(), g.d_model);
      ASSERT_EQ(0, std::memcmp(want.data(), gates.data() + (c - c0) * g.row_bytes, g.row_bytes));
    }
  }
  EXPECT_EQ(pack->FindStatic("blk.1.attn_q.weight")->dtype, DType::kQ8_0);
  EXPECT_EQ(pack->FindStatic("blk.1.attn_norm.weight")->dtype, DType::kF32);
  CheckBundles(src, *pack, DType::kQ8_0);
}

TEST(WeirPack, NarrowLastChunkForFloatTypes) {
  // d_ff 80 = two chunks of 32 and one of 16 (float types only: Q8_0/Q4_0 need whole blocks).
  const std::string dir = testing::TempDir();
  ModelFile src = Synth(DType::kF32, dir, 2, 80);
  for (DType t : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(t));
    PackOptions o;
    o.type = t;
    o.group_size = 2;
    ASSERT_TRUE(WritePack(src, dir + "/n.weir", o).ok());
    auto pack = PackFile::Open(dir + "/n.weir");
    ASSERT_TRUE(pack.ok()) << pack.status().ToString();
    EXPECT_EQ(pack->groups()[0].chunk_width(64), 16);
    CheckBundles(src, *pack, t);
  }
}

TEST(WeirPack, TransposeWeightMatchesDefinition) {
  // 40 x 64 F32 -> [64, 40] F16 exactly (F16 values survive the round trip).
  const int64_t rows = 40, cols = 64;
  std::vector<uint16_t> w(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = F32ToF16(static_cast<float>(static_cast<int>(i % 97) - 48) / 16.0f);
  TensorView v{DType::kF16, Shape{rows, cols}, w.data()};
  std::vector<uint8_t> t(static_cast<size_t>(cols) * RowBytes(DType::kF16, rows));
  ASSERT_TRUE(TransposeWeight(v, DType::kF16, t.data()).ok());
  const auto* th = reinterpret_cast<const uint16_t*>(t.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(th[c * rows + r], w[static_cast<size_t>(r * cols + c)]);
  }
  // Rows that are not whole output blocks are refused.
  EXPECT_FALSE(TransposeWeight(v, DType::kQ8_0, t.data()).ok());
}

TEST(WeirPack, RefusesBadOptionsAndMixedTypes) {
  const std::string dir = testing::TempDir();
  ModelFile src = Synth(DType::kF16, dir, 2);
  PackOptions o;
  o.group_size = 0;
  Status st = WritePack(src, dir + "/x.weir", o);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("group size 0"), std::string::npos) << st.ToString();
  o.group_size = kMaxPackGroupSize + 1;
  EXPECT_FALSE(WritePack(src, dir + "/x.weir", o).ok());

  // Mixed MLP types without --type: down in F32, gate/up in F16: the group is stored in F32
  // (PackMlpType), the values the source's.
  std::vector<float> down(static_cast<size_t>(64 * 96), 0.5f);
  src.tensors["blk.1.ffn_down.weight"] = TensorView{DType::kF32, Shape{64, 96}, down.data()};
  o.group_size = 2;
  ASSERT_TRUE(WritePack(src, dir + "/x.weir", o).ok());
  auto mixed = PackFile::Open(dir + "/x.weir");
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_EQ(mixed->groups()[0].dtype, DType::kF32);
  o.type = DType::kF16;  // --type decides
  ASSERT_TRUE(WritePack(src, dir + "/x.weir", o).ok());
  EXPECT_EQ(PackFile::Open(dir + "/x.weir")->groups()[0].dtype, DType::kF16);
}

TEST(WeirPack, MlpTypeOfMixedOrWideBlockSources) {
  using T = DType;
  EXPECT_EQ(PackMlpType({T::kQ4_0, T::kQ4_0, T::kQ4_0}, std::nullopt), T::kQ4_0);
  EXPECT_EQ(PackMlpType({T::kQ4_1, T::kQ4_1, T::kQ4_1}, std::nullopt), T::kQ4_1);
  // Gemma 3 270M Q4_K_M: Q5_0 gate and up, Q6_K down; and a whole Q4_K group (256-value blocks).
  EXPECT_EQ(PackMlpType({T::kQ5_0, T::kQ5_0, T::kQ6_K}, std::nullopt), T::kQ8_0);
  EXPECT_EQ(PackMlpType({T::kQ4_K, T::kQ4_K, T::kQ4_K}, std::nullopt), T::kQ8_0);
  EXPECT_EQ(PackMlpType({T::kF16, T::kBF16, T::kF16}, std::nullopt), T::kF32);
  EXPECT_EQ(PackMlpType({T::kQ5_0, T::kQ5_0, T::kQ6_K}, T::kQ4_0), T::kQ4_0);
}

// A source whose down blocks (256 values, Q6_K) do not start at every 32-neuron chunk: the
// bundles' down pieces are cut out of the covering blocks, so the Q8_0 pack holds the source's
// values to Q8_0's rounding.
TEST(WeirPack, KQuantSourcesArePackedAsQ8_0) {
  const std::string dir = testing::TempDir();
  SynthSpec spec;
  spec.d_model = 256;
  spec.n_layers = 2;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.d_ff = 512;
  spec.vocab_size = 300;
  spec.ctx_len = 64;
  ASSERT_TRUE(WriteRandomLlamaGguf(spec, DType::kQ6_K, 9, dir + "/k.gguf", nullptr).ok());
  auto src = LoadModel(dir + "/k.gguf");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_EQ(src->Find("blk.0.ffn_down.weight")->dtype, DType::kQ6_K);
  for (PackLayout layout : {PackLayout::kBundles, PackLayout::kColumns}) {
    PackOptions o;
    o.layout = layout;
    o.tile_bundles = false;
    ASSERT_TRUE(WritePack(*src, dir + "/k.weir", o).ok());
    auto pack = PackFile::Open(dir + "/k.weir");
    ASSERT_TRUE(pack.ok()) << pack.status().ToString();
    const PackGroup& g = pack->groups()[0];
    ASSERT_EQ(g.dtype, DType::kQ8_0);
    // Neuron 37's down column (d_model values): from the pack, against the source dequantized.
    const TensorView down = *src->Find("blk.0.ffn_down.weight");
    std::vector<float> row(static_cast<size_t>(spec.d_ff)), got(static_cast<size_t>(spec.d_model));
    const int64_t c = 37;
    if (layout == PackLayout::kBundles) {
      const int64_t c0 = c / kBundleChunk * kBundleChunk;
      const uint8_t* base = pack->gguf().data() + g.offset +
                            static_cast<size_t>(g.ChunkRow(c0, 0, BundleOp::kDown)) * g.row_bytes;
      const size_t piece = RowBytes(g.dtype, g.chunk_width(c0));
      std::vector<float> vals(static_cast<size_t>(g.chunk_width(c0)));
      for (int64_t o2 = 0; o2 < spec.d_model; ++o2) {
        DequantizeRow(g.dtype, base + static_cast<size_t>(o2) * piece, vals.data(),
                      g.chunk_width(c0));
        got[static_cast<size_t>(o2)] = vals[static_cast<size_t>(c - c0)];
      }
    } else {
      DequantizeRow(g.dtype,
                    pack->gguf().data() + g.offset + static_cast<size_t>(g.DownRow(c, 0)) * g.row_bytes,
                    got.data(), spec.d_model);
    }
    double max_err = 0, max_abs = 0;
    for (int64_t o2 = 0; o2 < spec.d_model; ++o2) {
      DequantizeRow(down, o2, row.data());
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(row[static_cast<size_t>(c)])));
      max_err = std::max(max_err, std::fabs(static_cast<double>(row[static_cast<size_t>(c)]) -
                                            got[static_cast<size_t>(o2)]));
    }
    EXPECT_LT(max_err, 0.01 * max_abs) << PackLayoutName(layout);
  }
}

TEST(WeirPack, RealModels) {
  for (const char* rel :
       {"models/stories260K/stories260K.bin", "models/tinystories-656k/tinystories-656k-Q8_0.gguf",
        "models/tinystories-656k"}) {
    SCOPED_TRACE(rel);
    const std::string path = testing::SharedPath(rel);
    if (!testing::FileExists(path)) continue;
    LoadOptions lo;
    if (std::string(rel).ends_with(".bin"))
      lo.tokenizer_path = testing::SharedPath("models/stories260K/tok512.bin");
    auto src = LoadModel(path, lo);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    const std::string out = testing::TempDir() + "/real.weir";
    PackOptions o;
    o.group_size = 2;
    Status st = WritePack(*src, out, o);
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto pack = PackFile::Open(out);
    ASSERT_TRUE(pack.ok()) << pack.status().ToString();
    EXPECT_EQ(pack->config().n_layers, src->config.n_layers);
    EXPECT_EQ(pack->tokenizer().tokens, src->tokenizer.tokens);
    CheckBundles(*src, *pack,
                 src->Find("blk.0.ffn_gate.weight")->dtype);  // RoPE permutes only q, k
  }
}

}  // namespace
}  // namespace weir::format

namespace weir::format {
namespace {

// Column layout: ffn_in row (i * n + j) * 2 + op is row i of gate_j^T / up_j^T and ffn_down row
// c * n + j is row c of down_j^T, each as TransposeWeight writes it; deterministic; the reader
// names the layout; every cut of the file is an error, never a crash.
TEST(WeirPack, ColumnLayout) {
  for (DType type : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
    for (int group : {1, 2}) {
      SCOPED_TRACE(std::string(DTypeName(type)) + " group " + std::to_string(group));
      const std::string dir = testing::TempDir();
      ModelFile src = Synth(type, dir, 3);
      PackOptions o;
      o.group_size = group;
      o.layout = PackLayout::kColumns;
      auto pack = PackTwice(src, dir, o);
      ASSERT_TRUE(pack.ok()) << pack.status().ToString();
      EXPECT_EQ(pack->layout(), PackLayout::kColumns);
      const GgufFile& f = pack->gguf();
      uint64_t mlp = 0;
      for (const PackGroup& g : pack->groups()) {
        EXPECT_EQ(g.layout, PackLayout::kColumns);
        EXPECT_EQ(g.offset % kPackAlignment, 0u);
        EXPECT_EQ(g.in_offset % kPackAlignment, 0u);
        mlp += g.mlp_bytes();
        const uint8_t* down = f.data() + g.offset;
        const uint8_t* in = f.data() + g.in_offset;
        for (int j = 0; j < g.n_layers; ++j) {
          const std::string b = StrFormat("blk.%d.", g.first_layer + j);
          std::vector<uint8_t> gate_t(static_cast<size_t>(g.d_model) * g.in_row_bytes);
          std::vector<uint8_t> up_t(gate_t.size());
          std::vector<uint8_t> down_t(static_cast<size_t>(g.d_ff) * g.row_bytes);
          ASSERT_TRUE(TransposeWeight(*src.Find(b + "ffn_gate.weight"), type, gate_t.data()).ok());
          ASSERT_TRUE(TransposeWeight(*src.Find(b + "ffn_up.weight"), type, up_t.data()).ok());
          ASSERT_TRUE(TransposeWeight(*src.Find(b + "ffn_down.weight"), type, down_t.data()).ok());
          for (int64_t i = 0; i < g.d_model; ++i) {
            const size_t rb = g.in_row_bytes;
            ASSERT_EQ(0, std::memcmp(in + g.InRow(i, j, ColumnOp::kGateT) * rb,
                                     gate_t.data() + i * rb, rb));
            ASSERT_EQ(0, std::memcmp(in + g.InRow(i, j, ColumnOp::kUpT) * rb,
                                     up_t.data() + i * rb, rb));
          }
          for (int64_t c = 0; c < g.d_ff; ++c) {
            ASSERT_EQ(0, std::memcmp(down + g.DownRow(c, j) * g.row_bytes,
                                     down_t.data() + c * g.row_bytes, g.row_bytes));
          }
        }
      }
      EXPECT_EQ(pack->bundle_bytes(), mlp);
      if (type != DType::kQ4_0 || group != 2) continue;
      // Hostile cuts of a column pack.
      const std::string bytes = testing::ReadFile(dir + "/a.weir");
      for (size_t cut : {size_t{100}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 4097}) {
        const std::string path = dir + "/cut.weir";
        testing::WriteFile(path, bytes.substr(0, cut));
        EXPECT_FALSE(PackFile::Open(path).ok()) << cut;
      }
    }
  }
}

}  // namespace
}  // namespace weir::format

namespace weir::format {
namespace {

// Sparse column layout: every record decodes to its column of the source (F32: exactly; zeros
// skipped), offsets are well formed, the file is deterministic, and a damaged offset table is
// refused when the pack is opened.
TEST(WeirPack, SparseColumnLayout) {
  const std::string dir = testing::TempDir();
  ModelFile src = Synth(DType::kF32, dir, 2);
  PackOptions o;
  o.layout = PackLayout::kSparseColumns;
  o.group_size = 2;
  auto pack = PackTwice(src, dir, o);
  ASSERT_TRUE(pack.ok()) << pack.status().ToString();
  EXPECT_EQ(pack->layout(), PackLayout::kSparseColumns);
  const PackGroup& g = pack->groups()[0];
  const uint8_t* in = pack->gguf().data() + g.in_offset;
  auto offset = [&](int64_t r) {
    uint64_t o;
    std::memcpy(&o, in + 8 * r, 8);
    return o;
  };
  for (int j = 0; j < g.n_layers; ++j) {
    const TensorView up = *src.Find(StrFormat("blk.%d.ffn_up.weight", j));
    for (int64_t i = 0; i < g.d_model; i += 7) {
      const int64_t r = g.InRow(i, j, ColumnOp::kUpT);
      const std::byte* rec = reinterpret_cast<const std::byte*>(in + offset(r));
      std::vector<float> got(static_cast<size_t>(g.d_ff), 0.0f);
      kernels::SparseColumnAxpy(DType::kF32, rec, g.d_ff, 1.0f, got.data());
      EXPECT_EQ(offset(r + 1) - offset(r),
                kernels::SparseRecordBytes(DType::kF32, g.d_ff,
                                           kernels::SparseRecordCount(rec, g.d_ff)));
      const std::vector<float> want = Column(up, i);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), 4 * want.size())) << j << " " << i;
    }
  }
  // A damaged offset table.
  std::string bytes = testing::ReadFile(dir + "/a.weir");
  const uint64_t bad = 3;
  std::memcpy(bytes.data() + g.in_offset + 8 * 5, &bad, 8);
  testing::WriteFile(dir + "/bad.weir", bytes);
  auto refused = PackFile::Open(dir + "/bad.weir");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("record offset 5"), std::string::npos)
      << refused.status().ToString();
  // Random byte flips in the header and the offset tables: an error or a valid pack, never a
  // crash (this suite also runs under ASan in CI).
  const std::string good = testing::ReadFile(dir + "/a.weir");
  std::mt19937 rng(17);
  const size_t span = static_cast<size_t>(g.in_offset) + 8 * (g.in_rows() + 1);
  int refusals = 0;
  for (int i = 0; i < 300; ++i) {
    std::string b = good;
    const size_t at = rng() % span;
    b[at] = static_cast<char>(b[at] ^ static_cast<char>(1 + rng() % 255));
    testing::WriteFile(dir + "/flip.weir", b);
    refusals += PackFile::Open(dir + "/flip.weir").ok() ? 0 : 1;
  }
  EXPECT_GT(refusals, 0);
}

}  // namespace
}  // namespace weir::format

namespace weir::format {
namespace {

TEST(PackOrder, PermutationsOnly) {
  std::vector<int32_t> order, slot;
  EXPECT_TRUE(SetPackOrder({2, 0, 1}, 3, "order", &order, &slot).ok());
  EXPECT_EQ(slot, (std::vector<int32_t>{1, 2, 0}));
  EXPECT_FALSE(SetPackOrder({2, 0, 0}, 3, "order", &order, &slot).ok());  // repeated
  EXPECT_FALSE(SetPackOrder({2, 0, 3}, 3, "order", &order, &slot).ok());  // out of range
  EXPECT_FALSE(SetPackOrder({0, 1}, 3, "order", &order, &slot).ok());     // wrong length
  EXPECT_TRUE(SetPackOrder({}, 3, "order", &order, &slot).ok());          // natural order
  EXPECT_TRUE(order.empty() && slot.empty());
  EXPECT_EQ(OrderByScore({0.5, 2.0, 0.5, 3.0}), (std::vector<int32_t>{3, 1, 0, 2}));
}

}  // namespace
}  // namespace weir::format
