// weir tokenize: print the token ids (and pieces) of a text.
#include <cstdio>

#include "common/cli.h"
#include "common/commands.h"
#include "common/model_flags.h"
#include "format/mapped_file.h"

namespace weir::tools {

int TokenizeMain(int argc, char** argv) {
  CLI::App app("Print the token ids of a text.", "tokenize");
  ModelFlags mf;
  std::string prompt, file;
  bool json = false, no_bos = false, pieces = false;
  AddModelFlags(app, &mf, /*with_ctx=*/false);
  auto* p = app.add_option("-p,--prompt", prompt, "text");
  app.add_option("-f,--file", file, "read the text from a file")->excludes(p);
  app.add_flag("--no-bos", no_bos, "do not add BOS");
  app.add_flag("--pieces", pieces, "print id and piece per line");
  app.add_flag("--json", json, "print as JSON");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  if (!file.empty()) {
    auto t = format::ReadSmallFile(file, 1ull << 30);
    if (!t.ok()) return Fail("tokenize", t.status());
    prompt = *t;
  }
  auto m = LoadModel(mf);
  if (!m.ok()) return Fail("tokenize", m.status());
  const tokenizer::Tokenizer* tok = (*m)->tokenizer();
  if (!tok) return Fail("tokenize", Status::InvalidArgument("the model has no tokenizer; pass --tokenizer"));
  std::vector<int32_t> ids = tok->Encode(prompt, !no_bos && tok->add_bos());
  if (json) {
    nlohmann::json ps = nlohmann::json::array();
    for (int32_t id : ids) ps.push_back(std::string(tok->piece(id)));
    PrintJson({{"tokens", ids}, {"pieces", ps}, {"count", ids.size()}});
  } else if (pieces) {
    for (int32_t id : ids) std::printf("%6d  '%s'\n", id, std::string(tok->piece(id)).c_str());
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace weir::tools
