// Merge-list BPE encoding driven by merge ranks (Kind::kBpeMerges), as Hugging Face tokenizers'
// BPE model does it, in two flavours:
//
// SentencePiece style (byte_level == false), e.g. TinyStories-656K's tokenizer.json:
//   1. Normalize like spm_encoder.h (leading "▁" when add_space_prefix, ' ' -> "▁"). The whole
//      text is one word: there is no pre-tokenizer, so merges may span spaces and newlines.
//   2. Each UTF-8 unit becomes its piece's id; a unit not in the vocabulary becomes its bytes as
//      <0xNN> tokens when all of them exist, else unk, and a run of such unk units fuses into one
//      unk (HF's fuse_unk, which SentencePiece-converted tokenizer.json files enable).
//   3. ApplyRankedMerges.
//
// Byte level (byte_level == true, GPT-2 style):
//   1. When add_space_prefix, prepend ' ' (always, so that Decode can strip it again; HF's
//      ByteLevel skips the prefix when the text already starts with a space).
//   2. Split into words with Gpt2PreSplit (byte_level.h documents its approximation).
//   3. Each byte of a word becomes the id of its mapped character (unk if that is missing);
//      ApplyRankedMerges per word.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace weir::tokenizer::internal {

// Appends the ids of `text` (without BOS) to *out. Empty text gives no ids.
void EncodeBpeMerges(const Vocab& v, std::string_view text, std::vector<int32_t>* out);

// Rewrites *ids by applying v.merges: repeatedly merge the adjacent pair with the lowest rank
// (ties: leftmost) until no adjacent pair has a rule. A min-heap of candidate pairs over a linked
// list of symbols makes this O(n log n); stale heap entries are detected by comparing ids.
void ApplyRankedMerges(const Vocab& v, std::vector<int32_t>* ids);

}  // namespace weir::tokenizer::internal
