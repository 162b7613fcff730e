// weir convert: write any loadable model (GGUF, safetensors, llama2.c) as a GGUF file, optionally
// converting the weight type. The source is only read.
#include <cstdio>
#include <filesystem>

#include "common/cli.h"
#include "common/commands.h"
#include "format/llama_gguf_writer.h"
#include "format/model_file.h"

namespace weir::tools {

int ConvertMain(int argc, char** argv) {
  CLI::App app("Write any loadable model as GGUF (llama.cpp can load the result).", "convert");
  std::string in, out, type, tokenizer;
  bool json = false, no_progress = false;
  app.add_option("-m,--model", in, "input model")->required();
  app.add_option("--tokenizer", tokenizer, "tokenizer file to use instead of the one beside the model");
  app.add_option("-o,--output", out, "output .gguf")->required();
  app.add_option("--type", type, "convert 2-D weights to " + DTypeNameList() + " (default: keep)");
  app.add_flag("--json", json, "print a JSON summary");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  std::optional<DType> to;
  if (!type.empty()) {
    to = DTypeFromName(type);
    if (!to) {
      std::fprintf(stderr, "weir convert: unknown --type '%s' (%s)\n", type.c_str(),
                   DTypeNameList().c_str());
      return kExitUsage;
    }
  }
  format::LoadOptions opt;
  opt.tokenizer_path = tokenizer;
  auto mf = format::LoadModel(in, opt);
  if (!mf.ok()) return Fail("convert", mf.status());
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(in, out, ec)) {
    return Fail("convert", Status::InvalidArgument("output " + out + " is the input file; refusing to overwrite it"));
  }
  ProgressBar bar("convert", 1000, !json && !no_progress);
  Status st = format::WriteLlamaGguf(*mf, out, to, [&](double f) { bar.Update(static_cast<uint64_t>(f * 1000)); });
  bar.Finish();
  if (!st.ok()) return Fail("convert", st);
  if (json) {
    PrintJson({{"input", in}, {"output", out}, {"type", to ? DTypeName(*to) : "unchanged"}});
  } else {
    std::printf("wrote %s\n", out.c_str());
  }
  return kExitOk;
}

}  // namespace weir::tools
