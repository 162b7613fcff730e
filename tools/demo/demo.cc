// weir demo: the README's first command. Generates a short story with the real stories260K model
// from ../shared/models when it is there; otherwise writes a tiny random-weight GGUF with
// `weir gen`'s generator and runs that (its text is noise, and the demo says so).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/printable.h"
#include "common/cli.h"
#include "common/commands.h"
#include "format/synth_llama.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/session.h"

namespace weir::tools {

namespace {

bool Exists(const std::string& p) { return access(p.c_str(), R_OK) == 0; }

std::string ExeDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

// $WEIR_SHARED, ./../shared (from the repository root), or beside the repository of the binary.
std::string FindSharedModel(const std::string& rel) {
  std::vector<std::string> roots;
  if (const char* env = std::getenv("WEIR_SHARED")) roots.push_back(env);
  roots.push_back("../shared");
  roots.push_back(ExeDir() + "/../../../shared");
  for (const auto& r : roots) {
    if (Exists(r + "/" + rel)) return r + "/" + rel;
  }
  return "";
}

}  // namespace

int DemoMain(int argc, char** argv) {
  CLI::App app("Generate a short story with the real stories260K model from ../shared/models when it\n"
               "exists, else with a tiny random-weight model weir generates itself.", "demo");
  int n_predict = 120, threads = 1;
  std::string prompt = "Once upon a time";
  bool json = false;
  app.add_option("-p,--prompt", prompt, "prompt (default \"Once upon a time\")");
  app.add_option("-n,--n-predict", n_predict, "tokens to generate (default 120)")->check(CLI::Range(1, 100000));
  app.add_option("-t,--threads", threads, "threads (default 1: the model is tiny)")->check(CLI::Range(1, 1024));
  app.add_flag("--json", json, "print the result as JSON");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  std::string path = FindSharedModel("models/stories260K/stories260K.bin");
  std::string which = "real model stories260K (llama2.c checkpoint, 260K parameters, trained on TinyStories)";
  const bool random_weights = path.empty();
  if (random_weights) {
    char dir[] = "/tmp/weir_demo_XXXXXX";
    if (!mkdtemp(dir)) return Fail("demo", Status::IoError("cannot create a temporary directory"));
    path = std::string(dir) + "/tiny-random.gguf";
    auto spec = format::SynthPreset("tiny");
    if (!spec.ok()) return Fail("demo", spec.status());
    Status st = format::WriteRandomLlamaGguf(*spec, DType::kQ8_0, 1, path, nullptr);
    if (!st.ok()) return Fail("demo", st);
    which = "a generated tiny model with random weights (" + path +
            "), because ../shared/models/stories260K was not found: expect noise, not stories";
  }
  if (!json) std::fprintf(stderr, "weir demo: using %s\n", which.c_str());

  auto m = model::Model::Load(path);
  if (!m.ok()) return Fail("demo", m.status());
  const tokenizer::Tokenizer* tok = (*m)->tokenizer();
  if (!tok) return Fail("demo", Status::Internal("demo model has no tokenizer"));
  ThreadPool pool(threads);
  auto session = model::Session::Create(**m, &pool, {});
  if (!session.ok()) return Fail("demo", session.status());
  model::SamplerOptions so;
  so.temp = 0;  // greedy: the same story every time
  model::Sampler sampler((*m)->config().vocab_size, so);
  std::vector<int32_t> ids = tok->Encode(prompt, tok->add_bos());
  std::string text = prompt;
  if (!json) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  int32_t prev = ids.back();
  auto stats = model::Generate(**session, sampler, ids, n_predict, tok->eos_id(), [&](int32_t id) {
    if (id == tok->eos_id()) return true;
    std::string piece = tok->Decode(prev, id);
    prev = id;
    text += piece;
    if (!json) {
      // Random weights emit arbitrary byte tokens: escaped, so the terminal gets text.
      const std::string shown = random_weights ? Printable(piece, piece.size() + 1) : piece;
      std::fwrite(shown.data(), 1, shown.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (!stats.ok()) return Fail("demo", stats.status());
  if (json) {
    PrintJson({{"model", path}, {"which", which}, {"text", text}, {"generated_tokens", stats->generated_tokens},
               {"decode_tok_s", stats->decode_tok_s()}});
  } else {
    std::fprintf(stdout, "\n");
    std::fflush(stdout);
    std::fprintf(stderr, "weir demo: %d tokens at %.0f tok/s (greedy)\n", stats->generated_tokens,
                 stats->decode_tok_s());
  }
  return kExitOk;
}

}  // namespace weir::tools
