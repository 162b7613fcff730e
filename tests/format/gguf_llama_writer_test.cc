// WriteLlamaGguf: round trips with and without type conversion, the rotate-half -> adjacent-pair
// RoPE permutation (checked on attention scores and against llama.cpp's own conversion of
// TinyStories-656K), per-layer dims of pruned models, tokenizer variants, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "format/gguf_reader.h"
#include "format/llama_gguf_writer.h"
#include "format/synth_llama.h"
#include "tensor/quantize.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

ModelFile LoadTiny(DType t, const std::string& dir, uint64_t seed = 3) {
  std::string path = dir + "/tiny-src.gguf";
  EXPECT_TRUE(WriteRandomLlamaGguf(*SynthPreset("tiny"), t, seed, path, nullptr).ok());
  auto m = LoadGgufModel(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

std::vector<float> RowF32(const TensorView& v, int64_t r) {
  std::vector<float> out(static_cast<size_t>(v.cols()));
  DequantizeRow(v, r, out.data());
  return out;
}

void ExpectSameConfig(const LlamaConfig& a, const LlamaConfig& b) {
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.n_head_kv, b.n_head_kv);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.d_ff, b.d_ff);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.ctx_len, b.ctx_len);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_dim, b.rope_dim);
  EXPECT_EQ(a.tied_output, b.tied_output);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_EQ(a.layers[l].n_head, b.layers[l].n_head);
    EXPECT_EQ(a.layers[l].n_head_kv, b.layers[l].n_head_kv);
    EXPECT_EQ(a.layers[l].d_ff, b.layers[l].d_ff);
  }
}

TEST(GgufLlamaWriterTest, RoundTripWithoutConversionIsExact) {
  std::string dir = testing::TempDir();
  ModelFile src = LoadTiny(DType::kQ8_0, dir);
  std::string out = dir + "/copy.gguf";
  ASSERT_TRUE(WriteLlamaGguf(src, out, std::nullopt).ok());
  auto m = LoadGgufModel(out);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ExpectSameConfig(m->config, src.config);
  EXPECT_EQ(m->tokenizer.tokens, src.tokenizer.tokens);
  EXPECT_EQ(m->tokenizer.scores, src.tokenizer.scores);
  EXPECT_EQ(m->tokenizer.types, src.tokenizer.types);
  EXPECT_EQ(m->tokenizer.bos_id, src.tokenizer.bos_id);
  EXPECT_EQ(m->tokenizer.eos_id, src.tokenizer.eos_id);
  EXPECT_EQ(m->tokenizer.add_bos, src.tokenizer.add_bos);
  ASSERT_EQ(m->tensors.size(), src.tensors.size());
  for (const auto& [name, v] : src.tensors) {
    const TensorView* w = m->Find(name);
    ASSERT_NE(w, nullptr) << name;
    EXPECT_EQ(w->dtype, v.dtype) << name;
    EXPECT_EQ(w->shape, v.shape) << name;
    EXPECT_EQ(std::memcmp(w->data, v.data, v.nbytes()), 0) << name;
  }
  auto f = GgufFile::Open(out);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->GetU32("general.file_type"), 7u);
  EXPECT_EQ(*f->GetString("general.name"), "weir-synth-tiny");
  EXPECT_FALSE(f->Has("llama.attention.key_length"));  // uniform layers: plain llama.cpp keys

  // Writing again gives the same bytes.
  ASSERT_TRUE(WriteLlamaGguf(src, dir + "/copy2.gguf", std::nullopt).ok());
  EXPECT_EQ(testing::ReadFile(out), testing::ReadFile(dir + "/copy2.gguf"));
}

TEST(GgufLlamaWriterTest, ConversionMatchesReferenceQuantization) {
  std::string dir = testing::TempDir();
  for (DType from : {DType::kF32, DType::kQ8_0}) {
    ModelFile src = LoadTiny(from, dir);
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      std::string out = dir + "/conv.gguf";
      ASSERT_TRUE(WriteLlamaGguf(src, out, to).ok()) << DTypeName(from) << "->" << DTypeName(to);
      auto m = LoadGgufModel(out);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      for (const auto& [name, v] : src.tensors) {
        const TensorView* w = m->Find(name);
        ASSERT_NE(w, nullptr);
        if (v.shape.ndim == 1) {
          EXPECT_EQ(w->dtype, DType::kF32) << name;
          EXPECT_EQ(std::memcmp(w->data, v.data, v.nbytes()), 0) << name;
          continue;
        }
        ASSERT_EQ(w->dtype, to) << name;
        std::vector<uint8_t> want(w->row_bytes());
        for (int64_t r : {int64_t{0}, v.rows() - 1}) {
          std::vector<float> f = RowF32(v, r);
          QuantizeRow(to, f.data(), want.data(), v.cols());
          EXPECT_EQ(std::memcmp(w->row(r), want.data(), want.size()), 0)
              << DTypeName(from) << "->" << DTypeName(to) << " " << name << " row " << r;
        }
      }
      auto f = GgufFile::Open(out);
      EXPECT_EQ(*f->GetU32("general.file_type"), LlamaFileType(to));
    }
  }
}

TEST(GgufLlamaWriterTest, RowsThatAreNotWholeBlocksKeepTheirType) {
  std::string path = testing::SharedPath("models/stories260K/stories260K-F32.gguf");
  if (!testing::FileExists(path)) GTEST_SKIP() << path << " not present";
  auto src = LoadGgufModel(path);
  ASSERT_TRUE(src.ok());
  std::string out = testing::TempDir() + "/s260k-q8.gguf";
  ASSERT_TRUE(WriteLlamaGguf(*src, out, DType::kQ8_0).ok());
  auto m = LoadGgufModel(out);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (const auto& [name, v] : m->tensors) {
    if (v.shape.ndim == 1) {
      EXPECT_EQ(v.dtype, DType::kF32) << name;
    } else if (v.cols() == 172) {  // ffn_down: d_ff = 172 is not a multiple of 32
      EXPECT_EQ(v.dtype, DType::kF32) << name;
      EXPECT_EQ(std::memcmp(v.data, src->Find(name)->data, v.nbytes()), 0);
    } else {
      EXPECT_EQ(v.dtype, DType::kQ8_0) << name;
    }
  }
  EXPECT_EQ(m->tensors.size(), 48u);
  ExpectSameConfig(m->config, src->config);
}

// Reference RoPE of one head (x has head_dim values, the first rope_dim rotated).
void Rope(std::vector<float>& x, int rope_dim, int pos, float theta, RopeStyle style) {
  for (int i = 0; i < rope_dim / 2; ++i) {
    double freq = std::pow(static_cast<double>(theta), -2.0 * i / rope_dim);
    double a = pos * freq, c = std::cos(a), s = std::sin(a);
    int j0 = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
    int j1 = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + rope_dim / 2;
    double x0 = x[j0], x1 = x[j1];
    x[j0] = static_cast<float>(x0 * c - x1 * s);
    x[j1] = static_cast<float>(x0 * s + x1 * c);
  }
}

// q_h . k_g for every head h (g = h's kv head) at positions pq, pk.
std::vector<double> Scores(const ModelFile& m, int layer, const std::vector<float>& x, int pq,
                           int pk, RopeStyle style) {
  const LlamaConfig& c = m.config;
  const TensorView& wq = *m.Find("blk." + std::to_string(layer) + ".attn_q.weight");
  const TensorView& wk = *m.Find("blk." + std::to_string(layer) + ".attn_k.weight");
  auto matvec = [&](const TensorView& w) {
    std::vector<float> y(static_cast<size_t>(w.rows()));
    for (int64_t r = 0; r < w.rows(); ++r) {
      std::vector<float> row = RowF32(w, r);
      double acc = 0;
      for (int64_t i = 0; i < w.cols(); ++i) acc += static_cast<double>(row[i]) * x[i];
      y[r] = static_cast<float>(acc);
    }
    return y;
  };
  std::vector<float> q = matvec(wq), k = matvec(wk);
  std::vector<double> scores;
  const int hd = c.head_dim, group = c.n_head / c.n_head_kv;
  for (int h = 0; h < c.n_head; ++h) {
    std::vector<float> qh(q.begin() + h * hd, q.begin() + (h + 1) * hd);
    std::vector<float> kh(k.begin() + (h / group) * hd, k.begin() + (h / group + 1) * hd);
    Rope(qh, c.rope_dim, pq, c.rope_theta, style);
    Rope(kh, c.rope_dim, pk, c.rope_theta, style);
    double s = 0;
    for (int i = 0; i < hd; ++i) s += static_cast<double>(qh[i]) * kh[i];
    scores.push_back(s);
  }
  return scores;
}

TEST(GgufLlamaWriterTest, RotateHalfModelsArePermutedToAdjacentPairs) {
  std::string dir = testing::TempDir();
  ModelFile src = LoadTiny(DType::kF32, dir);
  src.config.rope_style = RopeStyle::kRotateHalf;  // pretend the weights are laid out for HF
  std::string out = dir + "/permuted.gguf";
  ASSERT_TRUE(WriteLlamaGguf(src, out, std::nullopt).ok());
  auto m = LoadGgufModel(out);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->config.rope_style, RopeStyle::kAdjacentPairs);
  const int hd = src.config.head_dim;
  for (int l = 0; l < src.config.n_layers; ++l) {
    for (const char* t : {"attn_q", "attn_k"}) {
      std::string name = "blk." + std::to_string(l) + "." + t + ".weight";
      const TensorView& a = *src.Find(name);
      const TensorView& b = *m->Find(name);
      for (int64_t h = 0; h < a.rows() / hd; ++h) {
        for (int i = 0; i < hd / 2; ++i) {
          EXPECT_EQ(std::memcmp(b.row(h * hd + 2 * i), a.row(h * hd + i), a.row_bytes()), 0);
          EXPECT_EQ(
              std::memcmp(b.row(h * hd + 2 * i + 1), a.row(h * hd + i + hd / 2), a.row_bytes()), 0);
        }
      }
    }
    for (const char* t : {"attn_v", "attn_output", "ffn_down"}) {
      std::string name = "blk." + std::to_string(l) + "." + t + ".weight";
      EXPECT_EQ(std::memcmp(m->Find(name)->data, src.Find(name)->data, src.Find(name)->nbytes()),
                0);
    }
  }
  // The point of the permutation: rotate-half attention scores of the source equal the
  // adjacent-pair scores of the written file, at any pair of positions.
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(src.config.d_model));
  for (float& v : x) v = nd(rng);
  for (auto [pq, pk] : {std::pair{0, 0}, std::pair{7, 3}, std::pair{100, 1}}) {
    for (int l = 0; l < src.config.n_layers; ++l) {
      std::vector<double> want = Scores(src, l, x, pq, pk, RopeStyle::kRotateHalf);
      std::vector<double> got = Scores(*m, l, x, pq, pk, RopeStyle::kAdjacentPairs);
      std::vector<double> wrong = Scores(src, l, x, pq, pk, RopeStyle::kAdjacentPairs);
      ASSERT_EQ(want.size(), got.size());
      double diff_wrong = 0;
      for (size_t h = 0; h < want.size(); ++h) {
        EXPECT_NEAR(got[h], want[h], 1e-6 + 1e-5 * std::fabs(want[h]));
        diff_wrong = std::max(diff_wrong, std::fabs(wrong[h] - want[h]));
      }
      if (pq != pk) {
        EXPECT_GT(diff_wrong, 1e-6);  // without the permutation the scores differ
      }
    }
  }
}

TEST(GgufLlamaWriterTest, MatchesLlamaCppConversionOfTinyStories) {
  // tinystories-656k-F32.gguf was made from model.safetensors with llama.cpp's converter
  // (which permutes q/k the same way). weir's conversion of the safetensors must agree.
  std::string dir = testing::SharedPath("models/tinystories-656k");
  std::string ref_path = dir + "/tinystories-656k-F32.gguf";
  if (!testing::FileExists(dir + "/model.safetensors") || !testing::FileExists(ref_path)) {
    GTEST_SKIP() << dir << " not present";
  }
  auto st = LoadModel(dir);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ(st->config.rope_style, RopeStyle::kRotateHalf);
  std::string out = testing::TempDir() + "/ts656k.gguf";
  ASSERT_TRUE(WriteLlamaGguf(*st, out, std::nullopt).ok());
  auto mine = LoadGgufModel(out);
  auto ref = LoadGgufModel(ref_path);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  ExpectSameConfig(mine->config, ref->config);
  ASSERT_EQ(mine->tensors.size(), ref->tensors.size());
  for (const auto& [name, v] : ref->tensors) {
    const TensorView* w = mine->Find(name);
    ASSERT_NE(w, nullptr) << name;
    ASSERT_EQ(w->shape, v.shape) << name;
    ASSERT_EQ(w->dtype, v.dtype) << name;
    EXPECT_EQ(std::memcmp(w->data, v.data, v.nbytes()), 0) << name;
  }
  EXPECT_EQ(mine->tokenizer.tokens, ref->tokenizer.tokens);
  // The reference's scores are -(merge rank) too; tokens no merge makes differ only in the
  // placeholder (they are single characters, never the result of a merge).
  ASSERT_EQ(mine->tokenizer.scores.size(), ref->tokenizer.scores.size());
  const float unmerged = -static_cast<float>(st->tokenizer.merges.size()) - 1.0f;
  int n_merged = 0;
  for (size_t i = 0; i < mine->tokenizer.scores.size(); ++i) {
    if (mine->tokenizer.scores[i] == unmerged) continue;
    ++n_merged;
    EXPECT_EQ(mine->tokenizer.scores[i], ref->tokenizer.scores[i]) << mine->tokenizer.tokens[i];
  }
  EXPECT_GT(n_merged, 1900);
  EXPECT_EQ(mine->tokenizer.bos_id, ref->tokenizer.bos_id);
  EXPECT_EQ(mine->tokenizer.eos_id, ref->tokenizer.eos_id);
}

// A copy of rows [0, rows) and columns [0, cols) of an F32 matrix, owned by `keep`.
TensorView Slice(const TensorView& v, int64_t rows, int64_t cols,
                 std::vector<std::vector<float>>* keep) {
  keep->emplace_back(static_cast<size_t>(rows * cols));
  std::vector<float>& b = keep->back();
  for (int64_t r = 0; r < rows; ++r) std::memcpy(&b[r * cols], v.row(r), cols * sizeof(float));
  TensorView out;
  out.dtype = DType::kF32;
  out.shape = {rows, cols};
  out.data = b.data();
  return out;
}

TEST(GgufLlamaWriterTest, PrunedLayersAreWrittenAsPerLayerArrays) {
  std::string dir = testing::TempDir();
  ModelFile m = LoadTiny(DType::kF32, dir);
  // Prune layer 0 to 2 heads, 1 kv head and d_ff 96, so head_dim is no longer d_model/n_head.
  std::vector<std::vector<float>> keep;
  keep.reserve(16);
  const int hd = m.config.head_dim;
  const int dm = m.config.d_model;
  auto& t = m.tensors;
  t["blk.0.attn_q.weight"] = Slice(t["blk.0.attn_q.weight"], 2 * hd, dm, &keep);
  t["blk.0.attn_k.weight"] = Slice(t["blk.0.attn_k.weight"], hd, dm, &keep);
  t["blk.0.attn_v.weight"] = Slice(t["blk.0.attn_v.weight"], hd, dm, &keep);
  t["blk.0.attn_output.weight"] = Slice(t["blk.0.attn_output.weight"], dm, 2 * hd, &keep);
  t["blk.0.ffn_gate.weight"] = Slice(t["blk.0.ffn_gate.weight"], 96, dm, &keep);
  t["blk.0.ffn_up.weight"] = Slice(t["blk.0.ffn_up.weight"], 96, dm, &keep);
  t["blk.0.ffn_down.weight"] = Slice(t["blk.0.ffn_down.weight"], dm, 96, &keep);
  m.config.layers[0] = LayerDims{2, 1, 96};
  m.config.n_head = 2, m.config.n_head_kv = 1, m.config.d_ff = 96;
  ASSERT_TRUE(ValidateLlama(m).ok()) << ValidateLlama(m).ToString();

  std::string out = dir + "/pruned.gguf";
  ASSERT_TRUE(WriteLlamaGguf(m, out, std::nullopt).ok());
  auto f = GgufFile::Open(out);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->GetI32Array("llama.attention.head_count"), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(*f->GetI32Array("llama.attention.head_count_kv"), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(*f->GetI32Array("llama.feed_forward_length"), (std::vector<int32_t>{96, 192}));
  EXPECT_EQ(*f->GetU32("llama.attention.key_length"), static_cast<uint32_t>(hd));
  auto back = LoadGgufModel(out);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameConfig(back->config, m.config);
  EXPECT_EQ(back->config.head_dim, 16);
  for (const auto& [name, v] : m.tensors) {
    const TensorView* w = back->Find(name);
    ASSERT_NE(w, nullptr);
    ASSERT_EQ(w->shape, v.shape) << name;
    EXPECT_EQ(std::memcmp(w->data, v.data, v.nbytes()), 0) << name;
  }
}

TEST(GgufLlamaWriterTest, TokenizerVariants) {
  std::string dir = testing::TempDir();
  ModelFile m = LoadTiny(DType::kF32, dir);
  auto write_read = [&](const TokenizerSpec& tok) -> Result<ModelFile> {
    ModelFile c = m;
    c.tokenizer = tok;
    std::string out = dir + "/tok.gguf";
    WEIR_RETURN_IF_ERROR(WriteLlamaGguf(c, out, std::nullopt));
    return LoadGgufModel(out);
  };
  {
    TokenizerSpec none;
    auto r = write_read(none);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tokenizer.kind, TokenizerSpec::Kind::kNone);
  }
  {
    TokenizerSpec g;
    g.kind = TokenizerSpec::Kind::kBpeMerges;
    g.byte_level = true;
    g.tokens = {"a", "b", "ab", "\xc4\xa0", "<|eot|>"};
    g.merges = {"a b"};
    g.eos_id = 4;
    g.bos_id = -1;
    g.add_bos = false;
    g.add_space_prefix = false;
    auto r = write_read(g);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tokenizer.kind, TokenizerSpec::Kind::kBpeMerges);
    EXPECT_TRUE(r->tokenizer.byte_level);
    EXPECT_EQ(r->tokenizer.tokens, g.tokens);
    EXPECT_EQ(r->tokenizer.merges, g.merges);
    EXPECT_EQ(r->tokenizer.eos_id, 4);
    EXPECT_EQ(r->tokenizer.bos_id, -1);
    EXPECT_FALSE(r->tokenizer.add_bos);
  }
  {
    // A tokenizer.json-style BPE with a "▁" marker: written as SentencePiece with scores that
    // rank tokens by the merge that makes them.
    TokenizerSpec s;
    s.kind = TokenizerSpec::Kind::kBpeMerges;
    s.byte_level = false;
    s.tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "t",
                "h",     "e",   "th",   "the",          "\xe2\x96\x81the"};
    s.merges = {"t h", "th e", "\xe2\x96\x81 the"};
    s.unk_id = 0, s.bos_id = 1, s.eos_id = 2;
    auto r = write_read(s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tokenizer.kind, TokenizerSpec::Kind::kSentencePiece);
    ASSERT_EQ(r->tokenizer.scores.size(), s.tokens.size());
    EXPECT_EQ(r->tokenizer.scores[7], 0.0f);   // "th": merge 0
    EXPECT_EQ(r->tokenizer.scores[8], -1.0f);  // "the": merge 1
    EXPECT_EQ(r->tokenizer.scores[9], -2.0f);  // "▁the": merge 2
    EXPECT_LT(r->tokenizer.scores[4], -2.0f);  // base pieces rank below every merge
    EXPECT_EQ(r->tokenizer.types[1], TokenType::kControl);
    EXPECT_EQ(r->tokenizer.types[0], TokenType::kUnknown);
  }
}

TEST(GgufLlamaWriterTest, ExtraMetadataIsAppended) {
  std::string dir = testing::TempDir();
  ModelFile m = LoadTiny(DType::kQ8_0, dir);
  std::string out = dir + "/extra.gguf";
  ASSERT_TRUE(WriteLlamaGguf(m, out, std::nullopt, nullptr,
                             {{"weir.prune.method", GgufValue::String("test")},
                              {"weir.prune.kept", GgufValue::F32Array({0.5f, 1.0f})}})
                  .ok());
  auto f = GgufFile::Open(out);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->GetString("weir.prune.method"), "test");
  EXPECT_EQ(*f->GetF32Array("weir.prune.kept"), (std::vector<float>{0.5f, 1.0f}));
  EXPECT_EQ(*f->GetU32("general.quantization_version"), 2u);
  EXPECT_TRUE(LoadGgufModel(out).ok());
  // A key that repeats one the writer sets is an error, and nothing is written.
  std::string dup = dir + "/dup.gguf";
  Status st =
      WriteLlamaGguf(m, dup, std::nullopt, nullptr, {{"llama.block_count", GgufValue::U32(3)}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'llama.block_count' added twice"), std::string::npos)
      << st.message();
  EXPECT_FALSE(testing::FileExists(dup));
}

TEST(GgufLlamaWriterTest, RefusesInvalidModels) {
  std::string dir = testing::TempDir();
  ModelFile m = LoadTiny(DType::kF32, dir);
  m.tensors.erase("blk.1.ffn_up.weight");
  std::string out = dir + "/bad.gguf";
  Status st = WriteLlamaGguf(m, out, std::nullopt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("blk.1.ffn_up.weight"), std::string::npos) << st.message();
  EXPECT_FALSE(testing::FileExists(out));
}

}  // namespace
}  // namespace weir::format
