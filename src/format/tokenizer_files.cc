#include "format/tokenizer_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "base/checked_math.h"
#include "base/printable.h"
#include "format/json_util.h"
#include "format/mapped_file.h"

namespace weir::format {

namespace {

constexpr char kSpaceMarker[] = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int32_t kMaxPieceBytes = 1 << 16;
constexpr int kMaxJsonNesting = 16;  // Sequence-in-Sequence depth we follow

int32_t ReadI32(const char* p) {
  uint32_t u = static_cast<uint32_t>(static_cast<uint8_t>(p[0])) |
               static_cast<uint32_t>(static_cast<uint8_t>(p[1])) << 8 |
               static_cast<uint32_t>(static_cast<uint8_t>(p[2])) << 16 |
               static_cast<uint32_t>(static_cast<uint8_t>(p[3])) << 24;
  int32_t v;
  std::memcpy(&v, &u, 4);
  return v;
}

float ReadF32(const char* p) {
  int32_t bits = ReadI32(p);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// "<0x0A>": a byte-fallback piece.
bool IsByteTokenPiece(std::string_view p) {
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  return p.size() == 6 && p.substr(0, 3) == "<0x" && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, from.size(), from) == 0) {
      out.append(to);
      i += from.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// Directory part of a path ("." when there is none).
std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// llama2.c tokenizer.bin

Result<TokenizerSpec> ParseLlama2cTokenizer(std::string_view bytes, int vocab_size,
                                            const std::string& path) {
  const char* p = path.c_str();
  if (vocab_size <= 0 || vocab_size > kMaxVocab) {
    return Status::InvalidArgument(StrFormat("%s: vocab_size %d is outside 1..%lld", p, vocab_size,
                                             static_cast<long long>(kMaxVocab)));
  }
  const uint64_t size = bytes.size();
  if (size < 4) {
    return Status::Corrupt(
        StrFormat("%s: %llu bytes is too short for a llama2.c tokenizer (needs the 4-byte "
                  "max_token_length)",
                  p, static_cast<unsigned long long>(size)));
  }
  int32_t max_len = ReadI32(bytes.data());
  if (max_len <= 0 || max_len > kMaxPieceBytes) {
    return Status::Corrupt(
        StrFormat("%s: max_token_length %d is outside 1..%d", p, max_len, kMaxPieceBytes));
  }
  // Every entry needs at least 8 + 1 bytes; reject impossible vocab sizes before allocating.
  uint64_t min_bytes;
  if (!CheckedMul(static_cast<uint64_t>(vocab_size), 9, &min_bytes) ||
      !CheckedAdd(min_bytes, 4, &min_bytes) || min_bytes > size) {
    return Status::Corrupt(StrFormat(
        "%s: %llu bytes cannot hold %d tokens (at least %llu bytes needed); is it the tokenizer "
        "of this model?",
        p, static_cast<unsigned long long>(size), vocab_size,
        static_cast<unsigned long long>(min_bytes)));
  }

  TokenizerSpec spec;
  spec.kind = TokenizerSpec::Kind::kSentencePiece;
  spec.tokens.reserve(vocab_size);
  spec.scores.reserve(vocab_size);
  spec.types.assign(vocab_size, TokenType::kNormal);
  uint64_t off = 4;
  bool any_byte_token = false;
  for (int i = 0; i < vocab_size; ++i) {
    if (!RangeInside(off, 8, size)) {
      return Status::Corrupt(StrFormat(
          "%s: token %d: header at offset %llu runs past the end of the file (%llu bytes)", p, i,
          static_cast<unsigned long long>(off), static_cast<unsigned long long>(size)));
    }
    float score = ReadF32(bytes.data() + off);
    int32_t len = ReadI32(bytes.data() + off + 4);
    off += 8;
    if (!std::isfinite(score)) {
      return Status::Corrupt(StrFormat("%s: token %d: score is not finite", p, i));
    }
    if (len <= 0 || len > max_len) {
      return Status::Corrupt(
          StrFormat("%s: token %d: length %d is outside 1..%d "
                    "(max_token_length)",
                    p, i, len, max_len));
    }
    if (!RangeInside(off, static_cast<uint64_t>(len), size)) {
      return Status::Corrupt(StrFormat(
          "%s: token %d: %d bytes at offset %llu run past the end of the file (%llu bytes)", p, i,
          len, static_cast<unsigned long long>(off), static_cast<unsigned long long>(size)));
    }
    std::string_view piece = bytes.substr(off, static_cast<size_t>(len));
    off += static_cast<uint64_t>(len);
    if (IsByteTokenPiece(piece)) {
      spec.types[i] = TokenType::kByte;
      any_byte_token = true;
      spec.tokens.emplace_back(piece);
    } else {
      spec.tokens.push_back(ReplaceAll(piece, " ", kSpaceMarker));
    }
    spec.scores.push_back(score);
  }
  if (off != size) {
    return Status::Corrupt(StrFormat(
        "%s: %llu trailing bytes after %d tokens (file is %llu bytes); the tokenizer does not "
        "match the model's vocab_size",
        p, static_cast<unsigned long long>(size - off), vocab_size,
        static_cast<unsigned long long>(size)));
  }

  // llama2.c's fixed special ids.
  if (vocab_size >= 3) {
    spec.unk_id = 0;
    spec.bos_id = 1;
    spec.eos_id = 2;
    spec.types[0] = TokenType::kUnknown;
    spec.types[1] = TokenType::kControl;
    spec.types[2] = TokenType::kControl;
    if (spec.tokens[1] == "\n<s>\n") spec.tokens[1] = "<s>";
    if (spec.tokens[2] == "\n</s>\n") spec.tokens[2] = "</s>";
  }
  spec.add_bos = spec.bos_id >= 0;
  spec.add_space_prefix = true;
  spec.byte_level = false;
  spec.byte_fallback = any_byte_token;
  return spec;
}

Result<TokenizerSpec> LoadLlama2cTokenizer(const std::string& path, int vocab_size) {
  WEIR_ASSIGN_OR_RETURN(std::string bytes, ReadSmallFile(path));
  return ParseLlama2cTokenizer(bytes, vocab_size, path);
}

// ---------------------------------------------------------------------------------------------
// Hugging Face tokenizer.json

namespace {

// What the normalizer / pre-tokenizer / decoder / post-processor say about spaces and BOS.
struct HfPipeline {
  bool prepend_marker = false;     // normalizer Prepend "▁"
  bool replace_space = false;      // normalizer Replace " " -> "▁"
  bool metaspace = false;          // pre_tokenizer Metaspace
  bool metaspace_prefix = false;   // ... with a prepended "▁"
  bool byte_level_pre = false;     // pre_tokenizer ByteLevel
  bool byte_level_prefix = false;  // ... with add_prefix_space
  bool byte_level_decoder = false;
  bool has_template = false;
  bool split_stage = false;          // some stage splits words (Split, Digits, ByteLevel regex)
  std::vector<std::string> regexes;  // those stages as regexes, in order
  std::string bos_piece;  // special token before $A in TemplateProcessing.single
  int64_t bos_template_id = -1;
};

Result<std::string> RequireType(const Json& node, const std::string& where) {
  WEIR_ASSIGN_OR_RETURN(std::optional<std::string> type, GetOptionalString(node, "type", where));
  if (!type) {
    return Status::Corrupt(
        StrFormat("%s: missing 'type' in %s", where.c_str(), JsonPreview(node, 60).c_str()));
  }
  return *type;
}

// Applies `visit` to each element of the array `node[key]` (a "Sequence" node).
template <typename Visit>
Status VisitSequence(const Json& node, const char* key, const std::string& where, int depth,
                     Visit visit) {
  const Json* list = FindField(node, key);
  if (!list || !list->is_array()) {
    return Status::Corrupt(StrFormat("%s: Sequence without a '%s' array", where.c_str(), key));
  }
  for (const Json& child : *list) WEIR_RETURN_IF_ERROR(visit(child, depth + 1));
  return Status::Ok();
}

Status VisitNormalizer(const Json& n, int depth, const std::string& where, HfPipeline* pl) {
  if (depth > kMaxJsonNesting) {
    return Status::Unsupported(StrFormat("%s: normalizers nested too deeply", where.c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(std::string type, RequireType(n, where));
  if (type == "Sequence") {
    return VisitSequence(n, "normalizers", where, depth,
                         [&](const Json& c, int d) { return VisitNormalizer(c, d, where, pl); });
  }
  if (type == "Prepend") {
    WEIR_ASSIGN_OR_RETURN(std::optional<std::string> s, GetOptionalString(n, "prepend", where));
    if (s && *s == kSpaceMarker) {
      pl->prepend_marker = true;
      return Status::Ok();
    }
    return Status::Unsupported(StrFormat("%s: normalizer Prepend %s is not supported (only \"▁\")",
                                         where.c_str(), JsonPreview(n, 60).c_str()));
  }
  if (type == "Replace") {
    const Json* pattern = FindField(n, "pattern");
    WEIR_ASSIGN_OR_RETURN(std::optional<std::string> content,
                          GetOptionalString(n, "content", where));
    const Json* from = pattern ? FindField(*pattern, "String") : nullptr;
    if (from && from->is_string() && from->get<std::string>() == " " && content &&
        *content == kSpaceMarker) {
      pl->replace_space = true;
      return Status::Ok();
    }
    return Status::Unsupported(
        StrFormat("%s: normalizer Replace %s is not supported (only \" \" -> \"▁\")", where.c_str(),
                  JsonPreview(n, 80).c_str()));
  }
  // NFC leaves already-composed text unchanged; weir expects NFC input and does not recompose.
  if (type == "NFC") return Status::Ok();
  return Status::Unsupported(StrFormat("%s: normalizer type '%s' is not supported", where.c_str(),
                                       Printable(type).c_str()));
}

Status VisitPreTokenizer(const Json& n, int depth, const std::string& where, HfPipeline* pl) {
  if (depth > kMaxJsonNesting) {
    return Status::Unsupported(StrFormat("%s: pre_tokenizers nested too deeply", where.c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(std::string type, RequireType(n, where));
  if (type == "Sequence") {
    return VisitSequence(n, "pretokenizers", where, depth,
                         [&](const Json& c, int d) { return VisitPreTokenizer(c, d, where, pl); });
  }
  if (type == "ByteLevel") {
    WEIR_ASSIGN_OR_RETURN(std::optional<bool> prefix,
                          GetOptionalBool(n, "add_prefix_space", where));
    WEIR_ASSIGN_OR_RETURN(std::optional<bool> use_regex, GetOptionalBool(n, "use_regex", where));
    pl->byte_level_pre = true;
    pl->byte_level_prefix = prefix.value_or(true);  // the tokenizers library's default
    if (use_regex.value_or(true)) {
      pl->split_stage = true;
      pl->regexes.emplace_back(kGpt2SplitRegex);
    }
    return Status::Ok();
  }
  if (type == "Metaspace") {
    WEIR_ASSIGN_OR_RETURN(std::optional<std::string> repl,
                          GetOptionalString(n, "replacement", where));
    if (repl && *repl != kSpaceMarker) {
      return Status::Unsupported(
          StrFormat("%s: Metaspace replacement '%s' is not supported "
                    "(only \"▁\")",
                    where.c_str(), Printable(*repl).c_str()));
    }
    pl->metaspace = true;
    WEIR_ASSIGN_OR_RETURN(std::optional<std::string> scheme,
                          GetOptionalString(n, "prepend_scheme", where));
    WEIR_ASSIGN_OR_RETURN(std::optional<bool> prefix,
                          GetOptionalBool(n, "add_prefix_space", where));
    if (scheme) {
      if (*scheme != "always" && *scheme != "first" && *scheme != "never") {
        return Status::Unsupported(StrFormat("%s: Metaspace prepend_scheme '%s' is not supported",
                                             where.c_str(), Printable(*scheme).c_str()));
      }
      pl->metaspace_prefix = *scheme != "never";
    } else {
      pl->metaspace_prefix = prefix.value_or(true);
    }
    return Status::Ok();
  }
  if (type == "Digits") {
    WEIR_ASSIGN_OR_RETURN(std::optional<bool> single,
                          GetOptionalBool(n, "individual_digits", where));
    pl->split_stage = true;
    pl->regexes.push_back(single.value_or(false) ? "\\p{N}" : "\\p{N}+");
    return Status::Ok();
  }
  if (type == "Split") {
    WEIR_ASSIGN_OR_RETURN(std::optional<std::string> behavior,
                          GetOptionalString(n, "behavior", where));
    WEIR_ASSIGN_OR_RETURN(std::optional<bool> invert, GetOptionalBool(n, "invert", where));
    if (behavior.value_or("") != "Isolated" || invert.value_or(false)) {
      return Status::Unsupported(StrFormat(
          "%s: Split %s is not supported (only behavior Isolated, invert false)", where.c_str(),
          JsonPreview(n, 120).c_str()));
    }
    const Json* pattern = FindField(n, "pattern");
    const Json* regex = pattern ? FindField(*pattern, "Regex") : nullptr;
    const Json* literal = pattern ? FindField(*pattern, "String") : nullptr;
    std::string re;
    if (regex && regex->is_string()) {
      re = regex->get<std::string>();
    } else if (literal && literal->is_string()) {
      for (char c : literal->get<std::string>()) {  // the string as a regex matching itself
        if (c != 0 && std::strchr("\\^$.|?*+()[]{}", c)) re.push_back('\\');
        re.push_back(c);
      }
    } else {
      return Status::Corrupt(StrFormat("%s: Split without a Regex or String pattern: %s",
                                       where.c_str(), JsonPreview(n, 120).c_str()));
    }
    pl->split_stage = true;
    pl->regexes.push_back(std::move(re));
    return Status::Ok();
  }
  return Status::Unsupported(StrFormat("%s: pre_tokenizer type '%s' is not supported",
                                       where.c_str(), Printable(type).c_str()));
}

Status VisitDecoder(const Json& n, int depth, const std::string& where, HfPipeline* pl) {
  if (depth > kMaxJsonNesting) {
    return Status::Unsupported(StrFormat("%s: decoders nested too deeply", where.c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(std::string type, RequireType(n, where));
  if (type == "Sequence") {
    return VisitSequence(n, "decoders", where, depth,
                         [&](const Json& c, int d) { return VisitDecoder(c, d, where, pl); });
  }
  if (type == "ByteLevel") pl->byte_level_decoder = true;
  // Other decoders (Replace "▁" -> " ", ByteFallback, Fuse, Strip) follow from the space
  // convention and need no record.
  return Status::Ok();
}

Status VisitPostProcessor(const Json& n, int depth, const std::string& where, HfPipeline* pl) {
  if (depth > kMaxJsonNesting) {
    return Status::Unsupported(StrFormat("%s: post_processors nested too deeply", where.c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(std::string type, RequireType(n, where));
  if (type == "Sequence") {
    return VisitSequence(n, "processors", where, depth,
                         [&](const Json& c, int d) { return VisitPostProcessor(c, d, where, pl); });
  }
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  if (type != "TemplateProcessing") {
    return Status::Unsupported(StrFormat("%s: post_processor type '%s' is not supported",
                                         where.c_str(), Printable(type).c_str()));
  }
  pl->has_template = true;
  const Json* single = FindField(n, "single");
  if (!single || !single->is_array()) {
    return Status::Corrupt(
        StrFormat("%s: TemplateProcessing without a 'single' array", where.c_str()));
  }
  for (const Json& item : *single) {
    if (FindField(item, "Sequence")) break;  // only specials before $A are a BOS
    const Json* special = FindField(item, "SpecialToken");
    if (!special) continue;
    WEIR_ASSIGN_OR_RETURN(std::optional<std::string> id, GetOptionalString(*special, "id", where));
    if (!id) {
      return Status::Corrupt(StrFormat("%s: TemplateProcessing SpecialToken without an id: %s",
                                       where.c_str(), JsonPreview(item, 80).c_str()));
    }
    pl->bos_piece = *id;
    // special_tokens maps the name to its ids.
    const Json* specials = FindField(n, "special_tokens");
    const Json* entry = specials ? FindField(*specials, id->c_str()) : nullptr;
    const Json* ids = entry ? FindField(*entry, "ids") : nullptr;
    if (ids && ids->is_array() && ids->size() == 1) {
      int64_t v;
      if (!JsonToInt64((*ids)[0], &v)) {
        return Status::Corrupt(StrFormat("%s: special_tokens['%s'].ids is not an integer list",
                                         where.c_str(), Printable(*id).c_str()));
      }
      pl->bos_template_id = v;
    }
    break;
  }
  return Status::Ok();
}

// A token named in tokenizer_config.json: a string, or an object with "content".
Result<std::optional<std::string>> ConfigTokenName(const Json& cfg, const char* key,
                                                   const std::string& where) {
  const Json* v = FindField(cfg, key);
  if (!v) return std::optional<std::string>();
  if (v->is_string()) return std::optional<std::string>(v->get<std::string>());
  if (v->is_object()) {
    WEIR_ASSIGN_OR_RETURN(std::optional<std::string> content,
                          GetOptionalString(*v, "content", where + ": " + key));
    if (content) return content;
  }
  return Status::InvalidArgument(
      StrFormat("%s: field '%s' must be a token string or "
                "{\"content\": ...}, got %s",
                where.c_str(), key, JsonPreview(*v).c_str()));
}

}  // namespace

Result<TokenizerSpec> ParseHfTokenizerJson(std::string_view tokenizer_json, const std::string& path,
                                           std::string_view tokenizer_config_json,
                                           const std::string& config_path) {
  const char* p = path.c_str();
  WEIR_ASSIGN_OR_RETURN(Json j, ParseJsonText(tokenizer_json, path));
  if (!j.is_object()) {
    return Status::Corrupt(
        StrFormat("%s: top level must be a JSON object, got %s", p, JsonTypeName(j)));
  }
  const Json* model = FindField(j, "model");
  if (!model || !model->is_object()) {
    return Status::Corrupt(StrFormat("%s: missing the 'model' object", p));
  }
  const std::string mwhere = path + ": model";
  WEIR_ASSIGN_OR_RETURN(std::optional<std::string> type, GetOptionalString(*model, "type", mwhere));
  if (type && *type != "BPE") {
    return Status::Unsupported(StrFormat(
        "%s: tokenizer model type '%s' is not supported (only BPE)", p, Printable(*type).c_str()));
  }
  if (!type && !FindField(*model, "merges")) {
    return Status::Unsupported(
        StrFormat("%s: model has no 'type' and no 'merges'; only BPE is supported", p));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    WEIR_ASSIGN_OR_RETURN(std::optional<std::string> s, GetOptionalString(*model, key, mwhere));
    if (s && !s->empty()) {
      return Status::Unsupported(
          StrFormat("%s: BPE %s '%s' is not supported", p, key, Printable(*s).c_str()));
    }
  }

  // --- id -> piece from model.vocab and added_tokens.
  const Json* vocab = FindField(*model, "vocab");
  if (!vocab || !vocab->is_object()) {
    return Status::Corrupt(StrFormat("%s: model.vocab must be an object {piece: id}", p));
  }
  const Json* added = FindField(j, "added_tokens");
  if (added && !added->is_array()) {
    return Status::Corrupt(StrFormat("%s: added_tokens must be an array", p));
  }
  const uint64_t n_entries = vocab->size() + (added ? added->size() : 0);
  if (n_entries == 0) return Status::Corrupt(StrFormat("%s: the vocabulary is empty", p));
  std::vector<std::string> tokens;
  std::vector<uint8_t> filled;
  std::vector<uint8_t> is_added, is_special;
  auto place = [&](int64_t id, const std::string& piece, const char* what) -> Status {
    if (id < 0 || id >= kMaxVocab || static_cast<uint64_t>(id) >= n_entries) {
      return Status::Corrupt(
          StrFormat("%s: %s '%s' has id %lld outside 0..%llu (ids must be dense over %llu entries)",
                    p, what, Printable(piece).c_str(), static_cast<long long>(id),
                    static_cast<unsigned long long>(n_entries - 1),
                    static_cast<unsigned long long>(n_entries)));
    }
    size_t i = static_cast<size_t>(id);
    if (i >= tokens.size()) {
      tokens.resize(i + 1);
      filled.resize(i + 1, 0);
      is_added.resize(i + 1, 0);
      is_special.resize(i + 1, 0);
    }
    if (filled[i] && tokens[i] != piece) {
      return Status::Corrupt(StrFormat("%s: id %lld is given to both '%s' and '%s'", p,
                                       static_cast<long long>(id), Printable(tokens[i]).c_str(),
                                       Printable(piece).c_str()));
    }
    tokens[i] = piece;
    filled[i] = 1;
    return Status::Ok();
  };
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    int64_t id;
    if (!JsonToInt64(it.value(), &id)) {
      return Status::Corrupt(StrFormat("%s: model.vocab['%s'] must be an integer id, got %s", p,
                                       Printable(it.key()).c_str(),
                                       JsonPreview(it.value()).c_str()));
    }
    WEIR_RETURN_IF_ERROR(place(id, it.key(), "vocab piece"));
  }
  if (added) {
    for (const Json& a : *added) {
      const std::string awhere = path + ": added_tokens";
      WEIR_ASSIGN_OR_RETURN(std::optional<int64_t> id, GetOptionalInt(a, "id", awhere));
      WEIR_ASSIGN_OR_RETURN(std::optional<std::string> content,
                            GetOptionalString(a, "content", awhere));
      WEIR_ASSIGN_OR_RETURN(std::optional<bool> special, GetOptionalBool(a, "special", awhere));
      if (!id || !content) {
        return Status::Corrupt(
            StrFormat("%s: added token without id or content: %s", p, JsonPreview(a, 80).c_str()));
      }
      WEIR_RETURN_IF_ERROR(place(*id, *content, "added token"));
      is_added[static_cast<size_t>(*id)] = 1;
      if (special.value_or(false)) is_special[static_cast<size_t>(*id)] = 1;
    }
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!filled[i]) {
      return Status::Corrupt(
          StrFormat("%s: no token has id %zu (ids must be dense 0..%zu)", p, i, tokens.size() - 1));
    }
  }
  std::unordered_map<std::string, int32_t> id_of;
  id_of.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) id_of.emplace(tokens[i], static_cast<int32_t>(i));
  auto lookup = [&](const std::string& piece) -> int32_t {
    auto it = id_of.find(piece);
    return it == id_of.end() ? -1 : it->second;
  };

  TokenizerSpec spec;
  spec.kind = TokenizerSpec::Kind::kBpeMerges;

  // --- merges, "left right" in rank order.
  if (const Json* merges = FindField(*model, "merges")) {
    if (!merges->is_array()) {
      return Status::Corrupt(StrFormat("%s: model.merges must be an array", p));
    }
    spec.merges.reserve(merges->size());
    size_t rank = 0;
    for (const Json& m : *merges) {
      std::string left, right;
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return Status::Corrupt(
              StrFormat("%s: merge #%zu '%s' is not two pieces separated by "
                        "one space",
                        p, rank, Printable(s).c_str()));
        }
        left = s.substr(0, sp);
        right = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
        if (left.find(' ') != std::string::npos || right.find(' ') != std::string::npos) {
          return Status::Unsupported(
              StrFormat("%s: merge #%zu %s has a space inside a piece (weir stores merges as "
                        "\"left right\")",
                        p, rank, JsonPreview(m, 60).c_str()));
        }
      } else {
        return Status::Corrupt(
            StrFormat("%s: merge #%zu must be \"a b\" or [\"a\", \"b\"], "
                      "got %s",
                      p, rank, JsonPreview(m, 60).c_str()));
      }
      for (const std::string* piece : {&left, &right}) {
        if (piece->empty() || lookup(*piece) < 0) {
          return Status::Corrupt(
              StrFormat("%s: merge #%zu '%s %s': piece '%s' is not in the "
                        "vocabulary",
                        p, rank, Printable(left).c_str(), Printable(right).c_str(),
                        Printable(*piece).c_str()));
        }
      }
      if (lookup(left + right) < 0) {
        return Status::Corrupt(
            StrFormat("%s: merge #%zu '%s %s': the merged piece '%s' is not "
                      "in the vocabulary",
                      p, rank, Printable(left).c_str(), Printable(right).c_str(),
                      Printable(left + right).c_str()));
      }
      spec.merges.push_back(left + " " + right);
      ++rank;
    }
  }

  WEIR_ASSIGN_OR_RETURN(std::optional<std::string> unk,
                        GetOptionalString(*model, "unk_token", mwhere));
  if (unk) {
    spec.unk_id = lookup(*unk);
    if (spec.unk_id < 0) {
      return Status::Corrupt(StrFormat("%s: model.unk_token '%s' is not in the vocabulary", p,
                                       Printable(*unk).c_str()));
    }
  }
  WEIR_ASSIGN_OR_RETURN(std::optional<bool> byte_fallback,
                        GetOptionalBool(*model, "byte_fallback", mwhere));
  spec.byte_fallback = byte_fallback.value_or(false);

  // --- the pipeline around the model.
  HfPipeline pl;
  if (const Json* n = FindField(j, "normalizer")) {
    WEIR_RETURN_IF_ERROR(VisitNormalizer(*n, 0, path + ": normalizer", &pl));
  }
  if (const Json* n = FindField(j, "pre_tokenizer")) {
    WEIR_RETURN_IF_ERROR(VisitPreTokenizer(*n, 0, path + ": pre_tokenizer", &pl));
  }
  if (const Json* n = FindField(j, "decoder")) {
    WEIR_RETURN_IF_ERROR(VisitDecoder(*n, 0, path + ": decoder", &pl));
  }
  if (const Json* n = FindField(j, "post_processor")) {
    WEIR_RETURN_IF_ERROR(VisitPostProcessor(*n, 0, path + ": post_processor", &pl));
  }
  const bool marker_style = pl.replace_space || pl.metaspace;
  spec.byte_level = pl.byte_level_pre || pl.byte_level_decoder;
  if (spec.byte_level && marker_style) {
    return Status::Unsupported(StrFormat(
        "%s: mixes a ByteLevel stage with the \"▁\" space marker; weir supports one or the other",
        p));
  }
  if (pl.prepend_marker && !pl.replace_space && !pl.metaspace) {
    return Status::Unsupported(
        StrFormat("%s: normalizer prepends \"▁\" but does not replace spaces with it", p));
  }
  spec.add_space_prefix =
      spec.byte_level ? pl.byte_level_prefix : (pl.prepend_marker || pl.metaspace_prefix);
  if (spec.byte_level) {
    spec.has_pre_regexes = true;
    spec.pre_regexes = std::move(pl.regexes);
  } else if (pl.split_stage) {
    return Status::Unsupported(
        StrFormat("%s: a Split or Digits pre-tokenizer without ByteLevel is not supported", p));
  }
  WEIR_ASSIGN_OR_RETURN(std::optional<bool> ignore_merges,
                        GetOptionalBool(*model, "ignore_merges", mwhere));
  spec.ignore_merges = ignore_merges.value_or(false);
  if (!pl.bos_piece.empty()) {
    int32_t id = pl.bos_template_id >= 0
                     ? static_cast<int32_t>(std::min<int64_t>(pl.bos_template_id, kMaxVocab))
                     : lookup(pl.bos_piece);
    if (id < 0 || static_cast<size_t>(id) >= tokens.size() || tokens[id] != pl.bos_piece) {
      return Status::Corrupt(
          StrFormat("%s: post_processor BOS '%s' (id %d) does not match the "
                    "vocabulary",
                    p, pl.bos_piece.c_str(), id));
    }
    spec.bos_id = id;
  }
  spec.add_bos = spec.bos_id >= 0;

  // --- tokenizer_config.json: named special tokens and add_bos_token.
  if (!tokenizer_config_json.empty()) {
    const std::string cpath = config_path.empty() ? "tokenizer_config.json" : config_path;
    WEIR_ASSIGN_OR_RETURN(Json cfg, ParseJsonText(tokenizer_config_json, cpath));
    if (!cfg.is_object()) {
      return Status::Corrupt(StrFormat("%s: top level must be a JSON object", cpath.c_str()));
    }
    struct Named {
      const char* key;
      int32_t* id;
    } named[] = {{"bos_token", &spec.bos_id},
                 {"eos_token", &spec.eos_id},
                 {"unk_token", &spec.unk_id},
                 {"pad_token", &spec.pad_id}};
    for (const Named& n : named) {
      WEIR_ASSIGN_OR_RETURN(std::optional<std::string> name, ConfigTokenName(cfg, n.key, cpath));
      if (!name) continue;
      int32_t id = lookup(*name);
      if (id < 0) {
        return Status::Corrupt(StrFormat("%s: %s '%s' is not in the vocabulary of %s",
                                         cpath.c_str(), n.key, Printable(*name).c_str(), p));
      }
      *n.id = id;
    }
    WEIR_ASSIGN_OR_RETURN(std::optional<bool> add_bos,
                          GetOptionalBool(cfg, "add_bos_token", cpath));
    if (add_bos) spec.add_bos = *add_bos;
    if (spec.add_bos && spec.bos_id < 0) {
      return Status::Corrupt(
          StrFormat("%s: add_bos_token is true but no bos_token is named", cpath.c_str()));
    }
  }

  // --- token types.
  spec.types.assign(tokens.size(), TokenType::kNormal);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (is_added[i]) {
      spec.types[i] = is_special[i] ? TokenType::kControl : TokenType::kUserDefined;
    } else if (spec.byte_fallback && IsByteTokenPiece(tokens[i])) {
      spec.types[i] = TokenType::kByte;
    }
  }
  if (spec.unk_id >= 0) spec.types[spec.unk_id] = TokenType::kUnknown;
  spec.tokens = std::move(tokens);
  return spec;
}

Result<TokenizerSpec> LoadHfTokenizerJson(const std::string& path) {
  WEIR_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path));
  std::string config_path = DirName(path) + "/tokenizer_config.json";
  std::string config_text;
  struct stat st;
  if (::stat(config_path.c_str(), &st) == 0) {
    WEIR_ASSIGN_OR_RETURN(config_text, ReadSmallFile(config_path, 16ull << 20));
    if (config_text.empty()) {
      return Status::Corrupt(StrFormat("%s: empty file", config_path.c_str()));
    }
  }
  return ParseHfTokenizerJson(text, path, config_text, config_path);
}

}  // namespace weir::format
