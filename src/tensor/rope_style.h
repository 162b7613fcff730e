// How a model pairs the dimensions of a head for rotary position embedding. The pairing is a
// property of how the weights were laid out, so each file format states it; it is never guessed
// from tensor names.
//   kAdjacentPairs: rotate (x[2i], x[2i+1])          -- llama2.c, GGUF arch "llama"
//   kRotateHalf:    rotate (x[i], x[i + head_dim/2]) -- Hugging Face LlamaForCausalLM
#pragma once

namespace weir {

enum class RopeStyle { kAdjacentPairs, kRotateHalf };

inline const char* RopeStyleName(RopeStyle s) {
  return s == RopeStyle::kAdjacentPairs ? "adjacent-pairs" : "rotate-half";
}

}  // namespace weir
