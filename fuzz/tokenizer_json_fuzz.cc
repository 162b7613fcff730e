// Fuzz target "tokenizer_json": Hugging Face tokenizer.json (+ tokenizer_config.json) loading.
// The input is tokenizer.json, then optionally kNextFile and tokenizer_config.json. A spec that
// parses is built into a tokenizer, which encodes and decodes a fixed text and the input itself.
#include <cstdint>
#include <string>
#include <vector>

#include "format/tokenizer_files.h"
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace {
volatile uint64_t g_sink = 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::format;
  auto [json, config] =
      weir::fuzz::SplitOnce(weir::fuzz::AsText(data, size), weir::fuzz::kNextFile);
  auto spec = ParseHfTokenizerJson(json, "tokenizer.json", config, "tokenizer_config.json");
  if (!spec.ok()) return 0;
  auto t = weir::tokenizer::Tokenizer::Create(*spec);
  if (!t.ok()) return 0;
  uint64_t sink = 0;
  for (std::string_view text :
       {std::string_view("Hello world, \xc3\xa9t\xc3\xa9 42\n\xff"), json}) {
    std::vector<int32_t> ids = t->Encode(text, true);
    for (int32_t id : ids) {
      if (id < 0 || id >= t->vocab_size()) __builtin_trap();  // Encode promises ids in range
    }
    sink += t->DecodeAll(ids).size();
  }
  g_sink = g_sink + sink;
  return 0;
}
