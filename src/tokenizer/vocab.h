// Vocab: the validated, lookup-ready form of a format::TokenizerSpec that the encoders and the
// decoder share. Internal to the tokenizer module (tokenizer.h is the public API).
//
// Thread safety: immutable after BuildVocab; shared by const pointer between threads.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "format/tokenizer_spec.h"
#include "tokenizer/pre_split.h"

namespace weir::tokenizer::internal {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
// piece text -> id, looked up by string_view without allocating.
using PieceMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// One rule of a merge list: the pair (left, right) becomes `result`; lower rank merges first.
struct MergeRule {
  int32_t rank = 0;
  int32_t result = 0;
};

inline uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Vocab {
  format::TokenizerSpec::Kind kind = format::TokenizerSpec::Kind::kNone;
  bool byte_level = false;
  bool add_space_prefix = true;
  bool add_bos = true;
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;

  std::vector<std::string> pieces;         // id -> piece as in the spec
  std::vector<float> scores;               // id -> score (0 when the spec has none)
  std::vector<format::TokenType> types;    // id -> type (kNormal when the spec has none)
  std::vector<std::string> decoded;        // id -> bytes the id stands for in output text
  std::vector<uint8_t> starts_with_space;  // id -> its piece begins with the space marker
  std::vector<int16_t> byte_value;         // id -> N for a "<0xNN>" byte token, else -1

  // Pieces text can turn into: every piece except control, unknown and byte tokens (those never
  // come from matching text). When two ids share a piece, the lower id wins.
  PieceMap matchable;
  // byte value -> id used to encode that byte, or -1:
  //   SentencePiece style: the "<0xNN>" token (only when spec.byte_fallback);
  //   byte_level: the token whose piece is the byte's mapped character.
  std::array<int32_t, 256> byte_ids{};
  // kBpeMerges: PairKey(left, right) -> rule.
  std::unordered_map<uint64_t, MergeRule> merges;
  // byte_level: the pre-tokenizer (spec.pre or spec.pre_regexes).
  std::optional<PreSplitter> splitter;
  bool ignore_merges = false;  // a word that is a piece is taken whole

  // Tokens matched whole in the input text before any splitting (llama.cpp's special-token
  // partition, tokenizers' added tokens): user-defined ones always, control and unknown ones only
  // when the caller parses special tokens. Lower id wins a shared piece.
  PieceMap specials;
  std::vector<size_t> special_lengths;  // the distinct piece lengths in bytes, longest first
  std::array<bool, 256> special_first_byte{};  // some special piece starts with this byte

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
  int32_t Find(std::string_view piece) const {
    auto it = matchable.find(piece);
    return it == matchable.end() ? -1 : it->second;
  }
};

// Validates the spec (kind, array lengths, special ids in range, token types, byte tokens, every
// merge naming existing pieces whose concatenation exists, some way to encode any byte) and builds
// the tables. Errors name the field and the offending values.
Result<std::shared_ptr<const Vocab>> BuildVocab(const format::TokenizerSpec& spec);

// Appends the ids for a unit of text that is not in the vocabulary: its bytes as byte tokens when
// every one has a token, else one unk. Returns true when it appended unk.
bool AppendFallback(const Vocab& v, std::string_view unit, std::vector<int32_t>* out);

// "▁" (U+2581), the SentencePiece space marker.
inline constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

}  // namespace weir::tokenizer::internal
