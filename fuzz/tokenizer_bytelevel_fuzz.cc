// Fuzz target "tokenizer_bytelevel": GPT-2 byte-level BPE encode/decode of arbitrary bytes,
// which must round-trip exactly. See tokenizer_targets.h for the invariants.
#include "tokenizer_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::fuzz;
  static const weir::tokenizer::Tokenizer& t = MustCreate(ByteLevelSpec());
  EncodeDecodeOne(t, Lossless::kExact, data, size);
  return 0;
}
