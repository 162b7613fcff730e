// TokenizerSpec: a tokenizer's vocabulary and rules as read from a file (GGUF tokenizer.ggml.*
// metadata, llama2.c tokenizer.bin, Hugging Face tokenizer.json). The tokenizer module builds a
// working tokenizer from it; readers only fill it in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weir::format {

// GGUF token types.
enum class TokenType : int32_t {
  kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6
};

// GPT-2's pre-tokenizer pattern (what a tokenizers ByteLevel stage with use_regex splits by).
inline constexpr std::string_view kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct TokenizerSpec {
  enum class Kind {
    kNone,           // the file has no tokenizer
    kSentencePiece,  // score-driven BPE over a "▁"-marked text, byte fallback (<0xNN>)
    kBpeMerges,      // rank-driven BPE from a merge list (tokenizer.json / GGUF "gpt2")
  };
  Kind kind = Kind::kNone;
  std::vector<std::string> tokens;   // id -> piece (UTF-8; "▁" marks a space)
  std::vector<float> scores;         // id -> score (SentencePiece); empty if none
  std::vector<TokenType> types;      // id -> type; empty means all normal
  std::vector<std::string> merges;   // "left right", highest priority first (kBpeMerges)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = true;
  bool add_space_prefix = true;  // prepend "▁" to the text before tokenizing
  bool byte_level = false;       // GPT-2 byte-to-unicode mapping (kBpeMerges only)
  bool byte_fallback = true;     // unknown bytes become <0xNN> when those tokens exist
  // Byte-level pre-tokenizer: the GGUF tokenizer.ggml.pre name (tokenizer/pre_split.h has the
  // registry; "" = not stated, read as "default"), unless the file states its split regexes
  // itself (tokenizer.json: has_pre_regexes, pre_regexes applied in order, possibly none).
  std::string pre;
  bool has_pre_regexes = false;
  std::vector<std::string> pre_regexes;
  bool ignore_merges = false;  // tokenizer.json model.ignore_merges (Llama 3)
  // The Jinja chat template the file carries (GGUF tokenizer.chat_template); "" = none.
  std::string chat_template;
};

}  // namespace weir::format
