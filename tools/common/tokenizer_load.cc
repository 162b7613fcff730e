#include "common/tokenizer_load.h"

#include <fstream>

#include "format/gguf_reader.h"
#include "format/model_file.h"
#include "format/tokenizer_files.h"

namespace weir::tools {
namespace {

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool StartsWithGgufMagic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

}  // namespace

Result<format::TokenizerSpec> LoadTokenizerSpec(const std::string& model_path,
                                                const std::string& tokenizer_path) {
  if (EndsWith(tokenizer_path, ".json")) return format::LoadHfTokenizerJson(tokenizer_path);
  if (model_path.empty()) {
    return Status::InvalidArgument("give -m MODEL or --tokenizer tokenizer.json");
  }
  if (tokenizer_path.empty() && StartsWithGgufMagic(model_path)) {
    WEIR_ASSIGN_OR_RETURN(format::GgufFile f, format::GgufFile::Open(model_path));
    return format::ReadGgufTokenizer(f);
  }
  format::LoadOptions opt;
  opt.tokenizer_path = tokenizer_path;
  WEIR_ASSIGN_OR_RETURN(format::ModelFile m, format::LoadModel(model_path, opt));
  return std::move(m.tokenizer);
}

}  // namespace weir::tools
