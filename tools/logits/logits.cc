// weir logits: run a token sequence and write the logits of every position as raw float32
// [n_tokens, vocab] (row-major, little-endian) -- the interface the numpy oracle tests compare.
#include <cstdio>

#include "common/cli.h"
#include "common/commands.h"
#include "common/model_flags.h"
#include "common/token_list.h"
#include "model/session.h"

namespace weir::tools {

int LogitsMain(int argc, char** argv) {
  CLI::App app("Write the logits of every position of a token sequence as raw float32 [n, vocab].", "logits");
  ModelFlags mf;
  std::string tokens, prompt, out;
  bool json = false;
  AddModelFlags(app, &mf);
  auto* tk = app.add_option("--tokens", tokens, "comma-separated token ids");
  app.add_option("-p,--prompt", prompt, "text to tokenize (with BOS) instead of --tokens")->excludes(tk);
  app.add_option("-o,--output", out, "output file")->required();
  app.add_flag("--json", json, "print a JSON summary (tokens, argmax per position)");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  auto m = LoadModel(mf);
  if (!m.ok()) return Fail("logits", m.status());
  const model::Model& model = **m;
  std::vector<int32_t> ids;
  if (!tokens.empty()) {
    auto parsed = ParseTokenList(tokens);
    if (!parsed.ok()) return Fail("logits", parsed.status());
    ids = *parsed;
  } else {
    if (!model.tokenizer()) return Fail("logits", Status::InvalidArgument("the model has no tokenizer; use --tokens"));
    ids = model.tokenizer()->Encode(prompt, model.tokenizer()->add_bos());
  }
  if (ids.empty()) return Fail("logits", Status::InvalidArgument("no tokens"));
  ThreadPool pool(ThreadCount(mf));
  model::SessionOptions so;
  so.ctx = mf.ctx > 0 ? mf.ctx : static_cast<int>(ids.size());
  so.kv_types = mf.kv_types;
  so.n_batch = 16;
  auto session = model::Session::Create(model, &pool, so);
  if (!session.ok()) return Fail("logits", session.status());
  const int vocab = model.config().vocab_size;
  FILE* f = std::fopen(out.c_str(), "wb");
  if (!f) return Fail("logits", Status::IoError("cannot open " + out + " for writing"));
  nlohmann::json argmax = nlohmann::json::array();
  for (size_t i = 0; i < ids.size(); i += static_cast<size_t>((*session)->n_batch())) {
    size_t n = std::min(ids.size() - i, static_cast<size_t>((*session)->n_batch()));
    auto logits = (*session)->Forward(std::span<const int32_t>(ids).subspan(i, n), model::LogitsFor::kAll);
    if (!logits.ok()) {
      std::fclose(f);
      return Fail("logits", logits.status());
    }
    for (size_t t = 0; t < n; ++t) {
      const float* row = *logits + t * vocab;
      int best = 0;
      for (int v = 1; v < vocab; ++v) if (row[v] > row[best]) best = v;
      argmax.push_back(best);
    }
    if (std::fwrite(*logits, sizeof(float), n * vocab, f) != n * vocab) {
      std::fclose(f);
      return Fail("logits", Status::IoError("short write to " + out));
    }
  }
  if (std::fclose(f) != 0) return Fail("logits", Status::IoError("cannot write " + out));
  if (json) PrintJson({{"tokens", ids}, {"vocab", vocab}, {"argmax", argmax}, {"output", out}});
  return kExitOk;
}

}  // namespace weir::tools
