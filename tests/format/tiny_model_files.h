// Writers of tiny llama2.c checkpoints, llama2.c tokenizers, safetensors files and config.json
// for the format tests. They follow the byte layouts documented in the readers' headers but
// share no code with the readers, so a reader bug cannot cancel out in a test. Each writer also
// returns the float values it stored per canonical tensor name, the reference a loaded view is
// compared against.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor_view.h"
#include "testing/testing.h"

namespace weir::format::testdata {

// Writes `bytes` to a new file at `path`, removing any old one first. Rewriting a file in place
// (open with O_TRUNC) makes ext4 flush it on close, which costs milliseconds per write; the
// loops that rewrite a file thousands of times would spend minutes waiting for the disk.
inline void WriteFresh(const std::string& path, const std::string& bytes) {
  ::unlink(path.c_str());
  weir::testing::WriteFile(path, bytes);
}

struct TinyDims {
  int dim = 16;
  int hidden = 24;
  int n_layers = 2;
  int n_heads = 4;
  int n_kv_heads = 2;
  int vocab = 40;
  int seq_len = 8;
  bool shared = true;  // llama2.c: positive vocab_size, no wcls
  int head_size() const { return dim / n_heads; }
  int kv_dim() const { return head_size() * n_kv_heads; }
};

// name -> values (row-major, outermost first) and shape.
struct Expected {
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, Shape> shapes;
};

inline void AppendI32(std::string* out, int32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);  // tests run on little-endian hosts
  out->append(b, 4);
}
inline void AppendU64(std::string* out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out->append(b, 8);
}
inline void AppendF32(std::string* out, float v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out->append(b, 4);
}

// Deterministic, distinct values: tensor number t, element i.
inline float TestValue(int t, int64_t i) {
  return static_cast<float>(t) + static_cast<float>(i % 1000) * 1e-3f;
}

inline std::string Blk(int l, const char* suffix) {
  return "blk." + std::to_string(l) + "." + suffix;
}

// A llama2.c v0 checkpoint with TestValue contents; fills `expected` by canonical name.
inline std::string MakeLlama2c(const TinyDims& d, Expected* expected) {
  std::string out;
  for (int32_t v : {d.dim, d.hidden, d.n_layers, d.n_heads, d.n_kv_heads,
                    d.shared ? d.vocab : -d.vocab, d.seq_len}) {
    AppendI32(&out, v);
  }
  int tensor_no = 0;
  // One array of `layers` slices of [rows, cols]; slice l is stored as name(l).
  auto array = [&](int layers, int64_t rows, int64_t cols, auto name_of) {
    ++tensor_no;
    int64_t i = 0;
    for (int l = 0; l < layers; ++l) {
      std::vector<float> vals;
      for (int64_t k = 0; k < rows * cols; ++k, ++i) {
        float v = TestValue(tensor_no, i);
        AppendF32(&out, v);
        vals.push_back(v);
      }
      std::string name = name_of(l);
      if (!name.empty()) {
        expected->values[name] = vals;
        expected->shapes[name] = rows == 1 ? Shape{cols} : Shape{rows, cols};
      }
    }
  };
  const int L = d.n_layers;
  array(1, d.vocab, d.dim, [](int) { return std::string("token_embd.weight"); });
  array(L, 1, d.dim, [](int l) { return Blk(l, "attn_norm.weight"); });
  array(L, d.dim, d.dim, [](int l) { return Blk(l, "attn_q.weight"); });
  array(L, d.kv_dim(), d.dim, [](int l) { return Blk(l, "attn_k.weight"); });
  array(L, d.kv_dim(), d.dim, [](int l) { return Blk(l, "attn_v.weight"); });
  array(L, d.dim, d.dim, [](int l) { return Blk(l, "attn_output.weight"); });
  array(L, 1, d.dim, [](int l) { return Blk(l, "ffn_norm.weight"); });
  array(L, d.hidden, d.dim, [](int l) { return Blk(l, "ffn_gate.weight"); });
  array(L, d.dim, d.hidden, [](int l) { return Blk(l, "ffn_down.weight"); });
  array(L, d.hidden, d.dim, [](int l) { return Blk(l, "ffn_up.weight"); });
  array(1, 1, d.dim, [](int) { return std::string("output_norm.weight"); });
  array(1, d.seq_len, d.head_size() / 2, [](int) { return std::string(); });  // freq_cis_real
  array(1, d.seq_len, d.head_size() / 2, [](int) { return std::string(); });  // freq_cis_imag
  if (!d.shared) array(1, d.vocab, d.dim, [](int) { return std::string("output.weight"); });
  return out;
}

// The pieces of a small llama2.c-style vocabulary, as llama2.c's export writes them (spaces
// as ' '): <unk>, "\n<s>\n", "\n</s>\n", a few byte tokens, then words.
inline std::vector<std::string> Llama2cPieces(int vocab) {
  std::vector<std::string> p = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 8 && static_cast<int>(p.size()) < vocab; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b + 0x40);
    p.push_back(buf);
  }
  const char* words[] = {" the", " a", "he", " time", "on", " upon", " ", "Once", "e", " t"};
  for (int i = 0; static_cast<int>(p.size()) < vocab; ++i) {
    std::string w = words[i % 10];
    if (i >= 10) w += std::to_string(i);
    p.push_back(w);
  }
  return p;
}

inline std::string MakeLlama2cTokenizer(const std::vector<std::string>& pieces) {
  std::string out;
  int32_t max_len = 0;
  for (const auto& s : pieces) max_len = std::max<int32_t>(max_len, static_cast<int32_t>(s.size()));
  AppendI32(&out, max_len);
  for (size_t i = 0; i < pieces.size(); ++i) {
    AppendF32(&out, -static_cast<float>(i));
    AppendI32(&out, static_cast<int32_t>(pieces[i].size()));
    out += pieces[i];
  }
  return out;
}

// ---- safetensors ----

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", or anything for error tests
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::string F32Bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}
inline std::string U16Bytes(const std::vector<uint16_t>& v) {
  std::string s(v.size() * 2, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// header JSON padded with spaces so that (8 + N) % 8 == pad_to_mod8 (0: aligned).
inline std::string MakeSafetensors(const std::vector<StTensor>& tensors,
                                   const std::map<std::string, std::string>& metadata = {},
                                   int data_start_mod8 = 0) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  std::string data;
  for (const StTensor& t : tensors) {
    h[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
    data += t.bytes;
  }
  std::string json = h.dump();
  while ((8 + json.size()) % 8 != static_cast<size_t>(data_start_mod8)) json += ' ';
  std::string out;
  AppendU64(&out, json.size());
  return out + json + data;
}

// A full HF Llama weight set for `d` (F32), by HF name, in HF order; `expected` by canonical
// name. embed/lm_head inclusion is up to the caller (with_embed, with_head).
inline std::vector<StTensor> HfLlamaTensors(const TinyDims& d, bool with_embed, bool with_head,
                                            Expected* expected) {
  std::vector<StTensor> out;
  int tensor_no = 0;
  auto add = [&](const std::string& hf, const std::string& canonical, int64_t rows, int64_t cols) {
    ++tensor_no;
    std::vector<float> v(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) v[i] = TestValue(tensor_no, i);
    std::vector<int64_t> shape =
        rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols};
    out.push_back({hf, "F32", shape, F32Bytes(v)});
    expected->values[canonical] = v;
    expected->shapes[canonical] = rows == 1 ? Shape{cols} : Shape{rows, cols};
  };
  const int q = d.n_heads * d.head_size(), kv = d.kv_dim();
  if (with_embed) add("model.embed_tokens.weight", "token_embd.weight", d.vocab, d.dim);
  for (int l = 0; l < d.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", Blk(l, "attn_norm.weight"), 1, d.dim);
    add(p + "self_attn.q_proj.weight", Blk(l, "attn_q.weight"), q, d.dim);
    add(p + "self_attn.k_proj.weight", Blk(l, "attn_k.weight"), kv, d.dim);
    add(p + "self_attn.v_proj.weight", Blk(l, "attn_v.weight"), kv, d.dim);
    add(p + "self_attn.o_proj.weight", Blk(l, "attn_output.weight"), d.dim, q);
    add(p + "post_attention_layernorm.weight", Blk(l, "ffn_norm.weight"), 1, d.dim);
    add(p + "mlp.gate_proj.weight", Blk(l, "ffn_gate.weight"), d.hidden, d.dim);
    add(p + "mlp.up_proj.weight", Blk(l, "ffn_up.weight"), d.hidden, d.dim);
    add(p + "mlp.down_proj.weight", Blk(l, "ffn_down.weight"), d.dim, d.hidden);
  }
  add("model.norm.weight", "output_norm.weight", 1, d.dim);
  if (with_head) add("lm_head.weight", "output.weight", d.vocab, d.dim);
  return out;
}

inline nlohmann::json HfConfig(const TinyDims& d, bool tie) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", d.dim},
          {"intermediate_size", d.hidden},
          {"num_hidden_layers", d.n_layers},
          {"num_attention_heads", d.n_heads},
          {"num_key_value_heads", d.n_kv_heads},
          {"vocab_size", d.vocab},
          {"max_position_embeddings", d.seq_len},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"rope_scaling", nullptr},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", tie},
          {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

// A small SentencePiece-style BPE tokenizer.json (TinyStories-656K's structure) over `vocab`
// ids: specials 0..2, characters, and merges building "▁t", "he", "▁the".
inline nlohmann::json HfTokenizerJson(int vocab) {
  const std::string m = "\xE2\x96\x81";
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>",  "\n", "t",       "h",
                                     "e",     m,     m + "t", "he", m + "the", "a"};
  for (int i = static_cast<int>(pieces.size()); i < vocab; ++i)
    pieces.push_back(std::string("x") += std::to_string(i));
  nlohmann::json v = nlohmann::json::object();
  for (int i = 0; i < vocab; ++i) v[pieces[i]] = i;
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                       {{"id", 1}, {"content", "<s>"}, {"special", true}},
                       {{"id", 2}, {"content", "</s>"}, {"special", true}}};
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", m}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}}}}};
  j["model"] = {{"type", "BPE"},
                {"unk_token", "<unk>"},
                {"byte_fallback", true},
                {"vocab", v},
                {"merges", {m + " t", "h e", nlohmann::json::array({m + "t", "he"})}}};
  return j;
}

}  // namespace weir::format::testdata
