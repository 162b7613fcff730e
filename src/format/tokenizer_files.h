// Readers for the tokenizer files that sit beside a model: llama2.c's tokenizer.bin / tok512.bin
// and Hugging Face's tokenizer.json (+ tokenizer_config.json). Both produce a TokenizerSpec; the
// tokenizer module turns that into a working tokenizer.
//
// llama2.c tokenizer file (all little-endian):
//   i32 max_token_length                      longest piece in bytes
//   vocab_size times:
//     f32 score                               SentencePiece merge score (higher merges first)
//     i32 len                                 0 < len <= max_token_length
//     u8  piece[len]                          UTF-8 bytes, no terminator
// The vocabulary size is not stored: it is the model header's vocab_size, so the file must end
// exactly after the last entry (trailing bytes mean the tokenizer belongs to another model).
// Conventions of llama2.c's export script, undone here so that every tokenizer source looks the
// same to the SentencePiece tokenizer:
//   - the SentencePiece space marker "▁" (U+2581) was written as a plain space; every ' ' in a
//     piece is turned back into "▁";
//   - id 0 is <unk>, id 1 is BOS "\n<s>\n" and id 2 is EOS "\n</s>\n"; ids 1 and 2 are renamed
//     "<s>" / "</s>" and typed kControl, id 0 kUnknown;
//   - pieces "<0xNN>" are byte-fallback tokens (type kByte).
// add_space_prefix is true (SentencePiece's dummy prefix, as llama2.c's encoder does).
//
// tokenizer.json (Hugging Face `tokenizers`): only model.type "BPE" is supported; the result is
// kind kBpeMerges with merges in rank order. The space convention is read from the file:
//   - SentencePiece style: normalizer Replace " " -> "▁" (usually with Prepend "▁", which sets
//     add_space_prefix) or a Metaspace pre-tokenizer; byte_level = false;
//   - byte-level (GPT-2) style: a ByteLevel pre-tokenizer or decoder; byte_level = true and
//     add_space_prefix = the ByteLevel add_prefix_space flag. The word-splitting stages become
//     TokenizerSpec::pre_regexes in order: Split (behavior Isolated, not inverted; a String
//     pattern is escaped into a regex), Digits (\p{N} or \p{N}+), ByteLevel with use_regex
//     (GPT-2's pattern); other Split behaviours are refused. model.ignore_merges is kept.
// BOS comes from post_processor TemplateProcessing (the special token before $A); a
// tokenizer_config.json beside the file may name bos/eos/unk/pad tokens and add_bos_token, which
// then take precedence (this is what transformers' LlamaTokenizerFast does).
//
// Thread safety: free functions.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "format/tokenizer_spec.h"

namespace weir::format {

// Reads a llama2.c tokenizer with exactly `vocab_size` entries.
Result<TokenizerSpec> LoadLlama2cTokenizer(const std::string& path, int vocab_size);
// Same, from the file's bytes; `path` is only used in messages.
Result<TokenizerSpec> ParseLlama2cTokenizer(std::string_view bytes, int vocab_size,
                                            const std::string& path);

// Reads tokenizer.json and, when present beside it, tokenizer_config.json.
Result<TokenizerSpec> LoadHfTokenizerJson(const std::string& path);
// Same, from text; `tokenizer_config_json` may be empty (no tokenizer_config.json). The paths are
// only used in messages.
Result<TokenizerSpec> ParseHfTokenizerJson(std::string_view tokenizer_json, const std::string& path,
                                           std::string_view tokenizer_config_json = {},
                                           const std::string& config_path = {});

}  // namespace weir::format
