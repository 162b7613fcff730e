#include "tokenizer/vocab.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace weir::tokenizer::internal {
namespace {

using format::TokenizerSpec;
using format::TokenType;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte value of a "<0xNN>" piece, or -1.
int ParseByteToken(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int hi = HexDigit(piece[3]), lo = HexDigit(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

Status CheckSpecialId(const char* field, int32_t id, size_t n) {
  if (id == -1 || (id >= 0 && static_cast<size_t>(id) < n)) return Status::Ok();
  return Status::InvalidArgument(
      StrFormat("tokenizer %s %d is out of range [0, %zu) (use -1 for none)", field, id, n));
}

// Quotes a piece for an error message, truncated so a corrupt file cannot flood the message.
std::string Quote(std::string_view piece) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  out.append(piece.substr(0, kMax));
  if (piece.size() > kMax) out += "...";
  return out + "'";
}

std::string DecodeByteLevelPiece(std::string_view piece) {
  std::string out;
  for (size_t pos = 0; pos < piece.size();) {
    size_t len = Utf8UnitLength(piece, pos);
    uint32_t cp = Utf8Decode(piece, pos, len);
    int b = cp == kBadByteCodePoint ? -1 : CodePointToByte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(piece.substr(pos, len));  // not a mapped character (e.g. an added token): as is
    }
    pos += len;
  }
  return out;
}

std::string ReplaceSpaceMarkers(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t pos = 0; pos < piece.size();) {
    if (piece.substr(pos, kSpaceMarker.size()) == kSpaceMarker) {
      out.push_back(' ');
      pos += kSpaceMarker.size();
    } else {
      out.push_back(piece[pos++]);
    }
  }
  return out;
}

Status AddMerges(const TokenizerSpec& spec, const PieceMap& all_pieces, Vocab* v) {
  if (spec.merges.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::InvalidArgument(
        StrFormat("tokenizer has %zu merges, more than 2^31-1", spec.merges.size()));
  }
  v->merges.reserve(spec.merges.size());
  auto lookup = [&](std::string_view piece) {
    auto it = all_pieces.find(piece);
    return it == all_pieces.end() ? -1 : it->second;
  };
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    const std::string& m = spec.merges[i];
    size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      return Status::InvalidArgument(StrFormat(
          "tokenizer merge %zu %s is not two pieces separated by one space", i, Quote(m).c_str()));
    }
    std::string_view left(m.data(), space), right(m.data() + space + 1, m.size() - space - 1);
    int32_t left_id = lookup(left), right_id = lookup(right);
    std::string joined = std::string(left) + std::string(right);
    int32_t result_id = lookup(joined);
    for (auto [piece, id] :
         {std::pair{std::string_view(left), left_id}, std::pair{std::string_view(right), right_id},
          std::pair{std::string_view(joined), result_id}}) {
      if (id < 0) {
        return Status::InvalidArgument(
            StrFormat("tokenizer merge %zu %s: piece %s is not in the "
                      "vocabulary",
                      i, Quote(m).c_str(), Quote(piece).c_str()));
      }
    }
    // A repeated pair keeps its first (best) rank.
    v->merges.try_emplace(PairKey(left_id, right_id),
                          MergeRule{static_cast<int32_t>(i), result_id});
  }
  return Status::Ok();
}

}  // namespace

bool AppendFallback(const Vocab& v, std::string_view unit, std::vector<int32_t>* out) {
  bool all_bytes = true;
  for (char c : unit) all_bytes = all_bytes && v.byte_ids[static_cast<uint8_t>(c)] >= 0;
  if (all_bytes) {
    for (char c : unit) out->push_back(v.byte_ids[static_cast<uint8_t>(c)]);
    return false;
  }
  // BuildVocab guarantees an unk id whenever some byte has no token.
  out->push_back(v.unk_id);
  return true;
}

Result<std::shared_ptr<const Vocab>> BuildVocab(const TokenizerSpec& spec) {
  auto v = std::make_shared<Vocab>();
  if (spec.kind != TokenizerSpec::Kind::kSentencePiece &&
      spec.kind != TokenizerSpec::Kind::kBpeMerges) {
    return Status::InvalidArgument(
        StrFormat("tokenizer spec has no usable kind (kind %d)", static_cast<int>(spec.kind)));
  }
  if (spec.byte_level && spec.kind != TokenizerSpec::Kind::kBpeMerges) {
    return Status::Unsupported("tokenizer byte_level is only supported with kind bpe-merges");
  }
  const size_t n = spec.tokens.size();
  if (n == 0) return Status::InvalidArgument("tokenizer has an empty vocabulary");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::InvalidArgument(
        StrFormat("tokenizer vocabulary of %zu tokens exceeds 2^31-1", n));
  }
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return Status::InvalidArgument(
        StrFormat("tokenizer has %zu scores for %zu tokens", spec.scores.size(), n));
  }
  if (!spec.types.empty() && spec.types.size() != n) {
    return Status::InvalidArgument(
        StrFormat("tokenizer has %zu token types for %zu tokens", spec.types.size(), n));
  }
  WEIR_RETURN_IF_ERROR(CheckSpecialId("bos_id", spec.bos_id, n));
  WEIR_RETURN_IF_ERROR(CheckSpecialId("eos_id", spec.eos_id, n));
  WEIR_RETURN_IF_ERROR(CheckSpecialId("unk_id", spec.unk_id, n));
  WEIR_RETURN_IF_ERROR(CheckSpecialId("pad_id", spec.pad_id, n));

  v->kind = spec.kind;
  v->byte_level = spec.byte_level;
  v->add_space_prefix = spec.add_space_prefix;
  v->add_bos = spec.add_bos;
  v->bos_id = spec.bos_id;
  v->eos_id = spec.eos_id;
  v->unk_id = spec.unk_id;
  v->pad_id = spec.pad_id;
  v->pieces = spec.tokens;
  v->scores = spec.scores.empty() ? std::vector<float>(n, 0.0f) : spec.scores;
  v->types = spec.types.empty() ? std::vector<TokenType>(n, TokenType::kNormal) : spec.types;
  v->byte_ids.fill(-1);

  PieceMap all_pieces;
  all_pieces.reserve(n);
  v->matchable.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& piece = v->pieces[id];
    const int type = static_cast<int>(v->types[id]);
    if (type < static_cast<int>(TokenType::kNormal) || type > static_cast<int>(TokenType::kByte)) {
      return Status::InvalidArgument(
          StrFormat("tokenizer token %zu %s has invalid type %d (valid: 1-6)", id,
                    Quote(piece).c_str(), type));
    }
    const TokenType t = v->types[id];
    // "<0xNN>" pieces are byte tokens in SentencePiece-style vocabularies, typed or not.
    const int byte = spec.byte_level ? -1 : ParseByteToken(piece);
    if (t == TokenType::kByte && ParseByteToken(piece) < 0) {
      return Status::InvalidArgument(
          StrFormat("tokenizer token %zu has type byte but piece %s is not of the form <0xNN>", id,
                    Quote(piece).c_str()));
    }
    if (std::isnan(v->scores[id])) {
      return Status::InvalidArgument(
          StrFormat("tokenizer score of token %zu %s is NaN", id, Quote(piece).c_str()));
    }
    if (piece.empty()) continue;
    all_pieces.try_emplace(piece, static_cast<int32_t>(id));
    if (byte >= 0) {
      if (spec.byte_fallback && v->byte_ids[byte] < 0) v->byte_ids[byte] = static_cast<int32_t>(id);
    } else if (t != TokenType::kControl && t != TokenType::kUnknown && t != TokenType::kByte) {
      v->matchable.try_emplace(piece, static_cast<int32_t>(id));
    }
  }

  // What each id prints as.
  v->decoded.resize(n);
  v->starts_with_space.resize(n);
  v->byte_value.assign(n, -1);
  for (size_t id = 0; id < n; ++id) {
    const std::string& piece = v->pieces[id];
    if (v->types[id] == TokenType::kControl) continue;  // prints nothing
    if (spec.byte_level) {
      v->decoded[id] = DecodeByteLevelPiece(piece);
      v->starts_with_space[id] = piece.size() >= 2 && Utf8UnitLength(piece, 0) == 2 &&
                                 CodePointToByte(Utf8Decode(piece, 0, 2)) == ' ';
    } else if (int byte = ParseByteToken(piece); byte >= 0) {
      v->decoded[id] = std::string(1, static_cast<char>(byte));
      v->byte_value[id] = static_cast<int16_t>(byte);
    } else {
      v->decoded[id] = ReplaceSpaceMarkers(piece);
      v->starts_with_space[id] = piece.compare(0, kSpaceMarker.size(), kSpaceMarker) == 0;
    }
  }

  if (spec.byte_level) {
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), &ch);
      v->byte_ids[b] = v->Find(ch);
    }
  }
  if (spec.kind == TokenizerSpec::Kind::kBpeMerges) {
    WEIR_RETURN_IF_ERROR(AddMerges(spec, all_pieces, v.get()));
  }
  if (spec.byte_level) {
    if (spec.has_pre_regexes) {
      WEIR_ASSIGN_OR_RETURN(PreSplitter splitter,
                            PreSplitter::FromRegexes(spec.pre_regexes, "tokenizer.json"));
      v->splitter = std::move(splitter);
    } else {
      WEIR_ASSIGN_OR_RETURN(PreSplitter splitter,
                            PreSplitter::ForName(spec.pre.empty() ? "default" : spec.pre));
      v->splitter = std::move(splitter);
    }
    v->ignore_merges = spec.ignore_merges || v->splitter->ignore_merges();
  }

  std::vector<bool> seen_length;
  for (size_t id = 0; id < n; ++id) {
    const TokenType t = v->types[id];
    const std::string& piece = v->pieces[id];
    if (piece.empty() || (t != TokenType::kControl && t != TokenType::kUnknown &&
                          t != TokenType::kUserDefined)) {
      continue;
    }
    if (!v->specials.try_emplace(piece, static_cast<int32_t>(id)).second) continue;
    if (seen_length.size() <= piece.size()) seen_length.resize(piece.size() + 1);
    if (!seen_length[piece.size()]) {
      seen_length[piece.size()] = true;
      v->special_lengths.push_back(piece.size());
    }
    v->special_first_byte[static_cast<uint8_t>(piece[0])] = true;
  }
  std::sort(v->special_lengths.rbegin(), v->special_lengths.rend());

  int missing = 0, first_missing = -1;
  for (int b = 0; b < 256; ++b) {
    if (v->byte_ids[b] < 0) {
      if (first_missing < 0) first_missing = b;
      ++missing;
    }
  }
  if (v->unk_id < 0 && missing > 0) {
    return Status::InvalidArgument(StrFormat(
        "tokenizer has no unk_id and no token for %d of the 256 byte values (first: 0x%02X%s), "
        "so some text could not be encoded",
        missing, first_missing,
        spec.byte_fallback || spec.byte_level ? "" : "; byte_fallback off"));
  }
  return std::shared_ptr<const Vocab>(std::move(v));
}

}  // namespace weir::tokenizer::internal
