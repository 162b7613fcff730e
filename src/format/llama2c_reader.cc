#include "format/llama2c_reader.h"

#include <sys/stat.h>

#include <cstring>
#include <vector>

#include "base/checked_math.h"
#include "format/llama_limits.h"
#include "format/mapped_file.h"
#include "format/tokenizer_files.h"

namespace weir::format {

namespace {

int32_t ReadI32(const uint8_t* p) {
  uint32_t u = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
               static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  int32_t v;
  std::memcpy(&v, &u, 4);
  return v;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// One f32 array of the checkpoint: its offset and element count.
struct Array {
  uint64_t offset = 0;
  uint64_t count = 0;
};

// Lays the arrays out in file order; false on overflow.
class Layout {
 public:
  explicit Layout(uint64_t start) : next_(start) {}
  // Appends an array of a*b*c floats.
  bool Add(uint64_t a, uint64_t b, uint64_t c, Array* out) {
    uint64_t n, bytes;
    if (!CheckedMul(a, b, &n) || !CheckedMul(n, c, &n) || !CheckedMul(n, 4, &bytes)) return false;
    out->offset = next_;
    out->count = n;
    return CheckedAdd(next_, bytes, &next_);
  }
  uint64_t end() const { return next_; }

 private:
  uint64_t next_;
};

struct Arrays {
  Array token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_real,
      freq_imag, wcls;
};

bool ComputeLayout(const Llama2cHeader& h, Arrays* a, uint64_t* end) {
  const uint64_t dim = h.dim, hidden = h.hidden_dim, L = h.n_layers, vocab = h.vocab_size;
  const uint64_t head_size = dim / h.n_heads;
  const uint64_t kv_dim = head_size * h.n_kv_heads;
  Layout l(kLlama2cHeaderBytes);
  bool ok = l.Add(vocab, dim, 1, &a->token_embedding) && l.Add(L, dim, 1, &a->rms_att) &&
            l.Add(L, dim, dim, &a->wq) && l.Add(L, kv_dim, dim, &a->wk) &&
            l.Add(L, kv_dim, dim, &a->wv) && l.Add(L, dim, dim, &a->wo) &&
            l.Add(L, dim, 1, &a->rms_ffn) && l.Add(L, hidden, dim, &a->w1) &&
            l.Add(L, dim, hidden, &a->w2) && l.Add(L, hidden, dim, &a->w3) &&
            l.Add(dim, 1, 1, &a->rms_final) && l.Add(h.seq_len, head_size / 2, 1, &a->freq_real) &&
            l.Add(h.seq_len, head_size / 2, 1, &a->freq_imag);
  if (!ok) return false;
  if (!h.shared_classifier && !l.Add(vocab, dim, 1, &a->wcls)) return false;
  *end = l.end();
  return true;
}

Status CheckRange(const char* field, int64_t v, int64_t lo, int64_t hi, const std::string& path) {
  if (v < lo || v > hi) {
    return Status::InvalidArgument(StrFormat(
        "%s: llama2.c header field %s = %lld is outside %lld..%lld", path.c_str(), field,
        static_cast<long long>(v), static_cast<long long>(lo), static_cast<long long>(hi)));
  }
  return Status::Ok();
}

}  // namespace

Result<Llama2cHeader> ParseLlama2cHeader(const uint8_t* data, uint64_t size,
                                         const std::string& path) {
  const char* p = path.c_str();
  if (size < kLlama2cHeaderBytes) {
    return Status::InvalidArgument(
        StrFormat("%s: %llu bytes is too short for a llama2.c header (%llu bytes)", p,
                  static_cast<unsigned long long>(size),
                  static_cast<unsigned long long>(kLlama2cHeaderBytes)));
  }
  if (std::memcmp(data, "ak42", 4) == 0) {
    return Status::Unsupported(
        StrFormat("%s: llama2.c export version 1/2 (magic \"ak42\") is not supported; export with "
                  "--version 0 (legacy layout)",
                  p));
  }
  Llama2cHeader h;
  h.dim = ReadI32(data);
  h.hidden_dim = ReadI32(data + 4);
  h.n_layers = ReadI32(data + 8);
  h.n_heads = ReadI32(data + 12);
  h.n_kv_heads = ReadI32(data + 16);
  int32_t raw_vocab = ReadI32(data + 20);
  h.seq_len = ReadI32(data + 24);
  WEIR_RETURN_IF_ERROR(CheckRange("dim", h.dim, 1, limits::kMaxModelDim, path));
  WEIR_RETURN_IF_ERROR(CheckRange("hidden_dim", h.hidden_dim, 1, limits::kMaxFfnDim, path));
  WEIR_RETURN_IF_ERROR(CheckRange("n_layers", h.n_layers, 1, limits::kMaxLayers, path));
  WEIR_RETURN_IF_ERROR(CheckRange("n_heads", h.n_heads, 1, limits::kMaxHeads, path));
  WEIR_RETURN_IF_ERROR(CheckRange("n_kv_heads", h.n_kv_heads, 1, h.n_heads, path));
  WEIR_RETURN_IF_ERROR(CheckRange("seq_len", h.seq_len, 1, limits::kMaxContext, path));
  // |vocab_size|; checked as int64 so that INT32_MIN cannot overflow.
  int64_t vocab = raw_vocab < 0 ? -static_cast<int64_t>(raw_vocab) : raw_vocab;
  WEIR_RETURN_IF_ERROR(CheckRange("|vocab_size|", vocab, 1, limits::kMaxVocabSize, path));
  h.vocab_size = static_cast<int32_t>(vocab);
  h.shared_classifier = raw_vocab > 0;
  if (h.dim % h.n_heads != 0) {
    return Status::InvalidArgument(
        StrFormat("%s: llama2.c header: dim %d is not a multiple of "
                  "n_heads %d",
                  p, h.dim, h.n_heads));
  }
  if ((h.dim / h.n_heads) % 2 != 0) {
    return Status::InvalidArgument(
        StrFormat("%s: llama2.c header: head size %d (dim %d / "
                  "n_heads %d) must be even for RoPE",
                  p, h.dim / h.n_heads, h.dim, h.n_heads));
  }
  if (h.n_heads % h.n_kv_heads != 0) {
    return Status::InvalidArgument(
        StrFormat("%s: llama2.c header: n_heads %d is not a multiple "
                  "of n_kv_heads %d",
                  p, h.n_heads, h.n_kv_heads));
  }
  Arrays arrays;
  if (!ComputeLayout(h, &arrays, &h.expected_file_bytes)) {
    return Status::InvalidArgument(StrFormat("%s: llama2.c header sizes overflow 64 bits", p));
  }
  return h;
}

Result<ModelFile> LoadLlama2cModel(const std::string& path, const LoadOptions& options) {
  const char* p = path.c_str();
  WEIR_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  WEIR_ASSIGN_OR_RETURN(Llama2cHeader h, ParseLlama2cHeader(file->data(), file->size(), path));
  if (file->size() != h.expected_file_bytes) {
    return Status::Corrupt(StrFormat(
        "%s: llama2.c checkpoint should be %llu bytes for dim=%d hidden_dim=%d n_layers=%d "
        "n_heads=%d n_kv_heads=%d vocab_size=%d%s seq_len=%d, but the file has %llu bytes",
        p, static_cast<unsigned long long>(h.expected_file_bytes), h.dim, h.hidden_dim, h.n_layers,
        h.n_heads, h.n_kv_heads, h.vocab_size, h.shared_classifier ? "" : " (unshared)", h.seq_len,
        static_cast<unsigned long long>(file->size())));
  }
  // The mapping is page-aligned and every array starts at 28 + 4k, so f32 reads are aligned.
  if (reinterpret_cast<uintptr_t>(file->data()) % alignof(float) != 0) {
    return Status::Internal(StrFormat("%s: mapping is not 4-byte aligned", p));
  }
  Arrays a;
  uint64_t end;
  ComputeLayout(h, &a, &end);  // cannot fail: ParseLlama2cHeader computed the same layout

  ModelFile m;
  m.path = path;
  m.format = FileFormat::kLlama2c;
  LlamaConfig& c = m.config;
  c.d_model = h.dim;
  c.n_layers = h.n_layers;
  c.n_head = h.n_heads;
  c.n_head_kv = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.d_ff = h.hidden_dim;
  c.vocab_size = h.vocab_size;
  c.ctx_len = h.seq_len;
  c.rms_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_dim = c.head_dim;
  c.rope_style = RopeStyle::kAdjacentPairs;
  c.tied_output = h.shared_classifier;
  c.layers.assign(c.n_layers, LayerDims{c.n_head, c.n_head_kv, c.d_ff});

  const uint8_t* base = file->data();
  auto add = [&](const std::string& name, const Array& arr, uint64_t index, Shape shape) {
    TensorView v;
    v.dtype = DType::kF32;
    v.shape = shape;
    v.data = base + arr.offset + index * static_cast<uint64_t>(shape.numel()) * 4;
    m.tensors[name] = v;
    m.tensor_order.push_back(name);
  };
  const int64_t dim = h.dim, hidden = h.hidden_dim, kv_dim = int64_t{c.head_dim} * h.n_kv_heads;
  auto blk = [](int l, const char* suffix) { return "blk." + std::to_string(l) + "." + suffix; };
  add("token_embd.weight", a.token_embedding, 0, {h.vocab_size, dim});
  // Stored grouped by kind across layers; tensor_order follows the file.
  for (int l = 0; l < h.n_layers; ++l) add(blk(l, "attn_norm.weight"), a.rms_att, l, {dim});
  for (int l = 0; l < h.n_layers; ++l) add(blk(l, "attn_q.weight"), a.wq, l, {dim, dim});
  for (int l = 0; l < h.n_layers; ++l) add(blk(l, "attn_k.weight"), a.wk, l, {kv_dim, dim});
  for (int l = 0; l < h.n_layers; ++l) add(blk(l, "attn_v.weight"), a.wv, l, {kv_dim, dim});
  for (int l = 0; l < h.n_layers; ++l) add(blk(l, "attn_output.weight"), a.wo, l, {dim, dim});
  for (int l = 0; l < h.n_layers; ++l) add(blk(l, "ffn_norm.weight"), a.rms_ffn, l, {dim});
  for (int l = 0; l < h.n_layers; ++l) add(blk(l, "ffn_gate.weight"), a.w1, l, {hidden, dim});
  for (int l = 0; l < h.n_layers; ++l) add(blk(l, "ffn_down.weight"), a.w2, l, {dim, hidden});
  for (int l = 0; l < h.n_layers; ++l) add(blk(l, "ffn_up.weight"), a.w3, l, {hidden, dim});
  add("output_norm.weight", a.rms_final, 0, {dim});
  if (!h.shared_classifier) add("output.weight", a.wcls, 0, {h.vocab_size, dim});
  m.backing.push_back(file);

  m.metadata = {
      {"llama2c.dim", std::to_string(h.dim)},
      {"llama2c.hidden_dim", std::to_string(h.hidden_dim)},
      {"llama2c.n_layers", std::to_string(h.n_layers)},
      {"llama2c.n_heads", std::to_string(h.n_heads)},
      {"llama2c.n_kv_heads", std::to_string(h.n_kv_heads)},
      {"llama2c.vocab_size", std::to_string(h.shared_classifier ? h.vocab_size : -h.vocab_size)},
      {"llama2c.seq_len", std::to_string(h.seq_len)},
      {"llama2c.shared_classifier", h.shared_classifier ? "true" : "false"},
  };

  // Tokenizer: an explicit path must load; otherwise the first candidate beside the model.
  std::string tok_path = options.tokenizer_path;
  if (tok_path.empty()) {
    const std::string dir = DirName(path);
    for (const std::string& name :
         {"tok" + std::to_string(h.vocab_size) + ".bin", std::string("tokenizer.bin")}) {
      if (Exists(dir + "/" + name)) {
        tok_path = dir + "/" + name;
        break;
      }
    }
  }
  if (!tok_path.empty()) {
    auto tok = LoadLlama2cTokenizer(tok_path, h.vocab_size);
    if (!tok.ok()) {
      return tok.status().WithContext(StrFormat("tokenizer for %s", p));
    }
    m.tokenizer = std::move(tok).value();
    m.metadata.emplace_back("tokenizer.path", tok_path);
  }
  WEIR_RETURN_IF_ERROR(ValidateLlama(m));
  return m;
}

}  // namespace weir::format
