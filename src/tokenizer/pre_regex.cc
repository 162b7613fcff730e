#include "tokenizer/pre_regex.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace weir::tokenizer {

// A class of characters: ranges and categories, possibly negated.
struct CharSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint16_t categories = 0;      // bit c: MajorCategory c
  uint16_t not_categories = 0;  // bit c: \P{c} inside a class
  bool white_space = false;
  bool not_white_space = false;  // \S inside a class
  bool negated = false;

  bool Contains(uint32_t cp, uint8_t flags) const {
    bool in = false;
    const unsigned cat = static_cast<unsigned>(CategoryOf(flags));
    if (categories & (1u << cat)) in = true;
    if (not_categories && !(not_categories & (1u << cat))) in = true;
    if (white_space && IsWhiteSpace(flags)) in = true;
    if (not_white_space && !IsWhiteSpace(flags)) in = true;
    for (size_t i = 0; !in && i < ranges.size(); ++i) {
      in = cp >= ranges[i].first && cp <= ranges[i].second;
    }
    return in != negated;
  }
};

struct PreRegex::Node {
  enum class Type { kSet, kGroup, kNotAhead, kAhead, kStart, kEnd };
  Type type = Type::kSet;
  CharSet set;
  std::vector<std::vector<Node>> alts;  // kGroup and lookaheads
  int min = 1, max = 1;                 // max -1: unbounded
};

namespace {

using Node = PreRegex::Node;
using Seq = std::vector<Node>;

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  Result<std::vector<Seq>> Parse() {
    WEIR_ASSIGN_OR_RETURN(std::vector<Seq> alts, ParseAlts(false));
    if (pos_ != p_.size()) return Error("unbalanced ')'");
    return alts;
  }

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument(StrFormat("pre-tokenizer regex '%.*s': %s at byte %zu",
                                             static_cast<int>(p_.size()), p_.data(), what.c_str(),
                                             pos_));
  }
  bool AtEnd() const { return pos_ >= p_.size(); }
  uint32_t Next() {
    size_t len = Utf8UnitLength(p_, pos_);
    uint32_t cp = Utf8Decode(p_, pos_, len);
    pos_ += len;
    return cp;
  }

  Result<std::vector<Seq>> ParseAlts(bool in_group) {
    std::vector<Seq> alts(1);
    while (!AtEnd()) {
      char c = p_[pos_];
      if (c == ')') {
        if (!in_group) return Error("unbalanced ')'");
        break;
      }
      if (c == '|') {
        ++pos_;
        alts.emplace_back();
        continue;
      }
      WEIR_ASSIGN_OR_RETURN(Node n, ParseAtom());
      WEIR_RETURN_IF_ERROR(ParseQuantifier(&n));
      alts.back().push_back(std::move(n));
    }
    return alts;
  }

  Result<Node> ParseAtom() {
    Node n;
    char c = p_[pos_];
    if (c == '(') {
      if (++depth_ > kMaxDepth) return Error("groups nested too deeply");
      ++pos_;
      n.type = Node::Type::kGroup;
      bool saved_icase = icase_;
      if (p_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (p_.substr(pos_, 3) == "?i:") {
        pos_ += 3;
        icase_ = true;
      } else if (p_.substr(pos_, 2) == "?!") {
        pos_ += 2;
        n.type = Node::Type::kNotAhead;
      } else if (p_.substr(pos_, 2) == "?=") {
        pos_ += 2;
        n.type = Node::Type::kAhead;
      } else if (p_.substr(pos_, 1) == "?") {
        return Error("unsupported group kind");
      }
      WEIR_ASSIGN_OR_RETURN(n.alts, ParseAlts(true));
      icase_ = saved_icase;
      if (AtEnd() || p_[pos_] != ')') return Error("missing ')'");
      ++pos_;
      --depth_;
      return n;
    }
    if (c == '^' || c == '$') {
      ++pos_;
      n.type = c == '^' ? Node::Type::kStart : Node::Type::kEnd;
      return n;
    }
    if (c == '[') {
      ++pos_;
      WEIR_RETURN_IF_ERROR(ParseClass(&n.set));
      return n;
    }
    if (c == '.') return Error("'.' is not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("quantifier without an atom");
    if (c == '\\') {
      ++pos_;
      WEIR_RETURN_IF_ERROR(ParseEscape(&n.set, /*in_class=*/false));
      return n;
    }
    AddLiteral(Next(), &n.set);
    return n;
  }

  void AddLiteral(uint32_t cp, CharSet* set) const {
    set->ranges.push_back({cp, cp});
    if (icase_ && cp < 128 && std::isalpha(static_cast<int>(cp))) {
      uint32_t other = cp ^ 0x20u;
      set->ranges.push_back({other, other});
    }
  }

  // After a backslash. Adds what the escape stands for to *set; outside a class a negated
  // escape (\S, \P{X}) makes the whole (single-item) set negated.
  Status ParseEscape(CharSet* set, bool in_class) {
    if (AtEnd()) return Error("pattern ends in '\\'");
    char c = p_[pos_++];
    switch (c) {
      case 'r':
        set->ranges.push_back({'\r', '\r'});
        return Status::Ok();
      case 'n':
        set->ranges.push_back({'\n', '\n'});
        return Status::Ok();
      case 't':
        set->ranges.push_back({'\t', '\t'});
        return Status::Ok();
      case 'f':
        set->ranges.push_back({'\f', '\f'});
        return Status::Ok();
      case 'v':
        set->ranges.push_back({'\v', '\v'});
        return Status::Ok();
      case 's':
        set->white_space = true;
        return Status::Ok();
      case 'S':
        if (in_class) {
          set->not_white_space = true;
        } else {
          set->white_space = true;
          set->negated = true;
        }
        return Status::Ok();
      case 'd':
        set->categories |= 1u << static_cast<unsigned>(MajorCategory::kN);
        return Status::Ok();
      case 'p':
      case 'P': {
        if (p_.substr(pos_, 1) != "{" || pos_ + 2 >= p_.size() || p_[pos_ + 2] != '}') {
          return Error("\\p needs a one-letter category in braces, e.g. \\p{L}");
        }
        const char name = p_[pos_ + 1];
        pos_ += 3;
        const std::string_view names = "LMNPSZC";
        size_t k = names.find(name);
        if (k == std::string_view::npos) return Error(StrFormat("unknown category '%c'", name));
        const uint16_t bit = static_cast<uint16_t>(1u << (k + 1));
        if (c == 'p') {
          set->categories |= bit;
        } else if (in_class) {
          set->not_categories |= bit;
        } else {
          set->categories |= bit;
          set->negated = true;
        }
        return Status::Ok();
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(c))) {
          return Error(StrFormat("unsupported escape '\\%c'", c));
        }
        set->ranges.push_back({static_cast<uint8_t>(c), static_cast<uint8_t>(c)});
        return Status::Ok();
    }
  }

  // After '['.
  Status ParseClass(CharSet* set) {
    if (!AtEnd() && p_[pos_] == '^') {
      set->negated = true;
      ++pos_;
    }
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      if (p_[pos_] == ']' && !first) {
        ++pos_;
        return Status::Ok();
      }
      first = false;
      uint32_t lo;
      if (p_[pos_] == '\\') {
        ++pos_;
        CharSet item;
        WEIR_RETURN_IF_ERROR(ParseEscape(&item, /*in_class=*/true));
        if (item.ranges.size() != 1 || item.categories || item.not_categories || item.white_space ||
            item.not_white_space) {
          set->categories |= item.categories;
          set->not_categories |= item.not_categories;
          set->white_space |= item.white_space;
          set->not_white_space |= item.not_white_space;
          set->ranges.insert(set->ranges.end(), item.ranges.begin(), item.ranges.end());
          continue;
        }
        lo = item.ranges[0].first;
      } else {
        lo = Next();
      }
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (p_[pos_] == '\\') {
          ++pos_;
          CharSet item;
          WEIR_RETURN_IF_ERROR(ParseEscape(&item, true));
          if (item.ranges.size() != 1) return Error("a class escape cannot end a range");
          hi = item.ranges[0].first;
        } else {
          hi = Next();
        }
        if (hi < lo) return Error("range out of order");
        set->ranges.push_back({lo, hi});
      } else {
        AddLiteral(lo, set);
      }
    }
  }

  Status ParseQuantifier(Node* n) {
    if (AtEnd()) return Status::Ok();
    char c = p_[pos_];
    int mn, mx;
    if (c == '?') {
      mn = 0, mx = 1;
      ++pos_;
    } else if (c == '*') {
      mn = 0, mx = -1;
      ++pos_;
    } else if (c == '+') {
      mn = 1, mx = -1;
      ++pos_;
    } else if (c == '{') {
      size_t close = p_.find('}', pos_);
      if (close == std::string_view::npos) return Error("missing '}'");
      std::string body(p_.substr(pos_ + 1, close - pos_ - 1));
      size_t comma = body.find(',');
      auto num = [](const std::string& s, int* out) {
        if (s.empty() || s.size() > 6) return false;
        for (char d : s) {
          if (d < '0' || d > '9') return false;
        }
        *out = std::stoi(s);
        return true;
      };
      bool ok =
          comma == std::string::npos
              ? num(body, &mn) && (mx = mn, true)
              : num(body.substr(0, comma), &mn) &&
                    (comma + 1 == body.size() ? (mx = -1, true) : num(body.substr(comma + 1), &mx));
      if (!ok || (mx >= 0 && mx < mn)) return Error("bad {n,m} quantifier");
      pos_ = close + 1;
    } else {
      return Status::Ok();
    }
    if (!AtEnd() && (p_[pos_] == '?' || p_[pos_] == '+')) {
      return Error("lazy and possessive quantifiers are not supported");
    }
    if (n->type == Node::Type::kGroup && !(mn == 0 && mx == 1)) {
      return Error("only '?' may follow a group");
    }
    if (n->type != Node::Type::kSet && n->type != Node::Type::kGroup) {
      return Error("quantifier after an anchor or lookahead");
    }
    n->min = mn;
    n->max = mx;
    return Status::Ok();
  }

  static constexpr int kMaxDepth = 32;  // the registry's patterns nest 1 deep
  std::string_view p_;
  size_t pos_ = 0;
  bool icase_ = false;
  int depth_ = 0;
};

// Backtracking matcher. A continuation is the rest of an enclosing sequence.
struct Cont {
  const Seq* seq;
  size_t i;
  const Cont* next;
};

struct Matcher {
  const CodePoints& t;
  size_t begin, end;

  bool MatchAlts(const std::vector<Seq>& alts, size_t pos, const Cont* k, size_t* out) const {
    for (const Seq& s : alts) {
      if (MatchSeq(s, 0, pos, k, out)) return true;
    }
    return false;
  }

  bool MatchSeq(const Seq& seq, size_t i, size_t pos, const Cont* k, size_t* out) const {
    if (i == seq.size()) {
      if (!k) {
        *out = pos;
        return true;
      }
      return MatchSeq(*k->seq, k->i, pos, k->next, out);
    }
    const Node& n = seq[i];
    switch (n.type) {
      case Node::Type::kSet: {
        size_t count = 0;
        const size_t limit = n.max < 0 ? end - pos : std::min<size_t>(n.max, end - pos);
        while (count < limit && n.set.Contains(t.cps[pos + count], t.flags[pos + count])) ++count;
        if (count < static_cast<size_t>(n.min)) return false;
        for (size_t c = count + 1; c-- > static_cast<size_t>(n.min);) {
          if (MatchSeq(seq, i + 1, pos + c, k, out)) return true;
        }
        return false;
      }
      case Node::Type::kGroup: {
        const Cont after{&seq, i + 1, k};
        if (MatchAlts(n.alts, pos, &after, out)) return true;
        return n.min == 0 && MatchSeq(seq, i + 1, pos, k, out);
      }
      case Node::Type::kNotAhead:
      case Node::Type::kAhead: {
        size_t ignored;
        bool found = MatchAlts(n.alts, pos, nullptr, &ignored);
        if (found != (n.type == Node::Type::kAhead)) return false;
        return MatchSeq(seq, i + 1, pos, k, out);
      }
      case Node::Type::kStart:
        return pos == begin && MatchSeq(seq, i + 1, pos, k, out);
      case Node::Type::kEnd:
        return pos == end && MatchSeq(seq, i + 1, pos, k, out);
    }
    return false;
  }
};

}  // namespace

CodePoints DecodeForMatch(std::string_view text) {
  CodePoints t;
  t.cps.reserve(text.size());
  t.flags.reserve(text.size());
  t.offsets.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    size_t len = Utf8UnitLength(text, pos);
    uint32_t cp = Utf8Decode(text, pos, len);
    t.cps.push_back(cp);
    t.flags.push_back(UnicodeFlags(cp));
    t.offsets.push_back(pos);
    pos += len;
  }
  t.offsets.push_back(text.size());
  return t;
}

Result<PreRegex> PreRegex::Compile(std::string_view pattern) {
  if (pattern.empty()) return Status::InvalidArgument("pre-tokenizer regex is empty");
  Parser parser(pattern);
  WEIR_ASSIGN_OR_RETURN(std::vector<Seq> alts, parser.Parse());
  PreRegex r;
  r.pattern_ = std::string(pattern);
  r.alts_ = std::make_shared<const std::vector<Seq>>(std::move(alts));
  return r;
}

size_t PreRegex::MatchAt(const CodePoints& text, size_t begin, size_t end, size_t pos) const {
  Matcher m{text, begin, end};
  size_t out = pos;
  if (!m.MatchAlts(*alts_, pos, nullptr, &out)) return 0;
  return out - pos;
}

}  // namespace weir::tokenizer
