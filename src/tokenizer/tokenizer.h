// Tokenizer: text <-> token ids for the vocabularies a format::TokenizerSpec describes.
//
//   Kind::kSentencePiece  score-driven BPE over "▁"-marked text with <0xNN> byte fallback
//                         (llama.cpp's "llama" vocabularies, llama2.c tokenizer.bin);
//                         spm_encoder.h has the algorithm.
//   Kind::kBpeMerges      rank-driven BPE from a merge list, SentencePiece style ("▁" marker,
//                         byte fallback, fused unk) or GPT-2 byte level; bpe_encoder.h.
//
// Text that is not in the vocabulary never fails: it becomes byte tokens, or unk when the
// vocabulary lacks them (Create refuses a vocabulary that has neither). Invalid UTF-8 is handled
// one bad byte at a time (utf8.h).
//
// Special tokens: the piece of a user-defined token (e.g. Gemma's "\n\n" or "<start_of_turn>"
// when typed user-defined) is always matched whole in the input, before the text is split, as
// SentencePiece and tokenizers do; the piece of a control or unknown token ("<|im_start|>",
// "<s>") only when Encode is asked to parse special tokens (llama.cpp's parse_special), else it
// is ordinary text. At each position the longest such piece wins. Each stretch of text between
// special tokens is encoded on its own, space prefix included (tokenizers normalizes each such
// segment separately, llama.cpp prefixes the text after each special token the same way).
//
// Decoding follows llama2.c: each id prints as its piece with "▁" turned into ' ' (byte level:
// the GPT-2 byte mapping reversed), a <0xNN> token prints as that raw byte, a control token
// (BOS, EOS, ...) prints as nothing, and when add_space_prefix is set the leading space of the
// first piece of a text (after BOS, or with no previous token) is dropped, undoing the prefix
// Encode added. A multi-byte character split into byte tokens comes out one byte per Decode call;
// callers that stream should hold back incomplete UTF-8.
//
// Thread safety: immutable after Create; all methods are const and safe to call from many
// threads at once. Copies are cheap and share the tables.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/tokenizer_spec.h"

namespace weir::tokenizer {

namespace internal {
struct Vocab;
}

class Tokenizer {
 public:
  // Validates the spec (see internal::BuildVocab in vocab.h) and builds the lookup tables.
  static Result<Tokenizer> Create(const format::TokenizerSpec& spec);

  // Token ids of `text`, with bos_id() first when add_bos is true and the vocabulary has a BOS.
  // parse_special: control-token pieces in the text become those tokens (see above).
  std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                              bool parse_special = false) const;

  // The id whose piece is exactly `piece` among control and user-defined tokens, or -1 (the
  // chat loop finds end-of-turn markers such as "<|im_end|>" or "<end_of_turn>" this way).
  int32_t FindSpecial(std::string_view piece) const;
  // The byte-level pre-tokenizer's name ("" for SentencePiece-style vocabularies).
  std::string pre_tokenizer() const;

  // The text token `id` adds when it follows token `prev` (-1: nothing before it). Returns ""
  // for an id outside [0, vocab_size()).
  std::string Decode(int32_t prev, int32_t id) const;
  // Concatenated Decode of a sequence, starting with no previous token.
  std::string DecodeAll(std::span<const int32_t> ids) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1 when none
  int32_t eos_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;
  bool add_bos() const;  // whether the file asks for BOS before a prompt
  format::TokenizerSpec::Kind kind() const;

  // The piece as stored in the spec ("" for an id out of range).
  std::string_view piece(int32_t id) const;
  float score(int32_t id) const;             // 0 for an id out of range
  format::TokenType type(int32_t id) const;  // kNormal for an id out of range
  bool is_control(int32_t id) const;
  bool is_byte(int32_t id) const;  // a <0xNN> byte-fallback token

 private:
  explicit Tokenizer(std::shared_ptr<const internal::Vocab> vocab) : vocab_(std::move(vocab)) {}
  bool InRange(int32_t id) const;

  std::shared_ptr<const internal::Vocab> vocab_;  // never null
};

}  // namespace weir::tokenizer
