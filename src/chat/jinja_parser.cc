#include "chat/jinja_parser.h"

#include <cctype>
#include <cstdlib>
#include <set>
#include <string>

namespace weir::chat::internal {
namespace {

// ---------------------------------------------------------------------------------------------
// Template source -> text and tag segments.

struct Segment {
  enum class Type { kText, kExpr, kStmt };
  Type type;
  std::string text;
  int line;
};

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// jinja2's lexer with trim_blocks and lstrip_blocks: `text` collects output text across comments;
// `chunk_start` is where the text since the previous tag (of any kind) begins, which is all that
// a tag's whitespace rules may strip. `line_starting` says whether the previous tag's match ended
// a line (jinja2 strips blanks before a block tag only on a fresh line).
Result<std::vector<Segment>> Split(std::string_view src) {
  std::vector<Segment> segs;
  std::string text;
  size_t chunk_start = 0;
  bool strip_next = false;  // the previous tag ended in '-'
  bool line_starting = true;
  size_t pos = 0;
  // Line numbers for messages, counted incrementally (tags are visited in order).
  size_t counted = 0;
  int line = 1;
  auto line_at = [&](size_t at) {
    for (; counted < at && counted < src.size(); ++counted) line += src[counted] == '\n';
    return line;
  };
  auto flush_text = [&]() {
    if (!text.empty()) segs.push_back({Segment::Type::kText, text, 0});
    text.clear();
    chunk_start = 0;
  };
  while (pos < src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string_view::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#') {
      open = src.find('{', open + 1);
    }
    if (open == std::string_view::npos || open + 1 >= src.size()) open = src.size();
    size_t begin = pos;
    if (strip_next) {
      while (begin < open && IsSpace(src[begin])) ++begin;
      if (begin > pos && src[begin - 1] == '\n') line_starting = true;
      strip_next = false;
    }
    chunk_start = text.size();
    text.append(src.substr(begin, open - begin));
    if (open >= src.size()) break;

    const char kind = src[open + 1];
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t inner = open + 2;
    const char modifier = inner < src.size() ? src[inner] : 0;
    if (modifier == '-') {
      while (text.size() > chunk_start && IsSpace(text.back())) text.pop_back();
    } else if (modifier != '+' && kind != '{') {
      size_t nl = text.rfind('\n');
      size_t l_pos = (nl == std::string::npos || nl < chunk_start) ? chunk_start : nl + 1;
      if (l_pos > chunk_start || line_starting) {
        bool blank = true;
        for (size_t k = l_pos; k < text.size(); ++k)
          blank = blank && (text[k] == ' ' || text[k] == '\t');
        if (blank) text.erase(l_pos);
      }
    }
    if (modifier == '-' || modifier == '+') ++inner;
    // Find the closing delimiter outside string literals.
    size_t end = inner;
    char quote = 0;
    for (; end + 1 < src.size(); ++end) {
      char c = src[end];
      if (kind != '#') {
        if (quote) {
          if (c == '\\') {
            ++end;
            continue;
          }
          if (c == quote) quote = 0;
          continue;
        }
        if (c == '\'' || c == '"') {
          quote = c;
          continue;
        }
      }
      if (src.compare(end, 2, close) == 0) break;
    }
    if (end + 1 >= src.size()) {
      return Status::InvalidArgument(
          StrFormat("chat template line %d: '%c%c' is never closed", line_at(open), '{', kind));
    }
    size_t content_end = end;
    char end_mod = 0;
    if (content_end > inner && (src[content_end - 1] == '-' || src[content_end - 1] == '+')) {
      end_mod = src[content_end - 1];
      --content_end;
    }
    pos = end + 2;
    if (kind != '#') {
      flush_text();
      segs.push_back({kind == '{' ? Segment::Type::kExpr : Segment::Type::kStmt,
                      std::string(src.substr(inner, content_end - inner)), line_at(open)});
    }
    line_starting = false;
    if (end_mod == '-') {
      strip_next = true;
    } else if (end_mod != '+' && kind != '{' && pos < src.size() && src[pos] == '\n') {
      ++pos;  // trim_blocks
      line_starting = true;
    }
  }
  flush_text();
  return segs;
}

// ---------------------------------------------------------------------------------------------
// Tag contents -> tokens.

struct Token {
  enum class Type { kName, kInt, kFloat, kString, kOp, kEnd };
  Type type = Type::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
};

Result<std::vector<Token>> Lex(std::string_view s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  auto error = [&](const std::string& what) {
    return Status::InvalidArgument(StrFormat("chat template line %d: %s in '%.*s'", line,
                                             what.c_str(), static_cast<int>(s.size()), s.data()));
  };
  while (i < s.size()) {
    char c = s[i];
    if (IsSpace(c)) {
      ++i;
      continue;
    }
    Token t;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      t.type = Token::Type::kName;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      bool is_float =
          j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]));
      if (is_float) {
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      std::string num(s.substr(i, j - i));
      if (is_float) {
        t.type = Token::Type::kFloat;
        t.float_value = std::strtod(num.c_str(), nullptr);
      } else {
        t.type = Token::Type::kInt;
        t.int_value = std::strtoll(num.c_str(), nullptr, 10);
      }
      t.text = num;
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string value;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          value.push_back(s[j]);
          continue;
        }
        char e = s[++j];
        switch (e) {
          case 'n':
            value.push_back('\n');
            break;
          case 't':
            value.push_back('\t');
            break;
          case 'r':
            value.push_back('\r');
            break;
          case '\\':
            value.push_back('\\');
            break;
          case '\'':
            value.push_back('\'');
            break;
          case '"':
            value.push_back('"');
            break;
          default:
            value.push_back('\\');
            value.push_back(e);
        }
      }
      if (j >= s.size()) return error("unterminated string");
      t.type = Token::Type::kString;
      t.text = value;
      i = j + 1;
    } else {
      static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+",
                                   "-",  "*",  "/",  "%",  "~",  "|",  ".", ",", ":",
                                   "(",  ")",  "[",  "]",  "{",  "}",  "="};
      bool found = false;
      for (const char* op : kOps) {
        size_t n = std::char_traits<char>::length(op);
        if (s.compare(i, n, op) == 0) {
          t.type = Token::Type::kOp;
          t.text = op;
          i += n;
          found = true;
          break;
        }
      }
      if (!found) return error(StrFormat("unexpected character '%c'", c));
    }
    out.push_back(std::move(t));
  }
  out.push_back(Token{});
  return out;
}

// ---------------------------------------------------------------------------------------------
// Tokens -> expressions.

class ExprParser {
 public:
  ExprParser(std::vector<Token> toks, int line, std::string_view src)
      : t_(std::move(toks)), line_(line), src_(src) {}

  Status Error(const std::string& what) const {
    return Status::InvalidArgument(StrFormat("chat template line %d: %s in '%.*s'", line_,
                                             what.c_str(), static_cast<int>(src_.size()),
                                             src_.data()));
  }
  const Token& Peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool AtEnd() const { return Peek().type == Token::Type::kEnd; }
  bool IsOp(const char* op, size_t k = 0) const {
    return Peek(k).type == Token::Type::kOp && Peek(k).text == op;
  }
  bool IsName(const char* name, size_t k = 0) const {
    return Peek(k).type == Token::Type::kName && Peek(k).text == name;
  }
  bool TakeOp(const char* op) {
    if (!IsOp(op)) return false;
    ++i_;
    return true;
  }
  bool TakeName(const char* name) {
    if (!IsName(name)) return false;
    ++i_;
    return true;
  }
  Status ExpectOp(const char* op) {
    if (TakeOp(op)) return Status::Ok();
    return Error(StrFormat("expected '%s' but found '%s'", op,
                           AtEnd() ? "end of tag" : Peek().text.c_str()));
  }
  Result<std::string> ExpectName() {
    if (Peek().type != Token::Type::kName) {
      return Error(StrFormat("expected a name but found '%s'",
                             AtEnd() ? "end of tag" : Peek().text.c_str()));
    }
    return t_[i_++].text;
  }

  ExprPtr Make(Expr::Type type, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line_;
    e->name = std::move(name);
    return e;
  }

  // expr := or ["if" or ["else" expr]]
  Result<ExprPtr> ParseExpr() {
    // Every nesting (parentheses, lists, calls, subscripts, conditionals) passes through here.
    if (++depth_ > kMaxDepth) return Error("expression nested too deeply");
    Result<ExprPtr> e = ParseExprInner();
    --depth_;
    return e;
  }
  Result<ExprPtr> ParseExprInner() {
    WEIR_ASSIGN_OR_RETURN(ExprPtr value, ParseOr());
    if (!IsName("if")) return value;
    ++i_;
    WEIR_ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
    ExprPtr other;
    if (TakeName("else")) {
      WEIR_ASSIGN_OR_RETURN(other, ParseExpr());
    }
    ExprPtr e = Make(Expr::Type::kCond);
    e->args.push_back(std::move(cond));
    e->args.push_back(std::move(value));
    e->args.push_back(std::move(other));
    return e;
  }
  // Without the conditional (a for loop's iterable, where "if" starts the filter).
  Result<ExprPtr> ParseOr() {
    WEIR_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (TakeName("or")) {
      WEIR_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = Binary("or", std::move(left), std::move(right));
    }
    return left;
  }
  // `| name[(args)] | ...` with nothing before it ({% set x | filter %} blocks): kFilter nodes
  // whose args[0], the value they apply to, is null.
  Status ParseFilterChain(std::vector<ExprPtr>* filters) {
    while (TakeOp("|")) {
      WEIR_ASSIGN_OR_RETURN(std::string name, ExpectName());
      ExprPtr f = Make(Expr::Type::kFilter, name);
      f->args.push_back(nullptr);
      if (IsOp("(")) WEIR_RETURN_IF_ERROR(ParseCallArgs(f.get()));
      filters->push_back(std::move(f));
    }
    return Status::Ok();
  }

 private:
  ExprPtr Binary(const std::string& op, ExprPtr a, ExprPtr b) {
    ExprPtr e = Make(Expr::Type::kBinary, op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  Result<ExprPtr> ParseAnd() {
    WEIR_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (TakeName("and")) {
      WEIR_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = Binary("and", std::move(left), std::move(right));
    }
    return left;
  }
  Result<ExprPtr> ParseNot() {
    if (TakeName("not")) {
      if (++depth_ > kMaxDepth) return Error("expression nested too deeply");
      WEIR_ASSIGN_OR_RETURN(ExprPtr inner, ParseNot());
      --depth_;
      ExprPtr e = Make(Expr::Type::kUnary, "not");
      e->args.push_back(std::move(inner));
      return e;
    }
    return ParseCompare();
  }
  Result<ExprPtr> ParseCompare() {
    WEIR_ASSIGN_OR_RETURN(ExprPtr left, ParseMath1());
    bool compared = false;
    while (true) {
      std::string op;
      if (Peek().type == Token::Type::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = t_[i_++].text;
      } else if (IsName("in")) {
        ++i_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        return left;
      }
      if (compared) {
        return Error("chained comparisons (a < b < c) are not supported; write a < b and b < c");
      }
      compared = true;
      WEIR_ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      left = Binary(op, std::move(left), std::move(right));
    }
  }
  Result<ExprPtr> ParseMath1() {
    WEIR_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      std::string op = t_[i_++].text;
      WEIR_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = Binary(op, std::move(left), std::move(right));
    }
    return left;
  }
  Result<ExprPtr> ParseConcat() {
    WEIR_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (TakeOp("~")) {
      WEIR_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      left = Binary("~", std::move(left), std::move(right));
    }
    return left;
  }
  Result<ExprPtr> ParseMath2() {
    WEIR_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = t_[i_++].text;
      WEIR_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = Binary(op, std::move(left), std::move(right));
    }
    return left;
  }
  Result<ExprPtr> ParsePow() {
    WEIR_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary());
    while (TakeOp("**")) {
      WEIR_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary());
      left = Binary("**", std::move(left), std::move(right));
    }
    return left;
  }
  Result<ExprPtr> ParseUnary() {
    if (IsOp("-") || IsOp("+")) {
      std::string op = t_[i_++].text;
      if (++depth_ > kMaxDepth) return Error("expression nested too deeply");
      WEIR_ASSIGN_OR_RETURN(ExprPtr inner, ParseUnary());
      --depth_;
      ExprPtr e = Make(Expr::Type::kUnary, op);
      e->args.push_back(std::move(inner));
      return e;
    }
    WEIR_ASSIGN_OR_RETURN(ExprPtr e, ParsePrimary());
    WEIR_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    // Filters and tests bind to the unary operand, as in jinja2.
    while (true) {
      if (TakeOp("|")) {
        WEIR_ASSIGN_OR_RETURN(std::string name, ExpectName());
        ExprPtr f = Make(Expr::Type::kFilter, name);
        f->args.push_back(std::move(e));
        if (IsOp("(")) WEIR_RETURN_IF_ERROR(ParseCallArgs(f.get()));
        WEIR_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(f)));
      } else if (IsName("is")) {
        ++i_;
        ExprPtr test = Make(Expr::Type::kTest);
        test->negate = TakeName("not");
        // "none", "true", "false" are names here.
        if (Peek().type != Token::Type::kName) return Error("expected a test name after 'is'");
        test->name = t_[i_++].text;
        test->args.push_back(std::move(e));
        if (IsOp("(")) {
          WEIR_RETURN_IF_ERROR(ParseCallArgs(test.get()));
        } else if (Peek().type == Token::Type::kString || Peek().type == Token::Type::kInt ||
                   Peek().type == Token::Type::kFloat) {
          WEIR_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());  // "is divisibleby 3", "is eq 'x'"
          test->args.push_back(std::move(arg));
        }
        e = std::move(test);
      } else {
        return e;
      }
    }
  }
  Status ParseCallArgs(Expr* call) {
    WEIR_RETURN_IF_ERROR(ExpectOp("("));
    while (!TakeOp(")")) {
      if (AtEnd()) return Error("unclosed '('");
      if (Peek().type == Token::Type::kName && IsOp("=", 1)) {
        std::string key = t_[i_].text;
        i_ += 2;
        WEIR_ASSIGN_OR_RETURN(ExprPtr v, ParseExpr());
        call->kwargs.emplace_back(key, std::move(v));
      } else {
        WEIR_ASSIGN_OR_RETURN(ExprPtr v, ParseExpr());
        call->args.push_back(std::move(v));
      }
      if (!IsOp(")")) WEIR_RETURN_IF_ERROR(ExpectOp(","));
    }
    return Status::Ok();
  }
  Result<ExprPtr> ParsePostfix(ExprPtr e) {
    while (true) {
      if (TakeOp(".")) {
        WEIR_ASSIGN_OR_RETURN(std::string name, ExpectName());
        ExprPtr a = Make(Expr::Type::kAttr, name);
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (TakeOp("[")) {
        ExprPtr parts[3];
        int colons = 0;
        while (!IsOp("]")) {
          if (AtEnd()) return Error("unclosed '['");
          if (TakeOp(":")) {
            if (++colons > 2) return Error("too many ':' in a slice");
            continue;
          }
          if (parts[colons]) return Error("expected ':' or ']'");
          WEIR_ASSIGN_OR_RETURN(parts[colons], ParseExpr());
        }
        ++i_;
        ExprPtr x;
        if (colons == 0) {
          if (!parts[0]) return Error("empty subscript");
          x = Make(Expr::Type::kIndex);
          x->args.push_back(std::move(e));
          x->args.push_back(std::move(parts[0]));
        } else {
          x = Make(Expr::Type::kSlice);
          x->args.push_back(std::move(e));
          for (auto& p : parts) x->args.push_back(std::move(p));
        }
        e = std::move(x);
      } else if (IsOp("(")) {
        ExprPtr c = Make(Expr::Type::kCall);
        c->args.push_back(std::move(e));
        WEIR_RETURN_IF_ERROR(ParseCallArgs(c.get()));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  Result<ExprPtr> ParsePrimary() {
    const Token tok = Peek();
    switch (tok.type) {
      case Token::Type::kEnd:
        return Error("expected an expression");
      case Token::Type::kInt: {
        ++i_;
        ExprPtr e = Make(Expr::Type::kLiteral);
        e->literal = Value::Int(tok.int_value);
        return e;
      }
      case Token::Type::kFloat: {
        ++i_;
        ExprPtr e = Make(Expr::Type::kLiteral);
        e->literal = Value::Float(tok.float_value);
        return e;
      }
      case Token::Type::kString: {
        ++i_;
        std::string s = tok.text;
        while (Peek().type == Token::Type::kString) s += t_[i_++].text;  // adjacent literals join
        ExprPtr e = Make(Expr::Type::kLiteral);
        e->literal = Value::String(std::move(s));
        return e;
      }
      case Token::Type::kName: {
        ++i_;
        ExprPtr e = Make(Expr::Type::kLiteral);
        if (tok.text == "true" || tok.text == "True") {
          e->literal = Value::Bool(true);
        } else if (tok.text == "false" || tok.text == "False") {
          e->literal = Value::Bool(false);
        } else if (tok.text == "none" || tok.text == "None") {
          e->literal = Value::None();
        } else {
          e = Make(Expr::Type::kName, tok.text);
        }
        return e;
      }
      case Token::Type::kOp:
        break;
    }
    if (TakeOp("(")) {
      if (TakeOp(")")) {
        ExprPtr empty = Make(Expr::Type::kList);
        empty->negate = true;  // a tuple
        return empty;
      }
      WEIR_ASSIGN_OR_RETURN(ExprPtr inner, ParseExpr());
      if (!IsOp(",")) {
        WEIR_RETURN_IF_ERROR(ExpectOp(")"));
        return inner;
      }
      ExprPtr tuple = Make(Expr::Type::kList);
      tuple->negate = true;  // a tuple
      tuple->args.push_back(std::move(inner));
      while (TakeOp(",")) {
        if (IsOp(")")) break;
        WEIR_ASSIGN_OR_RETURN(ExprPtr item, ParseExpr());
        tuple->args.push_back(std::move(item));
      }
      WEIR_RETURN_IF_ERROR(ExpectOp(")"));
      return tuple;
    }
    if (TakeOp("[")) {
      ExprPtr list = Make(Expr::Type::kList);
      while (!TakeOp("]")) {
        if (AtEnd()) return Error("unclosed '['");
        WEIR_ASSIGN_OR_RETURN(ExprPtr item, ParseExpr());
        list->args.push_back(std::move(item));
        if (!IsOp("]")) WEIR_RETURN_IF_ERROR(ExpectOp(","));
      }
      return list;
    }
    if (TakeOp("{")) {
      ExprPtr dict = Make(Expr::Type::kDict);
      while (!TakeOp("}")) {
        if (AtEnd()) return Error("unclosed '{'");
        WEIR_ASSIGN_OR_RETURN(ExprPtr key, ParseExpr());
        WEIR_RETURN_IF_ERROR(ExpectOp(":"));
        WEIR_ASSIGN_OR_RETURN(ExprPtr value, ParseExpr());
        dict->args.push_back(std::move(key));
        dict->args.push_back(std::move(value));
        if (!IsOp("}")) WEIR_RETURN_IF_ERROR(ExpectOp(","));
      }
      return dict;
    }
    return Error(StrFormat("unexpected '%s'", tok.text.c_str()));
  }

  static constexpr int kMaxDepth = 64;
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int line_;
  std::string_view src_;
};

// ---------------------------------------------------------------------------------------------
// Segments -> statement tree.

class StmtParser {
 public:
  explicit StmtParser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  // Parses until one of `stops` (a statement keyword) or the end; *stop gets the keyword found
  // ("" at the end) and *stop_parser the rest of that tag.
  Status ParseBody(const std::set<std::string>& stops, Body* body, std::string* stop,
                   std::unique_ptr<ExprParser>* stop_parser) {
    while (pos_ < segs_.size()) {
      const Segment& seg = segs_[pos_++];
      if (seg.type == Segment::Type::kText) {
        auto n = std::make_unique<Node>();
        n->type = Node::Type::kText;
        n->text = seg.text;
        body->push_back(std::move(n));
        continue;
      }
      WEIR_ASSIGN_OR_RETURN(std::vector<Token> toks, Lex(seg.text, seg.line));
      auto p = std::make_unique<ExprParser>(std::move(toks), seg.line, seg.text);
      if (seg.type == Segment::Type::kExpr) {
        auto n = std::make_unique<Node>();
        n->type = Node::Type::kOutput;
        n->line = seg.line;
        WEIR_ASSIGN_OR_RETURN(n->expr, p->ParseExpr());
        if (!p->AtEnd()) return p->Error(StrFormat("unexpected '%s'", p->Peek().text.c_str()));
        body->push_back(std::move(n));
        continue;
      }
      WEIR_ASSIGN_OR_RETURN(std::string keyword, p->ExpectName());
      if (stops.count(keyword)) {
        *stop = keyword;
        *stop_parser = std::move(p);
        return Status::Ok();
      }
      WEIR_ASSIGN_OR_RETURN(std::unique_ptr<Node> n, ParseStatement(keyword, seg.line, p.get()));
      body->push_back(std::move(n));
    }
    if (!stops.empty()) {
      std::string want;
      for (const std::string& s : stops) want += (want.empty() ? "" : " or ") + s;
      return Status::InvalidArgument(
          StrFormat("chat template: the template ends before {%% %s %%}", want.c_str()));
    }
    stop->clear();
    return Status::Ok();
  }

 private:
  static Status ExpectEnd(ExprParser* p) {
    if (p->AtEnd()) return Status::Ok();
    return p->Error(StrFormat("unexpected '%s'", p->Peek().text.c_str()));
  }

  Result<std::unique_ptr<Node>> ParseStatement(const std::string& kw, int line, ExprParser* p) {
    if (++block_depth_ > kMaxBlockDepth) {
      return Status::InvalidArgument(StrFormat(
          "chat template line %d: blocks nested more than %d deep", line, kMaxBlockDepth));
    }
    Result<std::unique_ptr<Node>> n = ParseStatementInner(kw, line, p);
    --block_depth_;
    return n;
  }
  Result<std::unique_ptr<Node>> ParseStatementInner(const std::string& kw, int line,
                                                    ExprParser* p) {
    auto n = std::make_unique<Node>();
    n->line = line;
    std::string stop;
    std::unique_ptr<ExprParser> sp;
    if (kw == "if") {
      n->type = Node::Type::kIf;
      WEIR_ASSIGN_OR_RETURN(ExprPtr cond, p->ParseExpr());
      WEIR_RETURN_IF_ERROR(ExpectEnd(p));
      n->conditions.push_back(std::move(cond));
      while (true) {
        Body body;
        WEIR_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &body, &stop, &sp));
        n->bodies.push_back(std::move(body));
        if (stop == "elif") {
          WEIR_ASSIGN_OR_RETURN(ExprPtr c, sp->ParseExpr());
          WEIR_RETURN_IF_ERROR(ExpectEnd(sp.get()));
          n->conditions.push_back(std::move(c));
          continue;
        }
        WEIR_RETURN_IF_ERROR(ExpectEnd(sp.get()));
        if (stop == "else") {
          Body other;
          WEIR_RETURN_IF_ERROR(ParseBody({"endif"}, &other, &stop, &sp));
          WEIR_RETURN_IF_ERROR(ExpectEnd(sp.get()));
          n->bodies.push_back(std::move(other));
        }
        return n;
      }
    }
    if (kw == "for") {
      n->type = Node::Type::kFor;
      do {
        WEIR_ASSIGN_OR_RETURN(std::string target, p->ExpectName());
        n->targets.push_back(target);
      } while (p->TakeOp(","));
      if (!p->TakeName("in")) return p->Error("expected 'in'");
      WEIR_ASSIGN_OR_RETURN(n->expr, p->ParseOr());
      if (p->TakeName("if")) {
        WEIR_ASSIGN_OR_RETURN(n->filter, p->ParseOr());
      }
      if (p->TakeName("recursive")) return p->Error("recursive loops are not supported");
      WEIR_RETURN_IF_ERROR(ExpectEnd(p));
      Body body;
      ++loop_depth_;
      Status st = ParseBody({"else", "endfor"}, &body, &stop, &sp);
      --loop_depth_;
      WEIR_RETURN_IF_ERROR(st);
      WEIR_RETURN_IF_ERROR(ExpectEnd(sp.get()));
      n->bodies.push_back(std::move(body));
      Body other;
      if (stop == "else") {
        WEIR_RETURN_IF_ERROR(ParseBody({"endfor"}, &other, &stop, &sp));
        WEIR_RETURN_IF_ERROR(ExpectEnd(sp.get()));
      }
      n->bodies.push_back(std::move(other));
      return n;
    }
    if (kw == "set") {
      WEIR_ASSIGN_OR_RETURN(n->set_name, p->ExpectName());
      if (p->TakeOp(".")) {
        WEIR_ASSIGN_OR_RETURN(n->set_attr, p->ExpectName());
      }
      if (p->TakeOp("=")) {
        n->type = Node::Type::kSet;
        WEIR_ASSIGN_OR_RETURN(n->expr, p->ParseExpr());
        WEIR_RETURN_IF_ERROR(ExpectEnd(p));
        return n;
      }
      // A block assignment: the body's output, through optional filters.
      n->type = Node::Type::kSetBlock;
      WEIR_RETURN_IF_ERROR(p->ParseFilterChain(&n->filters));
      if (!p->AtEnd()) {
        return p->Error(StrFormat("expected '=', '|' or the end of the tag but found '%s'",
                                  p->Peek().text.c_str()));
      }
      Body body;
      WEIR_RETURN_IF_ERROR(ParseBody({"endset"}, &body, &stop, &sp));
      WEIR_RETURN_IF_ERROR(ExpectEnd(sp.get()));
      n->bodies.push_back(std::move(body));
      return n;
    }
    if (kw == "macro") return ParseMacro(std::move(n), p);
    if (kw == "break" || kw == "continue") {
      // As jinja2 refuses them at compile time; so a macro body can never end its caller's loop.
      if (loop_depth_ == 0) return p->Error(StrFormat("'%s' outside a loop", kw.c_str()));
      n->type = kw == "break" ? Node::Type::kBreak : Node::Type::kContinue;
      WEIR_RETURN_IF_ERROR(ExpectEnd(p));
      return n;
    }
    if (kw == "elif" || kw == "else" || kw.rfind("end", 0) == 0) {
      return Status::InvalidArgument(
          StrFormat("chat template line %d: {%% %s %%} without an open block it belongs to", line,
                    kw.c_str()));
    }
    return Status::Unsupported(
        StrFormat("chat template line %d: the tag {%% %s %%} is not supported (weir renders if, "
                  "for, set, set blocks, macro, break and continue)",
                  line, kw.c_str()));
  }

  // {% macro name(a, b=default, ...) %} body {% endmacro %}
  Result<std::unique_ptr<Node>> ParseMacro(std::unique_ptr<Node> n, ExprParser* p) {
    n->type = Node::Type::kMacro;
    WEIR_ASSIGN_OR_RETURN(n->set_name, p->ExpectName());
    WEIR_RETURN_IF_ERROR(p->ExpectOp("("));
    if (!p->TakeOp(")")) {
      do {
        WEIR_ASSIGN_OR_RETURN(std::string param, p->ExpectName());
        for (const std::string& other : n->targets) {
          if (other == param) return p->Error("duplicate parameter '" + param + "'");
        }
        ExprPtr dflt;
        if (p->TakeOp("=")) {
          WEIR_ASSIGN_OR_RETURN(dflt, p->ParseExpr());
        } else if (!n->defaults.empty() && n->defaults.back()) {
          return p->Error("a parameter without a default follows one with a default");
        }
        n->targets.push_back(std::move(param));
        n->defaults.push_back(std::move(dflt));
      } while (p->TakeOp(","));
      WEIR_RETURN_IF_ERROR(p->ExpectOp(")"));
    }
    WEIR_RETURN_IF_ERROR(ExpectEnd(p));
    Body body;
    std::string stop;
    std::unique_ptr<ExprParser> sp;
    const int outer_loops = loop_depth_;
    loop_depth_ = 0;  // a macro body is not inside the loop it is defined in
    Status st = ParseBody({"endmacro"}, &body, &stop, &sp);
    loop_depth_ = outer_loops;
    WEIR_RETURN_IF_ERROR(st);
    WEIR_RETURN_IF_ERROR(ExpectEnd(sp.get()));
    n->uses_varargs = ReadsName(body, "varargs");
    n->uses_kwargs = ReadsName(body, "kwargs");
    n->bodies.push_back(std::move(body));
    return n;
  }

  // Whether any expression in `body` (nested blocks and macros included, as jinja2's
  // find_undeclared looks) reads the variable `name`. Iterative: expression trees can be deep.
  static bool ReadsName(const Body& body, const std::string& name) {
    std::vector<const Node*> nodes;
    std::vector<const Expr*> exprs;
    for (const auto& x : body) nodes.push_back(x.get());
    auto add = [&](const ExprPtr& e) {
      if (e) exprs.push_back(e.get());
    };
    while (!nodes.empty()) {
      const Node* n = nodes.back();
      nodes.pop_back();
      add(n->expr);
      add(n->filter);
      for (const ExprPtr& e : n->conditions) add(e);
      for (const ExprPtr& e : n->filters) add(e);
      for (const ExprPtr& e : n->defaults) add(e);
      for (const Body& b : n->bodies) {
        for (const auto& x : b) nodes.push_back(x.get());
      }
    }
    while (!exprs.empty()) {
      const Expr* e = exprs.back();
      exprs.pop_back();
      if (e->type == Expr::Type::kName && e->name == name) return true;
      for (const ExprPtr& a : e->args) add(a);
      for (const auto& [_, v] : e->kwargs) add(v);
    }
    return false;
  }

  static constexpr int kMaxBlockDepth = 128;
  std::vector<Segment> segs_;
  size_t pos_ = 0;
  int block_depth_ = 0;
  int loop_depth_ = 0;  // for bodies around the current tag, up to the enclosing macro
};

}  // namespace

Result<Body> ParseTemplate(std::string_view source) {
  // jinja2's lexer first makes every line end "\n" (newline_sequence) and, keep_trailing_newline
  // being off, drops one newline at the very end of the source.
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] != '\r') {
      text.push_back(source[i]);
      continue;
    }
    text.push_back('\n');
    if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  WEIR_ASSIGN_OR_RETURN(std::vector<Segment> segs, Split(text));
  StmtParser parser(std::move(segs));
  Body body;
  std::string stop;
  std::unique_ptr<ExprParser> sp;
  WEIR_RETURN_IF_ERROR(parser.ParseBody({}, &body, &stop, &sp));
  return body;
}

}  // namespace weir::chat::internal
