// weir tokenize: print the token ids (and pieces) of a text. Reads only the tokenizer of the
// model (no weights). --batch serves the tokenizer oracles (tests/tokenizer/tokenizers_oracle.py):
// many texts in one run, hex-encoded so that any bytes (invalid UTF-8 included) pass through.
#include <chrono>
#include <cstdio>
#include <fstream>

#include "common/cli.h"
#include "common/commands.h"
#include "common/model_flags.h"
#include "common/tokenizer_load.h"
#include "format/mapped_file.h"
#include "tokenizer/pre_split.h"
#include "tokenizer/tokenizer.h"

namespace weir::tools {
namespace {

Result<std::string> FromHex(const std::string& hex, size_t line) {
  auto nibble = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2) return Status::InvalidArgument(StrFormat("line %zu: odd hex length", line));
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument(
          StrFormat("line %zu: '%c%c' is not hex", line, hex[i], hex[i + 1]));
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

std::string ToHex(std::string_view s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (char c : s) {
    out.push_back(kDigits[static_cast<uint8_t>(c) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

// One line in, "id id id<TAB>hex of the decoded ids" out.
Status RunBatch(const tokenizer::Tokenizer& tok, const std::string& path, bool add_bos,
                bool parse_special) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open the batch file");
  std::string line, out;
  for (size_t n = 1; std::getline(in, line); ++n) {
    auto text = FromHex(line, n);
    if (!text.ok()) return text.status().WithContext(path);
    std::vector<int32_t> ids = tok.Encode(*text, add_bos, parse_special);
    out.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out.push_back(' ');
      out += std::to_string(ids[i]);
    }
    out.push_back('\t');
    out += ToHex(tok.DecodeAll(ids));
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return Status::Ok();
}

}  // namespace

int TokenizeMain(int argc, char** argv) {
  CLI::App app("Print the token ids of a text.", "tokenize");
  ModelFlags mf;
  std::string prompt, file, batch, pre;
  bool json = false, no_bos = false, pieces = false, no_special = false;
  AddModelFlags(app, &mf, /*with_ctx=*/false);
  app.get_option("-m")->required(false);
  auto* p = app.add_option("-p,--prompt", prompt, "text");
  app.add_option("-f,--file", file, "read the text from a file")->excludes(p);
  app.add_option("--batch", batch,
                 "tokenize every line of FILE, each the hex of a text; prints per line the ids, a "
                 "tab and the hex of their decoding (for oracles)");
  app.add_option("--pre", pre,
                 "use this pre-tokenizer instead of the file's (byte-level BPE only): " +
                     tokenizer::PreSplitter::KnownNames());
  app.add_flag("--no-bos", no_bos, "do not add BOS");
  app.add_flag("--no-special", no_special,
               "tokenize control-token text such as <|im_start|> as plain text");
  app.add_flag("--pieces", pieces, "print id and piece per line");
  app.add_flag("--json", json, "print as JSON");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  if (!file.empty()) {
    auto t = format::ReadSmallFile(file, 1ull << 30);
    if (!t.ok()) return Fail("tokenize", t.status());
    prompt = *t;
  }
  const auto start = std::chrono::steady_clock::now();
  auto spec = LoadTokenizerSpec(mf.model, mf.tokenizer);
  if (!spec.ok()) return Fail("tokenize", spec.status());
  if (spec->kind == format::TokenizerSpec::Kind::kNone) {
    return Fail("tokenize", Status::InvalidArgument(
                                mf.model + ": the model has no tokenizer; pass --tokenizer"));
  }
  if (!pre.empty()) {
    if (!spec->byte_level) {
      return Fail("tokenize",
                  Status::InvalidArgument("--pre applies to byte-level BPE vocabularies only"));
    }
    spec->pre = pre;
    spec->has_pre_regexes = false;
    spec->pre_regexes.clear();
  }
  auto tok = tokenizer::Tokenizer::Create(*spec);
  if (!tok.ok())
    return Fail("tokenize", tok.status().WithContext(mf.model.empty() ? mf.tokenizer : mf.model));
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool add_bos = !no_bos && tok->add_bos();
  if (!batch.empty()) {
    Status st = RunBatch(*tok, batch, add_bos, !no_special);
    return st.ok() ? kExitOk : Fail("tokenize", st);
  }
  std::vector<int32_t> ids = tok->Encode(prompt, add_bos, !no_special);
  if (json) {
    nlohmann::json ps = nlohmann::json::array();
    for (int32_t id : ids) ps.push_back(std::string(tok->piece(id)));
    PrintJson({{"tokens", ids},
               {"pieces", ps},
               {"count", ids.size()},
               {"vocab_size", tok->vocab_size()},
               {"pre_tokenizer", tok->pre_tokenizer()},
               {"load_seconds", load_seconds}});
  } else if (pieces) {
    for (int32_t id : ids) std::printf("%6d  '%s'\n", id, std::string(tok->piece(id)).c_str());
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace weir::tools
