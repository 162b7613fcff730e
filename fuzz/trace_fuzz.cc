// Fuzz target "trace": the sparsity trace reader. Writes the input to a scratch file, opens it
// (header), reads every record, rewinds and reads the first again, querying masks and events of
// every (layer, kind). In fuzzing builds (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) the reader
// does not reject a bad CRC, so that mutations reach the fields behind the checksums.
#include <cstdint>
#include <memory>
#include <string>

#include "format/trace_reader.h"
#include "fuzz_util.h"

namespace {
volatile uint64_t g_sink = 0;

uint64_t Touch(const weir::format::TraceReader& r, const weir::format::TraceToken& t) {
  uint64_t sink = t.token_index() + t.n_tokens();
  const auto& h = r.header();
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    for (uint32_t k = 0; k < h.kinds.size(); ++k) {
      sink += t.CountActive(l, k) + t.events(l, k).bytes_read;
      if (t.mask(l, k) != nullptr) sink += t.active(l, k, 0);
    }
  }
  return sink;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::format;
  std::string path = weir::fuzz::WriteScratch("fuzz.wtrace", weir::fuzz::AsText(data, size));
  auto r = TraceReader::Open(path);
  if (!r.ok()) return 0;
  uint64_t sink = (*r)->n_tokens() + (*r)->trailing_bytes();
  TraceToken tok;
  for (int i = 0; i < 100000; ++i) {
    auto more = (*r)->Next(&tok);
    if (!more.ok() || !*more) break;
    sink += Touch(**r, tok);
  }
  if ((*r)->Rewind().ok()) {
    if (auto more = (*r)->Next(&tok); more.ok() && *more) sink += Touch(**r, tok);
  }
  g_sink = g_sink + sink;
  return 0;
}
