// SentencePiece-style BPE encoding driven by piece scores (Kind::kSentencePiece), as llama.cpp
// does it for "llama" vocabularies:
//   1. Normalize: prepend " " when add_space_prefix, then replace every ' ' with "▁" (tabs and
//      newlines stay as they are).
//   2. Split into UTF-8 units (utf8.h); each is a symbol in a doubly linked list.
//   3. Repeatedly merge the adjacent pair whose concatenation is a matchable piece with the highest
//      score (ties: the leftmost pair). Candidate pairs live in a max-heap; entries made stale by
//      an earlier merge are recognized by their length and skipped, so the cost is O(n log n).
//   4. Each final symbol becomes its piece's id, or, when a single unit is not in the vocabulary,
//      its bytes as <0xNN> tokens, or unk when byte tokens are missing (vocab.h AppendFallback).
//
// Thread safety: pure function of its arguments.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace weir::tokenizer::internal {

// Appends the ids of `text` (without BOS) to *out. Empty text gives no ids.
void EncodeSentencePiece(const Vocab& v, std::string_view text, std::vector<int32_t>* out);

// "▁"-marks text: an optional leading marker, and every ' ' replaced by the marker.
std::string MarkSpaces(std::string_view text, bool add_prefix);

}  // namespace weir::tokenizer::internal
