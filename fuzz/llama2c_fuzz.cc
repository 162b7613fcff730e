// Fuzz target "llama2c": the llama.c checkpoint reader and its tokenizer.bin. The input is the
// checkpoint, then optionally kNextFile and a tokenizer.bin written beside it. Parses the
// header in memory, the tokenizer for the header's vocabulary size, then loads the checkpoint
// from a scratch folder as a model (finding tokenizer.bin there), touching every tensor.
#include <cstdint>
#include <string>
#include <vector>

#include "format/llama2c_reader.h"
#include "format/model_file.h"
#include "format/tokenizer_files.h"
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace {
volatile uint64_t g_sink = 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::format;
  auto [ckpt, tok] = weir::fuzz::SplitOnce(weir::fuzz::AsText(data, size), weir::fuzz::kNextFile);
  uint64_t sink = 0;
  std::vector<uint8_t> copy(ckpt.begin(), ckpt.end());
  auto h = ParseLlama2cHeader(copy.data(), copy.size(), "fuzz.bin");
  if (h.ok() && !tok.empty()) {
    if (auto spec = ParseLlama2cTokenizer(tok, h->vocab_size, "tokenizer.bin"); spec.ok()) {
      if (auto t = weir::tokenizer::Tokenizer::Create(*spec); t.ok()) {
        sink += t->DecodeAll(t->Encode("Once upon a time \xe2\x96\x81 \xff", true)).size();
      }
    }
  }
  if (tok.data() != nullptr) {
    weir::fuzz::WriteScratch("tokenizer.bin", tok);
  } else {
    weir::fuzz::RemoveScratch("tokenizer.bin");
  }
  std::string path = weir::fuzz::WriteScratch("model.bin", ckpt);
  if (auto m = LoadModel(path); m.ok()) {
    for (const auto& [name, v] : m->tensors) {
      const uint8_t* p = static_cast<const uint8_t*>(v.data);
      sink += p[0] + p[v.nbytes() - 1];
    }
  }
  g_sink = g_sink + sink;
  return 0;
}
