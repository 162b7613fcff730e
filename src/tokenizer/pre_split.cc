#include "tokenizer/pre_split.h"

#include "format/tokenizer_spec.h"

namespace weir::tokenizer {
namespace {

// The patterns as their models' tokenizer.json files state them.
constexpr std::string_view kGpt2 = format::kGpt2SplitRegex;
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek's letter class is a list of ranges in the model's own definition (it is the cased
// letters of some Unicode version), kept as the model states it.
constexpr std::string_view kDeepseekLetters =
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-"
    "\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1"
    "\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd"
    "\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d"
    "\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-"
    "\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d"
    "\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4"
    "\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+";
constexpr std::string_view kDeepseekPunct =
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+";
constexpr std::string_view kCjk = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";

struct Entry {
  std::string_view name;
  std::vector<std::string_view> regexes;
  bool ignore_merges = false;
};

std::vector<Entry> Registry() {
  return {
      {"default", {kGpt2}},
      {"gpt2", {kGpt2}},
      {"gpt-2", {kGpt2}},
      {"phi-2", {kGpt2}},
      {"smollm", {R"(\p{N})", kGpt2}},
      {"starcoder", {R"(\p{N})", kGpt2}},
      {"llama-bpe", {kLlama3}, true},
      {"llama3", {kLlama3}, true},
      {"qwen2", {kQwen2}},
      {"deepseek-llm",
       {R"([\r\n])", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kCjk, R"(\p{N}+)"}},
      {"deepseek-coder", {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}},
  };
}

}  // namespace

std::string PreSplitter::KnownNames() {
  std::string out;
  for (const Entry& e : Registry()) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

std::vector<std::string> PreSplitter::RegexesOf(std::string_view name) {
  for (const Entry& e : Registry()) {
    if (e.name == name) return {e.regexes.begin(), e.regexes.end()};
  }
  return {};
}

Result<PreSplitter> PreSplitter::ForName(std::string_view name) {
  for (const Entry& e : Registry()) {
    if (e.name != name) continue;
    WEIR_ASSIGN_OR_RETURN(PreSplitter s,
                          FromRegexes({e.regexes.begin(), e.regexes.end()}, std::string(name)));
    s.ignore_merges_ = e.ignore_merges;
    return s;
  }
  return Status::Unsupported(StrFormat(
      "tokenizer.ggml.pre '%.*s' is not a pre-tokenizer weir knows (known: %s); tokenizing with "
      "another one's rules would give wrong tokens",
      static_cast<int>(name.size()), name.data(), KnownNames().c_str()));
}

Result<PreSplitter> PreSplitter::FromRegexes(const std::vector<std::string>& regexes,
                                             std::string name) {
  PreSplitter s;
  s.name_ = std::move(name);
  for (const std::string& r : regexes) {
    auto compiled = PreRegex::Compile(r);
    if (!compiled.ok()) {
      return Status::InvalidArgument(StrFormat("pre-tokenizer '%s': %s", s.name_.c_str(),
                                               compiled.status().message().c_str()));
    }
    s.stages_.push_back(std::move(*compiled));
  }
  return s;
}

std::vector<std::string_view> PreSplitter::Split(std::string_view text) const {
  std::vector<std::string_view> words;
  if (text.empty()) return words;
  const CodePoints cp = DecodeForMatch(text);
  // Pieces as [begin, end) code point ranges.
  std::vector<std::pair<size_t, size_t>> pieces{{0, cp.size()}}, next;
  for (const PreRegex& re : stages_) {
    next.clear();
    for (auto [begin, end] : pieces) {
      size_t gap = begin;
      for (size_t pos = begin; pos < end;) {
        size_t len = re.MatchAt(cp, begin, end, pos);
        if (len == 0) {
          ++pos;
          continue;
        }
        if (gap < pos) next.push_back({gap, pos});
        next.push_back({pos, pos + len});
        pos += len;
        gap = pos;
      }
      if (gap < end) next.push_back({gap, end});
    }
    pieces.swap(next);
  }
  words.reserve(pieces.size());
  for (auto [begin, end] : pieces) {
    words.push_back(text.substr(cp.offsets[begin], cp.offsets[end] - cp.offsets[begin]));
  }
  return words;
}

}  // namespace weir::tokenizer
