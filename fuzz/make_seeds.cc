// fuzz_make_seeds OUT_DIR: writes the binary seed files of the fuzz corpora with weir's own
// writers: tiny GGUF models (SentencePiece and byte-level vocabularies, three weight types),
// packs of the dense layouts and of a mixture of experts, and a trace; and the chat_template
// target's seeds of weir's built-in chat templates. scripts/fuzz-seeds runs it and writes the
// other text seeds (JSON, llama2.c files, tokenizer texts, real templates, requests) itself.
// Not a fuzz target: built with the fuzz build so that it needs no second toolchain, and run by
// hand when the formats change.
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "chat/builtin_templates.h"
#include "format/gguf_reader.h"
#include "format/llama_gguf_writer.h"
#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/trace_writer.h"
#include "format/weir_pack_writer.h"
#include "fuzz_util.h"
#include "tokenizer_targets.h"

namespace {

using namespace weir;
using namespace weir::format;

bool Check(const Status& s, const char* what) {
  if (!s.ok()) std::fprintf(stderr, "fuzz_make_seeds: %s: %s\n", what, s.ToString().c_str());
  return s.ok();
}

SynthSpec Tiny(int vocab) {
  SynthSpec s;
  s.name = "seed";
  s.d_model = 32;
  s.n_layers = 1;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.d_ff = 64;
  s.vocab_size = vocab;
  s.ctx_len = 64;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds OUT_DIR\n");
    return 2;
  }
  const std::string out = argv[1];
  for (const char* d : {"gguf", "pack", "trace", "chat_template"}) {
    ::mkdir((out + "/" + d).c_str(), 0755);
  }
  bool ok = true;
  // Chat templates: each built-in with a small conversation (a system turn, two user turns).
  for (const chat::BuiltinTemplate& b : chat::BuiltinTemplates()) {
    const std::string path = out + "/chat_template/builtin-" + std::string(b.name);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) {
      ok &= Check(Status::IoError("cannot write " + path), "chat template seed");
      continue;
    }
    const std::string seed =
        std::string(b.source) + std::string(fuzz::kNextFile) +
        R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"},)"
        R"( {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}])";
    ok &= std::fwrite(seed.data(), 1, seed.size(), f) == seed.size();
    std::fclose(f);
  }
  // GGUF: SentencePiece vocabulary in two weight types (F32 would make a 110 KB seed).
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    std::string path = out + "/gguf/tiny-" + DTypeName(t) + ".gguf";
    for (char& c : path) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
    ok &= Check(WriteRandomLlamaGguf(Tiny(259), t, 7, path, nullptr), path.c_str());
  }
  // GGUF with a byte-level (gpt2) vocabulary: the synthetic model with fuzz's byte-level spec.
  {
    TokenizerSpec bl = fuzz::ByteLevelSpec();
    const std::string tmp = out + "/gguf/.bl-src.gguf";
    ok &= Check(WriteRandomLlamaGguf(Tiny(static_cast<int>(bl.tokens.size())), DType::kQ8_0, 3, tmp,
                                     nullptr),
                "byte-level source");
    auto m = LoadModel(tmp);
    ok &= Check(m.status(), "load byte-level source");
    if (m.ok()) {
      m->tokenizer = bl;
      ok &= Check(WriteLlamaGguf(*m, out + "/gguf/tiny-gpt2-q8-0.gguf", std::nullopt),
                  "byte-level gguf");
    }
    std::remove(tmp.c_str());
  }
  // Packs of both layouts from the Q8_0 model.
  {
    auto m = LoadModel(out + "/gguf/tiny-q8-0.gguf");
    ok &= Check(m.status(), "load q8_0 seed");
    if (m.ok()) {
      PackOptions o;
      ok &= Check(WritePack(*m, out + "/pack/tiny-bundles.weir", o), "bundles pack");
      o.layout = PackLayout::kColumns;
      ok &= Check(WritePack(*m, out + "/pack/tiny-columns.weir", o), "columns pack");
      // A mixture of experts and its experts pack (one page-aligned record per expert).
      auto moe_spec = SynthPreset("tiny", "mixtral");
      ok &= Check(moe_spec.status(), "mixtral preset");
      if (moe_spec.ok()) {
        const std::string moe_src = out + "/pack/.moe-src.gguf";
        ok &= Check(WriteRandomLlamaGguf(*moe_spec, DType::kQ8_0, 5, moe_src, nullptr), "mixtral");
        auto moe = LoadModel(moe_src);
        ok &= Check(moe.status(), "load mixtral");
        if (moe.ok()) {
          ok &= Check(WritePack(*moe, out + "/pack/tiny-experts.weir", PackOptions{}),
                      "experts pack");
        }
        std::remove(moe_src.c_str());
      }
      // A trace of that model: GLU neuron masks with cache events, 3 tokens.
      TraceHeader h = GluNeuronTraceHeader(m->config, /*cache_events=*/true);
      h.metadata = {{"policy", "dip-ca:0.5"}};
      auto w = TraceWriter::Create(out + "/trace/tiny.wtrace", h);
      ok &= Check(w.status(), "trace");
      if (w.ok()) {
        for (uint32_t tok = 0; tok < 3 && ok; ++tok) {
          ok &= Check((*w)->BeginToken(), "trace token");
          for (uint32_t l = 0; l < h.n_layers; ++l) {
            std::vector<uint32_t> active = {tok, 5, 17, 63};
            ok &= Check((*w)->SetMaskIndices(l, 0, active), "trace mask");
            ok &= Check((*w)->SetEvents(l, 0, CacheEvents{3, 1, 1, 4096}), "trace events");
          }
          ok &= Check((*w)->EndToken(), "trace end token");
        }
        ok &= Check((*w)->Close(), "trace close");
      }
    }
  }
  return ok ? 0 : 1;
}
