// Fuzz target "tokenizer_spm": SentencePiece encode/decode of arbitrary bytes, with and without
// byte fallback (the input's first byte chooses). See tokenizer_targets.h for the invariants.
#include "tokenizer_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::fuzz;
  static const weir::tokenizer::Tokenizer& with_bytes = MustCreate(SpmSpec(true));
  static const weir::tokenizer::Tokenizer& without = MustCreate(SpmSpec(false));
  if (size == 0) return 0;
  if (data[0] & 1) {
    EncodeDecodeOne(with_bytes, Lossless::kMarksAsSpaces, data + 1, size - 1);
  } else {
    EncodeDecodeOne(without, Lossless::kNo, data + 1, size - 1);
  }
  return 0;
}
