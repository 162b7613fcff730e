// The body shared by the tokenizer encode/decode fuzz targets (tokenizer_spm, tokenizer_bpe,
// tokenizer_bytelevel): one fixed vocabulary per tokenizer type, built once, and one input
// handler that encodes the input's bytes and decodes them back, then decodes the input read as
// token ids (in range or not). Invariants checked on every input, aborting when broken:
//   - every id Encode returns is inside the vocabulary;
//   - a lossless vocabulary (SentencePiece with byte fallback, byte-level BPE) decodes back to
//     the text (SentencePiece: with its "▁" marks read as spaces).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "format/tokenizer_spec.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace weir::fuzz {

using format::TokenizerSpec;
using format::TokenType;

inline const std::string kMark = "\xE2\x96\x81";  // "▁"

inline void AddPiece(TokenizerSpec* s, const std::string& piece, float score, TokenType t) {
  s->tokens.push_back(piece);
  s->scores.push_back(score);
  s->types.push_back(t);
}

// Pieces of a small English-ish vocabulary (with marks, accents, a CJK character, an emoji).
inline std::vector<std::string> CommonPieces() {
  std::vector<std::string> p;
  for (char c = 'a'; c <= 'z'; ++c) p.push_back(std::string(1, c));
  for (const char* s : {"th", "he", "in", "er", "an", "the", "ing", "and", "\xc3\xa9",
                        "\xe6\x97\xa5", "\xf0\x9f\x99\x82", "'s", "0", "1", "2", ".", ",", "\n"}) {
    p.push_back(s);
  }
  return p;
}

// SentencePiece: <unk> <s> </s>, <0x00>..<0xFF> (when with_bytes), pieces with and without "▁".
inline TokenizerSpec SpmSpec(bool with_bytes) {
  TokenizerSpec s;
  s.kind = TokenizerSpec::Kind::kSentencePiece;
  AddPiece(&s, "<unk>", 0, TokenType::kUnknown);
  AddPiece(&s, "<s>", 0, TokenType::kControl);
  AddPiece(&s, "</s>", 0, TokenType::kControl);
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      AddPiece(&s, buf, 0, TokenType::kByte);
    }
  }
  AddPiece(&s, kMark, -1, TokenType::kNormal);
  AddPiece(&s, kMark + kMark, -3, TokenType::kNormal);
  float score = -2;
  for (const std::string& p : CommonPieces()) {
    AddPiece(&s, p, score, TokenType::kNormal);
    AddPiece(&s, kMark + p, score + 0.5f, TokenType::kNormal);
    score -= 0.25f;
  }
  s.unk_id = 0;
  s.bos_id = 1;
  s.eos_id = 2;
  return s;
}

// Rank-ordered merges over `alphabet`: every pair of alphabet symbols that CommonPieces() joins,
// left to right, so that merges build on earlier merges and on each other.
inline void AddMergesFor(TokenizerSpec* s, const std::vector<std::string>& words) {
  for (const std::string& w : words) {
    std::string acc;
    std::vector<std::string> units;
    for (size_t i = 0; i < w.size();) {
      size_t n = 1;
      unsigned char c = static_cast<unsigned char>(w[i]);
      if (c >= 0xf0)
        n = 4;
      else if (c >= 0xe0)
        n = 3;
      else if (c >= 0xc0)
        n = 2;
      units.push_back(w.substr(i, n));
      i += n;
    }
    if (units.size() < 2) continue;
    acc = units[0];
    for (size_t i = 1; i < units.size(); ++i) {
      std::string merge = acc + " " + units[i];
      bool seen = false;
      for (const std::string& m : s->merges) seen |= m == merge;
      if (!seen) s->merges.push_back(merge);
      acc += units[i];
      bool have = false;
      for (const std::string& t : s->tokens) have |= t == acc;
      if (!have) {
        s->tokens.push_back(acc);
        s->types.push_back(TokenType::kNormal);
      }
    }
  }
}

// Merge-list BPE in SentencePiece style ("▁" for spaces, <0xNN> fallback, <unk>).
inline TokenizerSpec BpeSpec() {
  TokenizerSpec s;
  s.kind = TokenizerSpec::Kind::kBpeMerges;
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  s.unk_id = 0;
  s.bos_id = 1;
  s.eos_id = 2;
  std::vector<std::string> words;
  for (const std::string& p : CommonPieces()) {
    words.push_back(p);
    words.push_back(kMark + p);
  }
  for (const std::string& w : words) {
    for (size_t i = 0; i < w.size();) {
      size_t n = 1;
      unsigned char c = static_cast<unsigned char>(w[i]);
      if (c >= 0xf0)
        n = 4;
      else if (c >= 0xe0)
        n = 3;
      else if (c >= 0xc0)
        n = 2;
      std::string u = w.substr(i, n);
      bool have = false;
      for (const std::string& t : s.tokens) have |= t == u;
      if (!have) {
        s.tokens.push_back(u);
        s.types.push_back(TokenType::kNormal);
      }
      i += n;
    }
  }
  AddMergesFor(&s, words);
  return s;
}

// GPT-2 byte-level BPE: the 256 mapped byte characters, merges over mapped common words, and an
// <|endoftext|> control token.
inline TokenizerSpec ByteLevelSpec() {
  TokenizerSpec s;
  s.kind = TokenizerSpec::Kind::kBpeMerges;
  s.byte_level = true;
  s.add_space_prefix = false;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    tokenizer::AppendUtf8(tokenizer::ByteToCodePoint(static_cast<uint8_t>(b)), &c);
    s.tokens.push_back(c);
    s.types.push_back(TokenType::kNormal);
  }
  std::vector<std::string> words;
  for (const std::string& p : CommonPieces()) {
    for (std::string w : {p, " " + p}) {
      std::string mapped;
      for (char c : w) {
        tokenizer::AppendUtf8(tokenizer::ByteToCodePoint(static_cast<uint8_t>(c)), &mapped);
      }
      words.push_back(mapped);
    }
  }
  AddMergesFor(&s, words);
  s.tokens.push_back("<|endoftext|>");
  s.types.push_back(TokenType::kControl);
  s.eos_id = static_cast<int32_t>(s.tokens.size()) - 1;
  s.bos_id = s.eos_id;
  s.add_bos = false;
  return s;
}

inline std::string SpacesForMarks(std::string_view text) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    if (text.substr(pos, kMark.size()) == kMark) {
      out += ' ';
      pos += kMark.size();
    } else {
      out += text[pos++];
    }
  }
  return out;
}

inline const tokenizer::Tokenizer& MustCreate(const TokenizerSpec& spec) {
  auto t = tokenizer::Tokenizer::Create(spec);
  if (!t.ok()) {
    std::fprintf(stderr, "fuzz vocabulary rejected: %s\n", t.status().ToString().c_str());
    std::abort();
  }
  return *new tokenizer::Tokenizer(std::move(t).value());  // lives as long as the process
}

enum class Lossless { kNo, kMarksAsSpaces, kExact };

inline void EncodeDecodeOne(const tokenizer::Tokenizer& t, Lossless lossless, const uint8_t* data,
                            size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<int32_t> ids = t.Encode(text, /*add_bos=*/true);
  for (int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size()) {
      std::fprintf(stderr, "Encode returned id %d outside [0, %d)\n", id, t.vocab_size());
      std::abort();
    }
  }
  std::string back = t.DecodeAll(ids);
  if (lossless != Lossless::kNo) {
    std::string want = lossless == Lossless::kExact ? std::string(text) : SpacesForMarks(text);
    if (back != want) {
      std::fprintf(stderr, "decode(encode(text)) differs from the text: %zu vs %zu bytes\n",
                   back.size(), want.size());
      std::abort();
    }
  }
  // The input read as 16-bit token ids, in range or not.
  int32_t prev = -1;
  size_t n = 0;
  for (size_t i = 0; i + 1 < size; i += 2) {
    int32_t id = static_cast<int16_t>(data[i] | (data[i + 1] << 8));
    n += t.Decode(prev, id).size() + t.piece(id).size();
    prev = id;
  }
  static volatile size_t sink;
  sink = sink + n;
}

}  // namespace weir::fuzz
