#include "format/llama_gguf_writer.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <map>

#include "tensor/quantize.h"

namespace weir::format {

namespace {

// Per-layer dims, falling back to the config's scalars when the reader left `layers` empty.
std::vector<LayerDims> LayersOf(const LlamaConfig& c) {
  if (static_cast<int>(c.layers.size()) == c.n_layers) return c.layers;
  return std::vector<LayerDims>(static_cast<size_t>(c.n_layers),
                                LayerDims{c.n_head, c.n_head_kv, c.d_ff});
}

// A per-layer key: one u32 when all layers agree, else an array of n_layers u32.
void AddPerLayer(GgufWriter* w, const std::string& key, const std::vector<LayerDims>& layers,
                 int LayerDims::*field) {
  bool uniform = true;
  std::vector<uint32_t> vals;
  for (const LayerDims& l : layers) {
    vals.push_back(static_cast<uint32_t>(l.*field));
    uniform = uniform && l.*field == layers[0].*field;
  }
  if (uniform) {
    w->AddU32(key, vals.empty() ? 0 : vals[0]);
  } else {
    w->Add(key, GgufValue::U32Array(vals));
  }
}

bool IsBytePiece(const std::string& s) {
  return s.size() == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>(s[3])) &&
         std::isxdigit(static_cast<unsigned char>(s[4]));
}

std::vector<int32_t> TokenTypes(const TokenizerSpec& t) {
  std::vector<int32_t> types(t.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  if (t.types.size() == t.tokens.size()) {
    for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int32_t>(t.types[i]);
    return types;
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (t.kind == TokenizerSpec::Kind::kSentencePiece && IsBytePiece(t.tokens[i])) {
      types[i] = static_cast<int32_t>(TokenType::kByte);
    }
  }
  auto set = [&](int32_t id, TokenType tt) {
    if (id >= 0 && static_cast<size_t>(id) < types.size()) types[id] = static_cast<int32_t>(tt);
  };
  set(t.bos_id, TokenType::kControl);
  set(t.eos_id, TokenType::kControl);
  set(t.unk_id, TokenType::kUnknown);
  return types;
}

// Scores for a merge-list BPE written as SentencePiece: the token made by merge r scores -r
// (earlier merges win); tokens no merge makes score below every merge.
std::vector<float> ScoresFromMerges(const TokenizerSpec& t) {
  std::map<std::string, size_t> id_of;
  for (size_t i = 0; i < t.tokens.size(); ++i) id_of.emplace(t.tokens[i], i);
  const float unmerged = -static_cast<float>(t.merges.size()) - 1.0f;
  std::vector<float> scores(t.tokens.size(), unmerged);
  for (size_t r = 0; r < t.merges.size(); ++r) {
    const std::string& m = t.merges[r];
    size_t sp = m.find(' ');
    if (sp == std::string::npos) continue;
    auto it = id_of.find(m.substr(0, sp) + m.substr(sp + 1));
    if (it != id_of.end() && scores[it->second] == unmerged)
      scores[it->second] = -static_cast<float>(r);
  }
  return scores;
}

// Row r of the written attn_q/attn_k comes from this row of the rotate-half source.
int64_t RotateHalfSourceRow(int64_t r, int head_dim, int rope_dim) {
  int64_t head = r / head_dim;
  int64_t j = r % head_dim;
  if (j >= rope_dim) return r;
  int64_t src = (j % 2 == 0) ? j / 2 : j / 2 + rope_dim / 2;
  return head * head_dim + src;
}

}  // namespace

std::vector<std::string> LlamaTensorNames(
    const LlamaConfig& c, const std::function<bool(const std::string&)>& has_optional) {
  const ArchSpec& arch = *c.arch;
  // A fused tensor is listed when any of its parts is (the writer then needs all of them).
  auto listed = [&](const StoredTensor& s, int layer) {
    for (const TensorSpec& t : s.parts) {
      if (t.required) return true;
      if (has_optional ? has_optional(TensorName(t, layer))
                       : arch.qkv_bias && (t.role == TensorRole::kAttnQBias ||
                                           t.role == TensorRole::kAttnKBias ||
                                           t.role == TensorRole::kAttnVBias)) {
        return true;
      }
    }
    return false;
  };
  std::vector<std::string> names = {"token_embd.weight"};
  const std::vector<StoredTensor> stored = StoredTensors(arch);
  for (int l = 0; l < c.n_layers; ++l) {
    for (const StoredTensor& s : stored) {
      if (s.per_layer() && listed(s, l)) names.push_back(StoredTensorName(s, l));
    }
  }
  names.push_back("output_norm.weight");
  if (!c.tied_output) names.push_back("output.weight");
  // Optional global tensors other than the head (rope_freqs) go last, so that adding one leaves
  // the others where they were.
  for (const TensorSpec& t : arch.tensors) {
    if (t.per_layer || t.required || t.role == TensorRole::kOutput) continue;
    if (listed(StoredTensor{t.name, std::span<const TensorSpec>(&t, 1)}, -1)) {
      names.push_back(TensorName(t, -1));
    }
  }
  return names;
}

uint32_t LlamaFileType(DType t) { return Traits(t).file_type; }

Status AddLlamaGgufMetadata(const LlamaConfig& c, const TokenizerSpec& tok, const std::string& name,
                            uint32_t file_type, GgufWriter* w) {
  if (c.n_layers <= 0 || c.d_model <= 0 || c.head_dim <= 0) {
    return Status::InvalidArgument(
        StrFormat("GGUF metadata: invalid config (d_model %d, n_layers %d, head_dim %d)", c.d_model,
                  c.n_layers, c.head_dim));
  }
  const std::vector<LayerDims> layers = LayersOf(c);
  const ArchSpec& arch = *c.arch;
  const std::string prefix = arch.gguf_name;  // every hyperparameter key is "<arch>.<name>"
  auto K = [&](const char* key) { return prefix + "." + key; };
  w->AddString("general.architecture", prefix);
  w->AddString("general.name", name);
  w->AddU32("general.file_type", file_type);
  if (file_type == LlamaFileType(DType::kQ8_0) || file_type == LlamaFileType(DType::kQ4_0)) {
    w->AddU32("general.quantization_version", 2);  // ggml's current Q4_0/Q8_0 block layout
  }
  w->AddU32(K("context_length"), static_cast<uint32_t>(c.ctx_len > 0 ? c.ctx_len : 2048));
  w->AddU32(K("embedding_length"), static_cast<uint32_t>(c.d_model));
  w->AddU32(K("block_count"), static_cast<uint32_t>(c.n_layers));
  AddPerLayer(w, K("feed_forward_length"), layers, &LayerDims::d_ff);
  AddPerLayer(w, K("attention.head_count"), layers, &LayerDims::n_head);
  AddPerLayer(w, K("attention.head_count_kv"), layers, &LayerDims::n_head_kv);
  bool uniform = true;
  for (const LayerDims& l : layers) {
    uniform = uniform && l.n_head == layers[0].n_head && l.n_head_kv == layers[0].n_head_kv &&
              l.d_ff == layers[0].d_ff;
  }
  if (!uniform || layers[0].n_head <= 0 || layers[0].n_head * c.head_dim != c.d_model) {
    w->AddU32(K("attention.key_length"), static_cast<uint32_t>(c.head_dim));
    w->AddU32(K("attention.value_length"), static_cast<uint32_t>(c.head_dim));
  }
  w->AddU32(K("rope.dimension_count"),
            static_cast<uint32_t>(c.rope_dim > 0 ? c.rope_dim : c.head_dim));
  w->AddF32(K("rope.freq_base"), c.rope_theta);
  // Linear RoPE scaling; without the key llama.cpp reads "linear" with no factor, i.e. none.
  if (c.rope_scaling_factor != 1.0f) {
    w->AddString(K("rope.scaling.type"), "linear");
    w->AddF32(K("rope.scaling.factor"), c.rope_scaling_factor);
  }
  w->AddF32(K("attention.layer_norm_rms_epsilon"), c.rms_eps);
  w->AddU32(K("vocab_size"), static_cast<uint32_t>(c.vocab_size));
  // What GGUF cannot state for the row is refused, not dropped: a sliding window on a row
  // without sliding layers (Mistral's sliding_window; llama.cpp's converter drops it), a query
  // scale other than 1/sqrt(head_dim) (Gemma's query_pre_attn_scalar, which llama.cpp infers
  // only for the 27B models: Gemma 2's 46 layers, Gemma 3's 62).
  if (c.sliding_window > 0 && arch.sliding_window_period == 0) {
    return Status::Unsupported(StrFormat(
        "%s: a sliding window of %d on %s has no GGUF key (llama.cpp's %s has no sliding layers)",
        name.c_str(), c.sliding_window, arch.name, arch.gguf_name));
  }
  if (c.attn_scale > 0 && c.attn_scale != InferredAttnScale(prefix, c)) {
    return Status::Unsupported(
        StrFormat("%s: a query scale of %g (not 1/sqrt(head_dim)) has no GGUF key for %s",
                  name.c_str(), static_cast<double>(c.attn_scale), arch.gguf_name));
  }
  if (c.sliding_window > 0 && arch.sliding_window_period > 0) {
    w->AddU32(K("attention.sliding_window"), static_cast<uint32_t>(c.sliding_window));
    // The pattern only when it is not the row's default: one u32 flag per layer (llama.cpp
    // reads bool, u32 or i32 arrays).
    bool default_pattern = static_cast<int>(c.layer_sliding.size()) == c.n_layers;
    std::vector<uint32_t> flags;
    for (int l = 0; l < c.n_layers; ++l) {
      const int period = arch.sliding_window_period;
      flags.push_back(c.IsSliding(l) ? 1u : 0u);
      default_pattern = default_pattern && c.IsSliding(l) == (l % period < period - 1);
    }
    if (!default_pattern) w->Add(K("attention.sliding_window_pattern"), GgufValue::U32Array(flags));
    // Not where the row's default is the global base and the file keeps it (gemma2's
    // converter never writes the key).
    if (arch.rope_theta_sliding > 0 || c.rope_theta_sliding != c.rope_theta) {
      w->AddF32(K("rope.freq_base_swa"), c.rope_theta_sliding);
    }
  } else if (arch.sliding_window_period > 0 && arch.sliding_window_default > 0) {
    w->AddU32(K("attention.sliding_window"), 0);  // absent would read as the row's default
  }
  if (arch.moe) {
    // llama.cpp reads the experts' width from expert_feed_forward_length (qwen3moe) or
    // feed_forward_length (llama); both are written.
    AddPerLayer(w, K("expert_feed_forward_length"), layers, &LayerDims::d_ff);
    w->AddU32(K("expert_count"), static_cast<uint32_t>(c.n_expert));
    w->AddU32(K("expert_used_count"), static_cast<uint32_t>(c.n_expert_used));
    if (!c.expert_weights_norm) w->AddBool(K("expert_weights_norm"), false);
  }
  // A soft-cap of 0 (none) is written where the row's default for an absent key is not 0.
  if (arch.logit_softcap && (c.final_logit_softcap > 0 || arch.final_softcap_default > 0)) {
    w->AddF32(K("final_logit_softcapping"), c.final_logit_softcap);
  }
  if (arch.attn_softcap && (c.attn_logit_softcap > 0 || arch.attn_softcap_default > 0)) {
    w->AddF32(K("attn_logit_softcapping"), c.attn_logit_softcap);
  }

  if (tok.kind == TokenizerSpec::Kind::kNone) {
    w->AddString("tokenizer.ggml.model", "no_vocab");
    return Status::Ok();
  }
  const bool gpt2 = tok.kind == TokenizerSpec::Kind::kBpeMerges && tok.byte_level;
  if (!tok.scores.empty() && tok.scores.size() != tok.tokens.size()) {
    return Status::InvalidArgument(
        StrFormat("GGUF metadata: tokenizer has %zu scores for %zu tokens", tok.scores.size(),
                  tok.tokens.size()));
  }
  w->AddString("tokenizer.ggml.model", gpt2 ? "gpt2" : "llama");
  // A tokenizer.json's own split regexes have no GGUF name; they are written as "default" (GPT-2),
  // which is what such files used before pre-tokenizers were named.
  if (gpt2) w->AddString("tokenizer.ggml.pre", tok.pre.empty() ? "default" : tok.pre);
  w->Add("tokenizer.ggml.tokens", GgufValue::StringArray(tok.tokens));
  if (!gpt2) {
    std::vector<float> scores =
        tok.kind == TokenizerSpec::Kind::kBpeMerges
            ? ScoresFromMerges(tok)
            : (tok.scores.empty() ? std::vector<float>(tok.tokens.size(), 0.0f) : tok.scores);
    w->Add("tokenizer.ggml.scores", GgufValue::F32Array(scores));
  }
  w->Add("tokenizer.ggml.token_type", GgufValue::I32Array(TokenTypes(tok)));
  if (gpt2) w->Add("tokenizer.ggml.merges", GgufValue::StringArray(tok.merges));
  if (tok.bos_id >= 0) w->AddU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tok.bos_id));
  if (tok.eos_id >= 0) w->AddU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tok.eos_id));
  if (tok.unk_id >= 0)
    w->AddU32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(tok.unk_id));
  if (tok.pad_id >= 0)
    w->AddU32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(tok.pad_id));
  w->AddBool("tokenizer.ggml.add_bos_token", tok.add_bos);
  w->AddBool("tokenizer.ggml.add_space_prefix", tok.add_space_prefix);
  if (!tok.chat_template.empty()) w->AddString("tokenizer.chat_template", tok.chat_template);
  return Status::Ok();
}

Status WriteLlamaGguf(const ModelFile& model, const std::string& path,
                      std::optional<DType> convert_to, const std::function<void(double)>& progress,
                      const std::vector<std::pair<std::string, GgufValue>>& extra_metadata) {
  WEIR_RETURN_IF_ERROR(ValidateLlama(model).WithContext(path));
  const LlamaConfig& c = model.config;
  const std::vector<std::string> names =
      LlamaTensorNames(c, [&](const std::string& n) { return model.Find(n) != nullptr; });
  // The parts of each fused tensor, by its name in the file; the model holds them split.
  std::map<std::string, std::vector<std::string>> parts_of;
  for (const StoredTensor& s : StoredTensors(*c.arch)) {
    for (int l = s.per_layer() ? 0 : -1; s.fused() && l < (s.per_layer() ? c.n_layers : 0); ++l) {
      std::vector<std::string>& parts = parts_of[StoredTensorName(s, l)];
      for (const TensorSpec& t : s.parts) parts.push_back(TensorName(t, l));
    }
  }

  // general.file_type follows the type most 2-D weight bytes end up in.
  std::map<DType, uint64_t> bytes_by_type;
  struct Plan {
    const TensorView* src;          // the tensor, or a fused tensor's first part
    std::vector<TensorView> parts;  // a fused tensor's parts in row order (else empty)
    Shape shape;
    DType out;
    bool permute;
  };
  std::vector<Plan> plans;
  for (const std::string& n : names) {
    Plan p{nullptr, {}, Shape{}, DType::kF32, false};
    auto fused = parts_of.find(n);
    for (const std::string& part :
         fused == parts_of.end() ? std::vector<std::string>{n} : fused->second) {
      const TensorView* v = model.Find(part);
      if (!v || !v->valid()) {
        return Status::InvalidArgument(
            StrFormat("%s: model %s has no tensor %s%s", path.c_str(), model.path.c_str(),
                      part.c_str(), part == n ? "" : (" (part of " + n + ")").c_str()));
      }
      if (fused != parts_of.end()) {
        if (!p.parts.empty() &&
            (v->shape.ndim != p.shape.ndim || (v->shape.ndim > 1 && v->cols() != p.shape.cols()))) {
          return Status::InvalidArgument(StrFormat(
              "%s: parts of %s have shapes %s and %s, not one row length", path.c_str(), n.c_str(),
              p.parts.front().shape.ToString().c_str(), v->shape.ToString().c_str()));
        }
        if (v->layout != Layout::kRowMajor) {
          return Status::InvalidArgument(
              StrFormat("%s: %s is held tiled; fusing it into %s needs "
                        "row-major rows",
                        path.c_str(), part.c_str(), n.c_str()));
        }
        if (p.parts.empty()) {
          p.shape = v->shape;
        } else {
          p.shape.dims[0] += v->shape[0];
        }
        p.parts.push_back(*v);
      } else {
        p.shape = v->shape;
      }
      if (p.src == nullptr) p.src = v;
    }
    const TensorView* v = p.src;
    p.out = v->dtype;
    if (v->shape.ndim == 1) {
      p.out = DType::kF32;
    } else if (convert_to && v->cols() % BlockSize(*convert_to) == 0 &&
               !n.ends_with(".ffn_gate_inp.weight")) {  // routers keep their type (as
                                                        // llama-quantize keeps them)
      p.out = *convert_to;
    }
    // Only when the file's pairing differs from the one the architecture's GGUF files use.
    p.permute = c.rope_style == RopeStyle::kRotateHalf &&
                c.arch->rope_style == RopeStyle::kAdjacentPairs &&
                (n.ends_with(".attn_q.weight") || n.ends_with(".attn_k.weight"));
    if (p.permute && (v->shape.ndim != 2 || v->rows() % c.head_dim != 0)) {
      return Status::InvalidArgument(StrFormat("%s: %s has shape %s, not whole heads of %d rows",
                                               path.c_str(), n.c_str(), v->shape.ToString().c_str(),
                                               c.head_dim));
    }
    if (v->shape.ndim >= 2)
      bytes_by_type[p.out] +=
          RowBytes(p.out, p.shape.cols()) * static_cast<uint64_t>(p.shape.rows());
    plans.push_back(std::move(p));
  }
  DType main_type = DType::kF32;
  uint64_t best = 0;
  for (const auto& [t, b] : bytes_by_type) {
    if (b > best) best = b, main_type = t;
  }

  GgufWriter w;
  std::string name;
  for (const auto& [k, v] : model.metadata) {
    if (k == "general.name") name = v;
  }
  if (name.empty()) {
    size_t slash = model.path.find_last_of('/');
    name = slash == std::string::npos ? model.path : model.path.substr(slash + 1);
    if (name.empty()) name = c.arch->name;
  }
  WEIR_RETURN_IF_ERROR(AddLlamaGgufMetadata(c, model.tokenizer, name, LlamaFileType(main_type), &w)
                           .WithContext(path));
  for (const auto& [key, value] : extra_metadata) w.Add(key, value);

  const int head_dim = c.head_dim;
  const int rope_dim = c.rope_dim > 0 ? c.rope_dim : c.head_dim;
  for (size_t i = 0; i < names.size(); ++i) {
    const Plan& p = plans[i];
    const TensorView src = *p.src;
    if (!p.parts.empty()) {
      // A fused tensor: row r is row r - (rows of the parts before it) of its part, converted
      // to the fused tensor's type where the part's differs (one element per row when 1-D).
      w.AddTensor(
          names[i], p.out, p.shape,
          [parts = p.parts, out = p.out](int64_t begin, int64_t end, uint8_t* dst) -> Status {
            const bool vec = parts.front().shape.ndim == 1;
            const int64_t cols = vec ? 1 : parts.front().cols();
            const size_t out_row = RowBytes(out, cols);
            if (vec) {  // 1-D (F32): the only row is the parts one after another
              for (const TensorView& part : parts) {
                if (part.dtype == out) {
                  std::memcpy(dst, part.data, part.row_bytes());
                } else {
                  std::vector<float> tmp(static_cast<size_t>(part.cols()));
                  DequantizeRow(part.dtype, part.data, tmp.data(), part.cols());
                  QuantizeRow(out, tmp.data(), dst, part.cols());
                }
                dst += RowBytes(out, part.cols());
              }
              return Status::Ok();
            }
            std::vector<float> tmp(static_cast<size_t>(cols));
            int64_t part_first = 0;
            size_t k = 0;
            for (int64_t r = begin; r < end; ++r) {
              while (r >= part_first + parts[k].rows()) part_first += parts[k++].rows();
              const TensorView& part = parts[k];
              uint8_t* d = dst + static_cast<size_t>(r - begin) * out_row;
              if (part.dtype == out) {
                std::memcpy(d, part.row(r - part_first), out_row);
              } else {
                DequantizeRow(part.dtype, part.row(r - part_first), tmp.data(), cols);
                QuantizeRow(out, tmp.data(), d, cols);
              }
            }
            return Status::Ok();
          });
      continue;
    }
    if (p.out == src.dtype && !p.permute) {
      w.AddTensor(names[i], p.out, src.shape, src.data);
      continue;
    }
    w.AddTensor(names[i], p.out, src.shape,
                [src, p = Plan{p.src, {}, p.shape, p.out, p.permute}, head_dim, rope_dim](
                    int64_t begin, int64_t end, uint8_t* dst) -> Status {
                  const int64_t cols = src.cols();
                  const size_t out_row = RowBytes(p.out, cols);
                  std::vector<float> tmp(p.out == src.dtype ? 0 : static_cast<size_t>(cols));
                  for (int64_t r = begin; r < end; ++r) {
                    int64_t s = p.permute ? RotateHalfSourceRow(r, head_dim, rope_dim) : r;
                    uint8_t* d = dst + static_cast<size_t>(r - begin) * out_row;
                    if (p.out == src.dtype) {
                      std::memcpy(d, src.row(s), out_row);
                    } else {
                      DequantizeRow(src.dtype, src.row(s), tmp.data(), cols);
                      QuantizeRow(p.out, tmp.data(), d, cols);
                    }
                  }
                  return Status::Ok();
                });
  }
  return w.Write(path, progress);
}

}  // namespace weir::format
