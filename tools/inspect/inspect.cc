// weir inspect: describe a model file -- format, hyperparameters, tokenizer, tensor table.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "format/gguf_reader.h"
#include "format/model_file.h"
#include "format/weir_pack_reader.h"

namespace weir::tools {

namespace {
const char* TokenizerKindName(format::TokenizerSpec::Kind k) {
  switch (k) {
    case format::TokenizerSpec::Kind::kNone: return "none";
    case format::TokenizerSpec::Kind::kSentencePiece: return "sentencepiece-bpe";
    case format::TokenizerSpec::Kind::kBpeMerges: return "bpe-merges";
  }
  return "?";
}
// A weir pack (format/weir_pack_format.h): the model, then how it is laid out for streaming.
int InspectPack(const format::PackFile& p, bool json, bool metadata) {
  const auto& c = p.config();
  if (json) {
    nlohmann::json j;
    j["path"] = p.path();
    j["format"] = "weir-pack";
    j["architecture"] = c.arch->name;
    j["config"] = {{"sliding_window", c.sliding_window}, {"d_model", c.d_model}, {"n_layers", c.n_layers}, {"n_head", c.n_head},
                   {"n_head_kv", c.n_head_kv}, {"head_dim", c.head_dim}, {"d_ff", c.d_ff},
                   {"vocab_size", c.vocab_size}, {"ctx_len", c.ctx_len}, {"tied_output", c.tied_output}};
    j["tokenizer"] = {{"kind", TokenizerKindName(p.tokenizer().kind)}, {"tokens", p.tokenizer().tokens.size()}};
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : p.groups()) {
      groups.push_back({{"group", g.index}, {"first_layer", g.first_layer}, {"layers", g.n_layers},
                        {"d_ff", g.d_ff}, {"type", DTypeName(g.dtype)}, {"bundle_bytes", g.bundle_bytes},
                        {"offset", g.offset}, {"bytes", g.nbytes}, {"in_offset", g.in_offset},
                        {"in_bytes", g.in_nbytes}});
    }
    nlohmann::json statics = nlohmann::json::array();
    for (const auto& t : p.static_tensors()) {
      std::vector<int64_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.ndim);
      statics.push_back({{"name", t.name}, {"type", DTypeName(t.dtype)}, {"shape", shape},
                         {"offset", t.offset}, {"bytes", t.nbytes}});
    }
    const char* layout_name = p.layout() == format::PackLayout::kColumns ? format::kPackLayoutColumns
                              : p.layout() == format::PackLayout::kSparseColumns
                                  ? format::kPackLayoutSparseColumns
                              : p.layout() == format::PackLayout::kExperts
                                  ? (p.expert_columns() ? format::kPackLayoutExpertColumns
                                                        : format::kPackLayoutExperts)
                                                                            : format::kPackLayout;
    j["pack"] = {{"version", format::kPackVersion},
                 {"layout", layout_name},
                 {"group_size", p.group_size()}, {"down_t", p.down_t()}, {"source", p.source()},
                 {"alignment", format::kPackAlignment}, {"groups", groups}, {"static_tensors", statics},
                 {"static_bytes", p.static_bytes()}, {"bundle_bytes", p.bundle_bytes()},
                 {"file_bytes", p.file_size()}};
    if (metadata) {
      nlohmann::json md = nlohmann::json::object();
      for (const auto& [k, v] : p.RenderMetadata()) md[k] = v;
      j["metadata"] = md;
    }
    PrintJson(j);
    return kExitOk;
  }
  std::printf("model:      %s\nformat:     weir pack v%u (GGUF container, %u-byte alignment), "
              "architecture %s, from %s\n",
              p.path().c_str(), format::kPackVersion, format::kPackAlignment, c.arch->name,
              p.source().empty() ? "?" : p.source().c_str());
  if (c.sliding_window > 0) {
    int sliding = 0;
    for (int l = 0; l < c.n_layers; ++l) sliding += c.IsSliding(l) ? 1 : 0;
    std::printf("sliding:    window %d on %d of %d layers\n", c.sliding_window, sliding,
                c.n_layers);
  }
  std::printf("d_model %d | layers %d | heads %d (kv %d, head_dim %d) | d_ff %d | vocab %d | ctx %d\n",
              c.d_model, c.n_layers, c.n_head, c.n_head_kv, c.head_dim, c.d_ff, c.vocab_size, c.ctx_len);
  std::printf("tokenizer:  %s, %zu tokens\n", TokenizerKindName(p.tokenizer().kind), p.tokenizer().tokens.size());
  if (metadata) {
    std::printf("\nmetadata:\n");
    for (const auto& [k, v] : p.RenderMetadata()) std::printf("  %-40s %s\n", k.c_str(), v.c_str());
  }
  const bool columns = format::IsColumnLayout(p.layout());
  const char* layout_name = p.layout() == format::PackLayout::kColumns ? format::kPackLayoutColumns
                            : p.layout() == format::PackLayout::kSparseColumns
                                ? format::kPackLayoutSparseColumns
                            : p.layout() == format::PackLayout::kExperts
                                  ? (p.expert_columns() ? format::kPackLayoutExpertColumns
                                                        : format::kPackLayoutExperts)
                                                                          : format::kPackLayout;
  std::printf("\nlayout:     %s; layer groups of up to %d layers", layout_name, p.group_size());
  if (columns) std::printf("; ffn_down^T %s", p.down_t().c_str());
  std::printf("\n");
  if (p.layout() == format::PackLayout::kSparseColumns) {
    std::printf("            as ffn_columns, each row stored as a bitmap of its non-zero values "
                "and those values (%s)\n", DTypeName(p.groups().front().dtype));
  }
  if (p.layout() == format::PackLayout::kExperts) {
    const format::PackGroup& g = p.groups().front();
    std::printf("            per layer, %d experts (%d per token), one page-aligned record of %s "
                "each: gate (%s) at +%llu, up (%s) at +%llu, down (%s) at +%llu\n",
                g.n_expert, c.n_expert_used, FormatBytes(g.expert_stride).c_str(),
                DTypeName(g.expert_type[0]), static_cast<unsigned long long>(g.expert_part[0]),
                DTypeName(g.expert_type[1]), static_cast<unsigned long long>(g.expert_part[1]),
                DTypeName(g.expert_type[2]), static_cast<unsigned long long>(g.expert_part[2]));
    if (g.expert_columns) {
      std::printf("            channel records: gate^T and up^T rows of each input channel, %s "
                  "each (%s), then W_down as %lld records (ffn_down^T %s)\n",
                  FormatBytes(g.channel_bytes).c_str(), DTypeName(g.expert_type[0]),
                  static_cast<long long>(g.down_records), p.down_t().c_str());
    }
    if (!g.expert_order.empty()) {
      std::printf("            records ordered by calibration routing counts (weir.pack.expert_order."
                  "<l>), layer 0's first records: experts");
      for (size_t r = 0; r < std::min<size_t>(8, g.expert_order.size()); ++r) {
        std::printf(" %d", g.expert_order[r]);
      }
      std::printf("\n");
    }
  } else if (columns) {
    std::printf("            ffn_in: input channel i = rows (i*n + j)*2 + {gate^T, up^T}; "
                "ffn_down: neuron c = row c*n + j (down^T), for its n layers j\n");
  } else {
    std::printf("            chunk of 32 neurons from c0 (width w) = for each of its n layers j, 3w rows "
                "from (c0*n + j*w)*3: w gate rows, w up rows, then ffn_down[:, c0..c0+w) by output "
                "(blocks as stored)\n");
  }
  std::printf("\n| group | layers | d_ff | type | bundle bytes | offset | bytes | in offset | in bytes |\n"
              "|---:|---|---:|---|---:|---:|---:|---:|---:|\n");
  for (const auto& g : p.groups()) {
    std::printf("| %d | %d..%d | %d | %s | %zu | %llu | %s | %llu | %s |\n", g.index, g.first_layer,
                g.first_layer + g.n_layers - 1, g.d_ff, DTypeName(g.dtype), g.bundle_bytes,
                static_cast<unsigned long long>(g.offset), FormatBytes(g.nbytes).c_str(),
                static_cast<unsigned long long>(g.in_offset), FormatBytes(g.in_nbytes).c_str());
  }
  std::printf("\n| %-28s | %-6s | %-16s | %12s | %12s |\n|%s|%s|%s|%s|%s|\n", "static tensor", "type", "shape",
              "offset", "bytes", std::string(30, '-').c_str(), std::string(8, '-').c_str(),
              std::string(18, '-').c_str(), std::string(14, '-').c_str(), std::string(14, '-').c_str());
  for (const auto& t : p.static_tensors()) {
    std::printf("| %-28s | %-6s | %-16s | %12llu | %12llu |\n", t.name.c_str(), DTypeName(t.dtype),
                t.shape.ToString().c_str(), static_cast<unsigned long long>(t.offset),
                static_cast<unsigned long long>(t.nbytes));
  }
  std::printf("\n%zu static tensors %s, %zu layer groups of MLP tensors %s, file %s\n", p.static_tensors().size(),
              FormatBytes(p.static_bytes()).c_str(), p.groups().size(), FormatBytes(p.bundle_bytes()).c_str(),
              FormatBytes(p.file_size()).c_str());
  return kExitOk;
}

}  // namespace

// A GGUF weir cannot load (an architecture or a tensor type it does not run): what the file
// holds, read without binding it to a model, and why it cannot run.
int InspectUnloadable(const format::GgufFile& g, const Status& why, bool json) {
  std::string arch = "?";
  if (auto a = g.GetString("general.architecture"); a.ok()) arch = a->substr(0, 64);
  std::map<std::string, uint64_t> bytes_by_type;
  std::vector<std::string> cannot;
  for (const format::GgufTensorInfo& info : g.tensors()) {
    const std::string type = GgmlTypeName(info.ggml_type);
    bytes_by_type[type] += info.nbytes;
    if (!info.dtype && std::find(cannot.begin(), cannot.end(), type) == cannot.end()) {
      cannot.push_back(type);
    }
  }
  if (json) {
    nlohmann::json j;
    j["path"] = g.path();
    j["format"] = "gguf";
    j["architecture"] = arch;
    j["runnable"] = false;
    j["reason"] = why.ToString();
    j["types_weir_cannot_compute"] = cannot;
    nlohmann::json tensors = nlohmann::json::array();
    for (const format::GgufTensorInfo& info : g.tensors()) {
      std::vector<int64_t> shape(info.shape.dims.begin(), info.shape.dims.begin() + info.shape.ndim);
      tensors.push_back({{"name", info.name}, {"type", GgmlTypeName(info.ggml_type)},
                         {"shape", shape}, {"bytes", info.nbytes}});
    }
    j["tensors"] = tensors;
    PrintJson(j);
    return kExitOk;
  }
  std::printf("model:      %s\nformat:     gguf, architecture %s\n", g.path().c_str(), arch.c_str());
  std::printf("weir cannot run it: %s\n", why.ToString().c_str());
  if (!cannot.empty()) {
    std::string list;
    for (const std::string& t : cannot) list += (list.empty() ? "" : ", ") + t;
    std::printf("tensor types weir does not compute: %s (it computes %s)\n", list.c_str(),
                DTypeNameList().c_str());
  }
  std::printf("\n| %-28s | %-8s | %-16s | %12s |\n", "tensor", "type", "shape", "bytes");
  for (const format::GgufTensorInfo& info : g.tensors()) {
    std::printf("| %-28s | %-8s | %-16s | %12llu |\n", info.name.c_str(),
                GgmlTypeName(info.ggml_type).c_str(), info.shape.ToString().c_str(),
                static_cast<unsigned long long>(info.nbytes));
  }
  std::printf("\nbytes by type:");
  for (const auto& [t, b] : bytes_by_type) std::printf(" %s %s", t.c_str(), FormatBytes(b).c_str());
  std::printf("\n");
  return kExitOk;
}

int InspectMain(int argc, char** argv) {
  CLI::App app("Describe a model file: format, hyperparameters, tokenizer and tensors.", "inspect");
  std::string path, tokenizer;
  bool json = false, metadata = false;
  app.add_option("-m,--model", path, "model file or folder")->required();
  app.add_option("--tokenizer", tokenizer, "tokenizer file to use instead of the one beside the model");
  app.add_flag("--metadata", metadata, "also list every metadata key");
  app.add_flag("--json", json, "print as JSON");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  // A weir pack is a GGUF file whose MLP is re-laid out: describe that layout.
  if (auto g = format::GgufFile::Open(path); g.ok() && format::PackFile::IsPack(*g)) {
    auto pack = format::PackFile::FromGguf(std::move(g).value());
    if (!pack.ok()) return Fail("inspect", pack.status());
    return InspectPack(*pack, json, metadata);
  }
  format::LoadOptions opt;
  opt.tokenizer_path = tokenizer;
  auto mf = format::LoadModel(path, opt);
  if (!mf.ok()) {
    // A GGUF that parses but does not load (unknown architecture or tensor type) is still
    // described; anything else (a damaged file) is an error.
    if (mf.status().code() == Status::Code::kUnsupported) {
      if (auto g = format::GgufFile::Open(path); g.ok()) {
        return InspectUnloadable(*g, mf.status(), json);
      }
    }
    return Fail("inspect", mf.status());
  }
  const auto& c = mf->config;
  const auto& t = mf->tokenizer;
  uint64_t total = 0;
  for (const auto& [n, v] : mf->tensors) total += v.nbytes();
  int sliding = 0;
  for (int l = 0; l < c.n_layers; ++l) sliding += c.IsSliding(l) ? 1 : 0;
  // Mixture of experts: the bytes of one expert (gate + up + down of layer 0) and of all of them.
  uint64_t expert_bytes = 0, all_experts_bytes = 0;
  if (c.IsMoe()) {
    for (const auto& [n, v] : mf->tensors) {
      if (v.shape.ndim == 3 && v.shape[0] == c.n_expert) {
        all_experts_bytes += v.nbytes();
        if (n.rfind("blk.0.", 0) == 0) expert_bytes += v.nbytes() / static_cast<uint64_t>(c.n_expert);
      }
    }
  }
  bool uniform = true;
  for (const auto& L : c.layers) {
    uniform = uniform && L.n_head == c.n_head && L.n_head_kv == c.n_head_kv && L.d_ff == c.d_ff;
  }

  if (json) {
    nlohmann::json j;
    j["path"] = mf->path;
    j["format"] = format::FileFormatName(mf->format);
    j["config"] = {{"d_model", c.d_model}, {"n_layers", c.n_layers}, {"n_head", c.n_head},
                   {"n_head_kv", c.n_head_kv}, {"head_dim", c.head_dim}, {"d_ff", c.d_ff},
                   {"vocab_size", c.vocab_size}, {"ctx_len", c.ctx_len}, {"rms_eps", c.rms_eps},
                   {"rope_theta", c.rope_theta}, {"rope_dim", c.rope_dim},
                   {"rope_style", RopeStyleName(c.rope_style)}, {"tied_output", c.tied_output},
                   {"architecture", c.arch->name}, {"sliding_window", c.sliding_window},
                   {"sliding_layers", sliding}, {"rope_theta_sliding", c.rope_theta_sliding},
                   {"attn_scale", c.AttnScale()}, {"attn_logit_softcap", c.attn_logit_softcap},
                   {"final_logit_softcap", c.final_logit_softcap},
                   {"rope_scaling_factor", c.rope_scaling_factor},
                   {"rope_freqs", mf->Find("rope_freqs.weight") != nullptr}};
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& L : c.layers) layers.push_back({{"n_head", L.n_head}, {"n_head_kv", L.n_head_kv}, {"d_ff", L.d_ff}});
    j["layers"] = layers;
    if (c.IsMoe()) {
      j["experts"] = {{"n_expert", c.n_expert}, {"n_expert_used", c.n_expert_used},
                      {"weights_norm", c.expert_weights_norm}, {"expert_bytes", expert_bytes},
                      {"all_experts_bytes", all_experts_bytes}};
    }
    j["tokenizer"] = {{"kind", TokenizerKindName(t.kind)}, {"tokens", t.tokens.size()},
                      {"merges", t.merges.size()}, {"bos_id", t.bos_id}, {"eos_id", t.eos_id},
                      {"unk_id", t.unk_id}, {"add_bos", t.add_bos},
                      {"pre", t.byte_level ? (t.has_pre_regexes ? std::string("(tokenizer.json stages)")
                                                                : (t.pre.empty() ? std::string("default") : t.pre))
                                           : std::string()},
                      {"chat_template", !t.chat_template.empty()}};
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& name : mf->tensor_order) {
      const TensorView* v = mf->Find(name);
      if (!v) continue;
      std::vector<int64_t> shape(v->shape.dims.begin(), v->shape.dims.begin() + v->shape.ndim);
      tensors.push_back({{"name", name}, {"type", DTypeName(v->dtype)}, {"shape", shape}, {"bytes", v->nbytes()}});
    }
    j["tensors"] = tensors;
    j["weight_bytes"] = total;
    if (metadata) {
      nlohmann::json md = nlohmann::json::object();
      for (const auto& [k, v] : mf->metadata) md[k] = v;
      j["metadata"] = md;
    }
    PrintJson(j);
    return kExitOk;
  }

  std::printf("model:      %s\nformat:     %s, architecture %s\n", mf->path.c_str(),
              format::FileFormatName(mf->format), c.arch->name);
  std::printf("d_model %d | layers %d | heads %d (kv %d, head_dim %d) | d_ff %d | vocab %d | ctx %d\n",
              c.d_model, c.n_layers, c.n_head, c.n_head_kv, c.head_dim, c.d_ff, c.vocab_size, c.ctx_len);
  std::printf("rms_eps %g | rope %s, theta %g, dims %d | output head %s\n", c.rms_eps,
              RopeStyleName(c.rope_style), c.rope_theta, c.rope_dim, c.tied_output ? "tied to token_embd" : "separate");
  if (c.rope_scaling_factor != 1.0f) {
    std::printf("rope scaling: linear, positions / %g%s\n", c.rope_scaling_factor,
                c.sliding_window > 0 && !c.arch->rope_scale_sliding ? " on the global layers" : "");
  }
  if (const TensorView* f = mf->Find("rope_freqs.weight"); f != nullptr && f->dtype == DType::kF32) {
    std::printf("rope frequency factors (rope_freqs.weight): %lld, from %g to %g\n",
                static_cast<long long>(f->cols()), f->f32()[0], f->f32()[f->cols() - 1]);
  }
  std::string fused;  // the architecture's fused tensors (held split: the table lists parts)
  for (const format::StoredTensor& st : format::StoredTensors(*c.arch)) {
    if (!st.fused()) continue;
    std::string parts;
    for (const format::TensorSpec& part : st.parts)
      parts += (parts.empty() ? "" : " + ") + std::string(part.name);
    fused += (fused.empty() ? "" : "; ") + std::string(st.name) + " = " + parts;
  }
  if (!fused.empty()) {
    std::printf("fused:      %s (held as views of their parts, listed below by part)\n",
                fused.c_str());
  }
  if (c.sliding_window > 0) {
    std::printf("sliding-window attention: %d of %d layers see the last %d positions (rope theta "
                "%g); the others all\n",
                sliding, c.n_layers, c.sliding_window, c.rope_theta_sliding);
  }
  if (c.attn_logit_softcap > 0 || c.final_logit_softcap > 0) {
    std::printf("soft-caps:  attention scores %g, final logits %g (cap * tanh(x / cap); 0 = "
                "none)\n",
                c.attn_logit_softcap, c.final_logit_softcap);
  }
  if (c.IsMoe()) {
    std::printf("experts:    %d per layer, %d per token (weights: softmax over %s) | one expert "
                "%s (gate + up + down, d_ff %d) | all experts %s of %s\n",
                c.n_expert, c.n_expert_used, c.expert_weights_norm ? "the chosen" : "all experts",
                FormatBytes(expert_bytes).c_str(), c.d_ff, FormatBytes(all_experts_bytes).c_str(),
                FormatBytes(total).c_str());
  }
  if (!uniform) {
    std::printf("per-layer dims (non-uniform):\n  layer  heads  kv_heads  d_ff\n");
    for (size_t l = 0; l < c.layers.size(); ++l) {
      std::printf("  %5zu  %5d  %8d  %5d\n", l, c.layers[l].n_head, c.layers[l].n_head_kv, c.layers[l].d_ff);
    }
  }
  std::printf("tokenizer:  %s, %zu tokens, %zu merges, bos %d, eos %d, unk %d, add_bos %s\n",
              TokenizerKindName(t.kind), t.tokens.size(), t.merges.size(), t.bos_id, t.eos_id, t.unk_id,
              t.add_bos ? "yes" : "no");
  if (t.byte_level) {
    std::printf("            pre-tokenizer %s\n",
                t.has_pre_regexes ? "from the tokenizer.json stages"
                                  : (t.pre.empty() ? "default (not stated)" : t.pre.c_str()));
  }
  std::printf("            chat template: %s\n",
              t.chat_template.empty() ? "none in the file (weir chat picks its family's built-in)"
                                      : "in the file (tokenizer.chat_template)");
  if (metadata) {
    std::printf("\nmetadata:\n");
    for (const auto& [k, v] : mf->metadata) std::printf("  %-40s %s\n", k.c_str(), v.c_str());
  }
  std::printf("\n| %-28s | %-6s | %-16s | %12s |\n|%s|%s|%s|%s|\n", "tensor", "type", "shape", "bytes",
              std::string(30, '-').c_str(), std::string(8, '-').c_str(), std::string(18, '-').c_str(),
              std::string(14, '-').c_str());
  for (const auto& name : mf->tensor_order) {
    const TensorView* v = mf->Find(name);
    if (!v) continue;
    std::printf("| %-28s | %-6s | %-16s | %12zu |\n", name.c_str(), DTypeName(v->dtype), v->shape.ToString().c_str(),
                v->nbytes());
  }
  std::printf("\n%zu tensors, %s of weights\n", mf->tensors.size(), FormatBytes(total).c_str());
  return kExitOk;
}

}  // namespace weir::tools
