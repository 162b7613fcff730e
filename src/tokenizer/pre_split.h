// PreSplitter: the pre-tokenizer of a byte-level BPE vocabulary, which cuts text into words before
// the merges run (merges never cross a word boundary). A registry maps the GGUF
// `tokenizer.ggml.pre` names to their split rules; a name weir does not know is an error (never a
// fallback: a wrong split tokenizes silently wrong). Hugging Face tokenizer.json files state their
// rules directly (Split / Digits / ByteLevel pre-tokenizers), which FromRegexes takes.
//
// A rule list is applied like tokenizers' Sequence of Split(behavior = Isolated) stages and like
// llama.cpp's unicode_regex_split: each regex in turn cuts every current piece into its matches
// and the gaps between them, all kept. The registry (pre_split.cc has the patterns):
//   default, gpt2, gpt-2, phi-2   GPT-2's pattern
//   smollm, starcoder             every digit alone (\p{N}), then GPT-2's pattern
//   llama-bpe, llama3             Llama 3's pattern (digit runs of at most 3; ignore_merges)
//   qwen2                         Llama 3's pattern with single digits
//   deepseek-llm                  DeepSeek LLM's six stages
//   deepseek-coder                DeepSeek Coder's five stages
//
// Thread safety: immutable after creation; Split is const and reentrant.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/pre_regex.h"

namespace weir::tokenizer {

class PreSplitter {
 public:
  // The registry entry `name`; InvalidArgument naming it and the known names otherwise.
  static Result<PreSplitter> ForName(std::string_view name);
  // A splitter from explicit regexes (tokenizer.json). `name` is only for messages.
  static Result<PreSplitter> FromRegexes(const std::vector<std::string>& regexes, std::string name);
  // The known names, comma-separated, for messages and --help.
  static std::string KnownNames();
  // The regexes of a registry entry (empty when unknown): what the oracle tests print.
  static std::vector<std::string> RegexesOf(std::string_view name);

  // Words covering `text` exactly, in order, none empty.
  std::vector<std::string_view> Split(std::string_view text) const;

  const std::string& name() const { return name_; }
  // Whether a word that is itself a vocabulary piece is taken whole, before any merge
  // (tokenizers' ignore_merges; Llama 3).
  bool ignore_merges() const { return ignore_merges_; }

 private:
  std::string name_;
  std::vector<PreRegex> stages_;
  bool ignore_merges_ = false;
};

}  // namespace weir::tokenizer
