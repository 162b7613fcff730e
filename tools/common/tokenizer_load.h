// The tokenizer of a model without its weights (weir tokenize, the tokenizer oracles): a GGUF's
// tokenizer.ggml.* keys, or the --tokenizer file (tokenizer.json / tokenizer.bin); other model
// files are loaded whole and their tokenizer taken.
#pragma once

#include <string>

#include "base/status.h"
#include "format/tokenizer_spec.h"

namespace weir::tools {

// `model_path` may be empty when `tokenizer_path` is a tokenizer.json.
Result<format::TokenizerSpec> LoadTokenizerSpec(const std::string& model_path,
                                                const std::string& tokenizer_path);

}  // namespace weir::tools
