// Fuzz target "tokenizer_bpe": merge-list BPE (SentencePiece-style marks, <unk>, byte fallback
// tokens absent) encode/decode of arbitrary bytes. See tokenizer_targets.h for the invariants.
#include "tokenizer_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::fuzz;
  static const weir::tokenizer::Tokenizer& t = MustCreate(BpeSpec());
  EncodeDecodeOne(t, Lossless::kNo, data, size);
  return 0;
}
