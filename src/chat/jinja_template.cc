#include "chat/jinja_template.h"

#include <string.h>  // memmem

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <limits>

#include "chat/jinja_ast.h"
#include "chat/jinja_parser.h"

namespace weir::chat {
namespace {

using internal::Body;
using internal::Expr;
using internal::Node;

constexpr int64_t kMaxRange = 1 << 20;
constexpr size_t kMaxOutputBytes = 64u << 20;
// How deep lists and dicts may nest in a value a template stores (a loop that wraps a list in a
// list each time would otherwise build a chain that every later traversal, and its destruction,
// walks recursively).
constexpr int kMaxValueDepth = 256;
// The work of one rendering, in bytes of strings and items of lists handled (see Charge): bounds
// its time, which the loop and output bounds alone do not (a loop of 2^18 iterations may scan a
// 64 MiB string in each). 64 Mi bytes: tens of milliseconds in a release build, about a second
// in the fuzzing build (whose instrumented byte loops run ~20 ns a byte); a template renders a
// conversation of 1 MiB (the server's default body limit) well within it.
constexpr int64_t kMaxWork = int64_t{1} << 26;
// Macro calls in progress at once. jinja2 itself stops between 150 and 300 (Python's recursion
// limit); real templates recurse a few levels (nested JSON schemas). Bounded so that a runaway
// recursion is an error long before the C++ stack is at risk.
constexpr int kMaxMacroDepth = 64;

// UTF-8 characters of a string (Python indexes strings by code point): the byte length of the
// character at s[i], by its lead byte.
size_t CharBytes(const std::string& s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return std::min(n, s.size() - i);
}
size_t CountChars(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += CharBytes(s, i)) ++n;
  return n;
}
// Where each character starts, then s.size(): 4 bytes a character (strings are under 4 GiB).
std::vector<uint32_t> CharStarts(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size(); i += CharBytes(s, i)) out.push_back(static_cast<uint32_t>(i));
  out.push_back(static_cast<uint32_t>(s.size()));
  return out;
}

// s.find(x, pos) in time linear in s: std::string::find compares the needle at every position
// where its first byte occurs, n * m steps for a long needle of repeated bytes; glibc's memmem
// is the two-way algorithm.
size_t Find(const std::string& s, const std::string& x, size_t pos = 0) {
  if (x.size() < 16 || pos > s.size()) return s.find(x, pos);
  const void* hit = ::memmem(s.data() + pos, s.size() - pos, x.data(), x.size());
  return hit ? static_cast<size_t>(static_cast<const char*>(hit) - s.data()) : std::string::npos;
}

// Errors of the bounds; the renderer adds "chat template line N: ".
std::string TooLong(const char* what) {
  return StrFormat("%s would make a string longer than %zu MiB", what, kMaxStringBytes >> 20);
}
Status TooManyParts() {
  return Status::InvalidArgument(
      StrFormat("split() into more than %lld parts", static_cast<long long>(kMaxRange)));
}

bool IsPySpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::array<bool, 256> strip{};  // a table: a search of `chars` per byte is n * m
  if (chars && chars->is_string()) {
    for (unsigned char c : chars->str()) strip[c] = true;
  } else {
    for (unsigned char c : std::string_view(" \t\n\r\f\v")) strip[c] = true;
  }
  auto strip_char = [&](char c) { return strip[static_cast<unsigned char>(c)]; };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip_char(s[b])) ++b;
  if (right)
    while (e > b && strip_char(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
std::string Title(const std::string& s) {
  std::string out;
  bool prev_alpha = false;
  for (char c : s) {
    bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    out.push_back(static_cast<char>(alpha ? (prev_alpha ? std::tolower(c) : std::toupper(c)) : c));
    prev_alpha = alpha;
  }
  return out;
}
Result<std::string> Replace(const std::string& s, const std::string& from, const std::string& to,
                            int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = Find(s, from, pos);
    if (hit == std::string::npos) break;
    if (out.size() + (hit - pos) + to.size() > kMaxStringBytes)
      return Status::InvalidArgument(TooLong("replace()"));
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  if (out.size() + (s.size() - pos) > kMaxStringBytes)
    return Status::InvalidArgument(TooLong("replace()"));
  out.append(s, pos, std::string::npos);
  return out;
}

const Value* Arg(const CallArgs& a, size_t i, const char* keyword = nullptr) {
  if (keyword) {
    for (const auto& [k, v] : a.keyword) {
      if (k == keyword) return &v;
    }
  }
  return i < a.positional.size() ? &a.positional[i] : nullptr;
}

// Python sequence index normalisation; false when out of range.
bool NormIndex(int64_t i, size_t n, size_t* out) {
  if (i < 0) i += static_cast<int64_t>(n);
  if (i < 0 || i >= static_cast<int64_t>(n)) return false;
  *out = static_cast<size_t>(i);
  return true;
}

// Python's slice of a sequence of length n: visit(i) for each index it takes.
template <typename Visit>
void ForEachSliceIndex(size_t n, const Value& start, const Value& stop, const Value& step,
                       Visit visit) {
  const int64_t len = static_cast<int64_t>(n);
  int64_t st = step.is_undefined() || step.is_none() ? 1 : step.as_int();
  if (st == 0) st = 1;
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_undefined() || v.is_none()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) i += len;
    if (st > 0) return std::clamp<int64_t>(i, 0, len);
    return std::clamp<int64_t>(i, -1, len - 1);
  };
  int64_t b = clamp(start, st > 0 ? 0 : len - 1);
  int64_t e = clamp(stop, st > 0 ? len : -1);
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    visit(static_cast<size_t>(i));
    if (__builtin_add_overflow(i, st, &i)) break;  // a step past the int64 range ends it
  }
}

class Renderer {
 public:
  explicit Renderer(const Value& context)
      : context_(context), alive_(std::make_shared<Renderer*>(this)) {
    frames_.push_back(std::make_shared<Frame>());
  }

  Status Exec(const Body& body) {
    if (++nesting_ > kMaxNesting) return NestingError(body.empty() ? 0 : body[0]->line);
    Status st = ExecBody(body);
    --nesting_;
    return st;
  }
  std::string& out() { return out_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  // One scope's variables. Shared, because a macro keeps the scopes it was defined in and reads
  // their values when it is called (jinja2's macros are Python closures: late binding).
  using Frame = std::vector<std::pair<std::string, Value>>;
  using Scope = std::vector<std::shared_ptr<Frame>>;

  static Status Error(int line, const std::string& what) {
    return Status::InvalidArgument(StrFormat("chat template line %d: %s", line, what.c_str()));
  }
  static Status NestingError(int line) {
    return Error(line, StrFormat("blocks, expressions and macro calls nested more than %d deep",
                                 kMaxNesting));
  }

  Status ExecBody(const Body& body) {
    for (const auto& node : body) {
      WEIR_RETURN_IF_ERROR(ExecNode(*node));
      if (flow_ != Flow::kNormal) return Status::Ok();
    }
    return Status::Ok();
  }

  void SetVar(const std::string& name, Value v) {
    Frame& f = *frames_.back();
    for (auto& [k, old] : f) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    f.emplace_back(name, std::move(v));
  }

  Value Lookup(const std::string& name) {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      for (const auto& [k, v] : **it) {
        if (k == name) return v;
      }
    }
    if (const Value* v = context_.Find(name)) return *v;
    return Builtin(name);
  }

  Value Builtin(const std::string& name) {
    if (name == "raise_exception") {
      return Value::Func([](const CallArgs& a) -> Result<Value> {
        const Value* msg = Arg(a, 0);
        return Status::InvalidArgument("chat template raised an exception: " +
                                       (msg ? msg->ToString() : std::string()));
      });
    }
    if (name == "namespace" || name == "dict") {
      // dict() is a plain dict, as in jinja2: only a namespace's attributes can be set.
      const bool is_namespace = name == "namespace";
      return Value::Func([is_namespace](const CallArgs& a) -> Result<Value> {
        Value ns = is_namespace ? Value::Namespace() : Value::Dict();
        if (const Value* init = Arg(a, 0); init && init->is_dict()) {
          for (const auto& [k, v] : init->dict()) ns.Set(k, v);
        }
        for (const auto& [k, v] : a.keyword) ns.Set(k, v);
        if (is_namespace) WEIR_RETURN_IF_ERROR(CheckStorable(ns.dict()));
        return ns;
      });
    }
    if (name == "range") {
      return Value::Func([](const CallArgs& a) -> Result<Value> {
        int64_t start = 0, stop = 0, step = 1;
        if (a.positional.size() == 1) {
          stop = a.positional[0].as_int();
        } else if (a.positional.size() >= 2) {
          start = a.positional[0].as_int();
          stop = a.positional[1].as_int();
          if (a.positional.size() >= 3) step = a.positional[2].as_int();
        }
        if (step == 0) return Status::InvalidArgument("chat template: range() step is 0");
        ValueList items;
        for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
          if (static_cast<int64_t>(items.size()) >= kMaxRange) {
            return Status::InvalidArgument("chat template: range() longer than 2^20");
          }
          items.push_back(Value::Int(i));
          if (__builtin_add_overflow(i, step, &i)) break;  // past the int64 range: done
        }
        return Value::List(std::move(items));
      });
    }
    if (name == "strftime_now") {
      return Value::Func([](const CallArgs& a) -> Result<Value> {
        const Value* fmt = Arg(a, 0);
        if (!fmt || !fmt->is_string()) {
          return Status::InvalidArgument("chat template: strftime_now needs a format string");
        }
        std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        size_t n = std::strftime(buf, sizeof(buf), fmt->str().c_str(), &tm);
        return Value::String(std::string(buf, n));
      });
    }
    return Value();
  }

  // Statements, like expressions, run in out-of-line functions of their own (see EvalInner).
  Status ExecNode(const Node& n) {
    switch (n.type) {
      case Node::Type::kText:
        out_ += n.text;
        break;
      case Node::Type::kOutput:
        WEIR_RETURN_IF_ERROR(ExecOutput(n));
        break;
      case Node::Type::kIf:
        return ExecIf(n);
      case Node::Type::kFor:
        return ExecFor(n);
      case Node::Type::kSet:
      case Node::Type::kSetBlock:
        WEIR_RETURN_IF_ERROR(ExecSet(n));
        break;
      case Node::Type::kMacro:
        SetVar(n.set_name, MakeMacro(n));
        break;
      case Node::Type::kBreak:
        flow_ = Flow::kBreak;
        break;
      case Node::Type::kContinue:
        flow_ = Flow::kContinue;
        break;
    }
    if (out_.size() + captured_bytes_ > kMaxOutputBytes) {
      return Error(n.line, "output larger than 64 MiB");
    }
    return Status::Ok();
  }

  [[gnu::noinline]] Status ExecOutput(const Node& n) {
    WEIR_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
    WEIR_ASSIGN_OR_RETURN(std::string text, Text(v, n.line));
    out_ += text;
    return Status::Ok();
  }

  // str(v), bounded: a list or dict is written a character at a time, charged so before it is
  // written (from the size of its strings), and its text may not pass kMaxStringBytes.
  Result<std::string> Text(const Value& v, int line) {
    if (v.is_list() || v.is_dict()) {
      const int64_t left = std::max<int64_t>(kMaxWork - work_, 0) / kWalkCost + 1;
      WEIR_RETURN_IF_ERROR(Charge(kWalkCost * TextBytes(v, left), line));
    }
    std::string text = v.ToString();
    if (text.size() > kMaxStringBytes) return Error(line, TooLong("str()"));
    return text;
  }
  // Comparing a and b (==, in) walks them both as trees, at most their text's length.
  Status ChargeCompare(const Value& a, const Value& b, int line) {
    const int64_t left = std::max<int64_t>(kMaxWork - work_, 0) + 1;
    const int64_t n = TextBytes(a, left);
    return Charge(n + TextBytes(b, left - n), line);
  }
  // About how long v's text is (its strings' bytes and a few per item), counted up to `limit`
  // only: a list holding one list many times is a tree far larger than its memory.
  static int64_t TextBytes(const Value& v, int64_t limit) {
    if (v.is_string()) return static_cast<int64_t>(v.str().size()) + 2;
    int64_t n = 8;
    if (v.is_list()) {
      for (const Value& item : v.list()) {
        if (n > limit) break;
        n += TextBytes(item, limit - n);
      }
    } else if (v.is_dict()) {
      for (const auto& [k, item] : v.dict()) {
        if (n > limit) break;
        n += static_cast<int64_t>(k.size()) + 4 + TextBytes(item, limit - n);
      }
    }
    return n;
  }

  [[gnu::noinline]] Status ExecIf(const Node& n) {
    for (size_t i = 0; i < n.bodies.size(); ++i) {
      if (i < n.conditions.size()) {
        WEIR_ASSIGN_OR_RETURN(Value c, Eval(*n.conditions[i]));
        if (!c.Truthy()) continue;
      }
      return Exec(n.bodies[i]);
    }
    return Status::Ok();
  }

  // `set x = expr`, or a set block: its body runs in a scope of its own (its sets do not leak,
  // as in jinja2) and its output, through the block's filters, is the value.
  [[gnu::noinline]] Status ExecSet(const Node& n) {
    if (n.type == Node::Type::kSet) {
      WEIR_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
      return Assign(n, std::move(v));
    }
    frames_.push_back(std::make_shared<Frame>());
    Result<std::string> text = Capture(n.bodies[0]);
    frames_.pop_back();
    if (!text.ok()) return text.status();
    Value v = Value::String(std::move(*text));
    for (const auto& f : n.filters) {
      WEIR_ASSIGN_OR_RETURN(CallArgs a, EvalArgs(*f, 1));
      WEIR_ASSIGN_OR_RETURN(v, Filter(f->name, v, a, f->line));
    }
    return Assign(n, std::move(v));
  }

  // `set name = v` or `set name.attr = v`. As in jinja2 only a namespace's attributes can be
  // set; unlike jinja2, not to a value holding a namespace: values then never form a cycle (which
  // would recurse forever when printed and never be freed), and a chain grows only by nesting,
  // which kMaxValueDepth bounds.
  Status Assign(const Node& n, Value v) {
    if (v.depth() > kMaxValueDepth) {
      return Error(n.line, StrFormat("a value with lists or dicts nested more than %d deep",
                                     kMaxValueDepth));
    }
    if (n.set_attr.empty()) {
      SetVar(n.set_name, std::move(v));
      return Status::Ok();
    }
    Value target = Lookup(n.set_name);
    if (!target.is_namespace()) {
      return Error(n.line, StrFormat("cannot set attribute '%s' of %s '%s' (only of a namespace)",
                                     n.set_attr.c_str(), target.TypeName(), n.set_name.c_str()));
    }
    if (v.holds_namespace()) {
      return Error(n.line, StrFormat("cannot set attribute '%s' of namespace '%s' to a value "
                                     "holding a namespace (weir keeps namespaces apart)",
                                     n.set_attr.c_str(), n.set_name.c_str()));
    }
    target.Set(n.set_attr, std::move(v));
    return Status::Ok();
  }

  // Renders `body` into a string of its own instead of the output.
  Result<std::string> Capture(const Body& body) {
    std::string outer;
    outer.swap(out_);
    captured_bytes_ += outer.size();
    Status st = Exec(body);
    captured_bytes_ -= outer.size();
    outer.swap(out_);
    if (!st.ok()) return st;
    return outer;
  }

  // A macro is a function value that renders its body with the scopes around its definition
  // (not the caller's) plus one of its own holding the arguments.
  [[gnu::noinline]] Value MakeMacro(const Node& def) {
    // Weak references: the macro is stored in one of these frames, and a strong one would make
    // a cycle that is never freed. A frame gone by the time of a call (a loop's, when the macro
    // escaped it through a namespace) is skipped.
    std::vector<std::weak_ptr<Frame>> scope(frames_.begin(), frames_.end());
    // `def` lives in the template, which may be gone too once the renderer is: only the name is
    // read before the renderer is known to be alive.
    std::weak_ptr<Renderer*> alive = alive_;
    return Value::Func([alive, &def, name = def.set_name,
                        scope = std::move(scope)](const CallArgs& a) -> Result<Value> {
      std::shared_ptr<Renderer*> self = alive.lock();
      if (!self) {
        return Status::InvalidArgument(
            StrFormat("macro '%s' called after its template finished rendering", name.c_str()));
      }
      return (*self)->CallMacro(def, scope, a);
    });
  }

  // jinja2's Macro.__call__: positional arguments first, then keywords for the parameters left;
  // a missing one takes its default (evaluated in the macro's scope, so it may use the
  // parameters before it) or is undefined. Extra arguments are an error unless the body reads
  // varargs / kwargs. Errors without a line are given the call's line by the caller.
  [[gnu::noinline]] Result<Value> CallMacro(const Node& def,
                                            const std::vector<std::weak_ptr<Frame>>& scope,
                                            const CallArgs& a) {
    const char* name = def.set_name.c_str();
    const size_t n_params = def.targets.size();
    const size_t n_positional = std::min(a.positional.size(), n_params);
    std::vector<bool> taken(a.keyword.size(), false);
    auto frame = std::make_shared<Frame>();
    std::vector<size_t> missing;
    for (size_t i = 0; i < n_params; ++i) {
      const std::string& param = def.targets[i];
      if (i < n_positional) {
        frame->emplace_back(param, a.positional[i]);
        continue;
      }
      size_t k = 0;
      while (k < a.keyword.size() && (taken[k] || a.keyword[k].first != param)) ++k;
      if (k < a.keyword.size()) {
        taken[k] = true;
        frame->emplace_back(param, a.keyword[k].second);
      } else {
        frame->emplace_back(param, Value());
        missing.push_back(i);
      }
    }
    Value kwargs = Value::Dict();
    for (size_t k = 0; k < a.keyword.size(); ++k) {
      if (taken[k]) continue;
      if (!def.uses_kwargs) {
        return Status::InvalidArgument(StrFormat("macro '%s' takes no keyword argument '%s'", name,
                                                 a.keyword[k].first.c_str()));
      }
      kwargs.Set(a.keyword[k].first, a.keyword[k].second);
    }
    if (a.positional.size() > n_params && !def.uses_varargs) {
      return Status::InvalidArgument(
          StrFormat("macro '%s' takes not more than %zu argument(s)", name, n_params));
    }
    if (def.uses_kwargs) frame->emplace_back("kwargs", kwargs);
    if (def.uses_varargs) {
      ValueList extra;
      for (size_t i = n_params; i < a.positional.size(); ++i) extra.push_back(a.positional[i]);
      frame->emplace_back("varargs", Value::Tuple(std::move(extra)));
    }
    if (macro_depth_ >= kMaxMacroDepth) {
      return Error(def.line, StrFormat("macro '%s': more than %d macro calls nested (a recursion "
                                       "without an end?)",
                                       name, kMaxMacroDepth));
    }
    // Every call counts against the loop budget: a macro calling itself twice per level would
    // otherwise run 2^depth times.
    if (++iterations_ > kMaxIterations) {
      return Error(def.line, "more than 2^18 loop iterations and macro calls: refusing to go on");
    }
    Scope caller_frames = std::move(frames_);
    frames_.clear();
    for (const std::weak_ptr<Frame>& f : scope) {
      if (std::shared_ptr<Frame> live = f.lock()) frames_.push_back(std::move(live));
    }
    frames_.push_back(frame);
    ++macro_depth_;
    Result<std::string> text = BindDefaultsAndRender(def, missing, frame.get());
    --macro_depth_;
    frames_ = std::move(caller_frames);
    flow_ = Flow::kNormal;
    if (!text.ok()) return text.status();
    return Value::String(std::move(*text));
  }

  Result<std::string> BindDefaultsAndRender(const Node& def, const std::vector<size_t>& missing,
                                            Frame* frame) {
    for (size_t i : missing) {
      if (!def.defaults[i]) continue;
      WEIR_ASSIGN_OR_RETURN(Value v, Eval(*def.defaults[i]));
      (*frame)[i].second = std::move(v);
    }
    return Capture(def.bodies[0]);
  }

  Result<ValueList> Iterate(const Value& v, int line) {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
      case Value::Kind::kNone:
        if (v.is_none()) return Error(line, "'NoneType' object is not iterable");
        return ValueList{};
      case Value::Kind::kList:
        WEIR_RETURN_IF_ERROR(ChargeItems(v.list().size(), line));
        return v.list();
      case Value::Kind::kDict: {
        WEIR_RETURN_IF_ERROR(ChargeItems(v.dict().size(), line));
        ValueList keys;
        for (const auto& [k, _] : v.dict()) keys.push_back(Value::String(k));
        return keys;
      }
      case Value::Kind::kString: {
        const std::string& s = v.str();
        WEIR_RETURN_IF_ERROR(ChargeWalk(s, line));
        if (static_cast<int64_t>(CountChars(s)) > kMaxRange) {
          return Error(line, "iterating over a string of more than 2^20 characters");
        }
        WEIR_RETURN_IF_ERROR(ChargeItems(CountChars(s), line));
        ValueList chars;
        for (size_t i = 0; i < s.size(); i += CharBytes(s, i)) {
          chars.push_back(Value::String(s.substr(i, CharBytes(s, i))));
        }
        return chars;
      }
      default:
        return Error(line, StrFormat("'%s' object is not iterable", v.TypeName()));
    }
  }

  Status BindTargets(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      SetVar(n.targets[0], item);
      return Status::Ok();
    }
    if (!item.is_list() || item.list().size() != n.targets.size()) {
      return Error(n.line, StrFormat("cannot unpack %s into %zu loop variables", item.TypeName(),
                                     n.targets.size()));
    }
    for (size_t i = 0; i < n.targets.size(); ++i) SetVar(n.targets[i], item.list()[i]);
    return Status::Ok();
  }

  [[gnu::noinline]] Status ExecFor(const Node& n) {
    WEIR_ASSIGN_OR_RETURN(Value seq, Eval(*n.expr));
    WEIR_ASSIGN_OR_RETURN(ValueList all, Iterate(seq, n.line));
    ValueList items;
    if (n.filter) {
      for (const Value& item : all) {
        frames_.push_back(std::make_shared<Frame>());
        Status st = BindTargets(n, item);
        Result<Value> keep = st.ok() ? Eval(*n.filter) : Result<Value>(st);
        frames_.pop_back();
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) items.push_back(item);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) return Exec(n.bodies[1]);
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      if (++iterations_ > kMaxIterations) {
        return Error(n.line, "more than 2^18 loop iterations: refusing to go on");
      }
      frames_.push_back(std::make_shared<Frame>());
      Value loop = Value::Dict();
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(len - i));
      loop.Set("revindex0", Value::Int(len - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == len - 1));
      loop.Set("length", Value::Int(len));
      loop.Set("previtem", i > 0 ? items[i - 1] : Value());
      loop.Set("nextitem", i + 1 < len ? items[i + 1] : Value());
      loop.Set("cycle", Value::Func([i](const CallArgs& a) -> Result<Value> {
                 if (a.positional.empty()) return Value();
                 return a.positional[static_cast<size_t>(i) % a.positional.size()];
               }));
      SetVar("loop", loop);
      Status st = BindTargets(n, items[i]);
      if (st.ok()) st = Exec(n.bodies[0]);
      frames_.pop_back();
      WEIR_RETURN_IF_ERROR(st);
      if (flow_ == Flow::kBreak) {
        flow_ = Flow::kNormal;
        break;
      }
      flow_ = Flow::kNormal;
    }
    return Status::Ok();
  }

  Result<CallArgs> EvalArgs(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) {
      WEIR_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
      a.positional.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.kwargs) {
      WEIR_ASSIGN_OR_RETURN(Value v, Eval(*x));
      a.keyword.emplace_back(k, std::move(v));
    }
    return a;
  }

  Result<Value> Eval(const Expr& e) {
    if (++nesting_ > kMaxNesting) return NestingError(e.line);
    Result<Value> v = EvalInner(e);
    --nesting_;
    // A value computed is charged by its size; one only looked up or chosen is not (the same
    // message list read in every iteration would make a long conversation cost n^2).
    const bool looked_up = e.type == Expr::Type::kLiteral || e.type == Expr::Type::kName ||
                           e.type == Expr::Type::kCond || e.type == Expr::Type::kAttr ||
                           e.type == Expr::Type::kIndex;
    if (v.ok()) WEIR_RETURN_IF_ERROR(Charge(1 + (looked_up ? 0 : Size(*v)), e.line));
    return v;
  }

  // The work bound (kMaxWork): what the renderer does is charged in bytes of strings and items of
  // lists and dicts (a few bytes' worth each) produced, scanned or compared.
  static int64_t Size(const Value& v) {
    if (v.is_string()) return static_cast<int64_t>(v.str().size());
    if (v.is_list()) return kBytesPerItem * static_cast<int64_t>(v.list().size());
    if (v.is_dict()) return kBytesPerItem * static_cast<int64_t>(v.dict().size());
    return 0;
  }
  Status Charge(int64_t units, int line) {
    work_ += units;
    if (work_ <= kMaxWork) return Status::Ok();
    return Error(line, "more than 2^26 bytes of strings and lists handled: refusing to go on");
  }
  Status ChargeItems(size_t n, int line) {
    return Charge(kBytesPerItem * static_cast<int64_t>(n), line);
  }
  // A string walked a character or a byte at a time (length, indexing, case, strip): a few
  // times the bytes of a copy.
  static constexpr int64_t kWalkCost = 8;
  Status ChargeWalk(const std::string& s, int line) {
    return Charge(kWalkCost * static_cast<int64_t>(s.size()), line);
  }
  // A value's depth and namespace marks, for what may be stored in a namespace.
  static Status CheckStorable(const ValueDict& attrs) {
    for (const auto& [k, v] : attrs) {
      if (v.holds_namespace()) {
        return Status::InvalidArgument(StrFormat(
            "chat template: namespace attribute '%s' holds a namespace (weir keeps namespaces "
            "apart)",
            k.c_str()));
      }
      if (v.depth() >= kMaxValueDepth) {
        return Status::InvalidArgument(
            StrFormat("chat template: namespace attribute '%s' nests lists or dicts more than %d "
                      "deep",
                      k.c_str(), kMaxValueDepth));
      }
    }
    return Status::Ok();
  }
  // Each kind of expression has its own function, kept out of line: a renderer recursion level
  // then costs one small frame instead of the sum of every case's locals (which sanitizer builds
  // do not overlap), and kMaxNesting levels fit a thread's stack with room to spare.
  Result<Value> EvalInner(const Expr& e) {
    switch (e.type) {
      case Expr::Type::kLiteral:
        return e.literal;
      case Expr::Type::kName:
        return Lookup(e.name);
      case Expr::Type::kList:
        return EvalList(e);
      case Expr::Type::kDict:
        return EvalDict(e);
      case Expr::Type::kAttr:
      case Expr::Type::kIndex:
        return EvalAttrOrIndex(e);
      case Expr::Type::kSlice:
        return EvalSlice(e);
      case Expr::Type::kCall:
        return EvalCall(e);
      case Expr::Type::kFilter:
      case Expr::Type::kTest:
        return EvalFilterOrTest(e);
      case Expr::Type::kUnary:
        return EvalUnary(e);
      case Expr::Type::kCond:
        return EvalCond(e);
      case Expr::Type::kBinary:
        return Binary(e);
    }
    return Value();
  }

  [[gnu::noinline]] Result<Value> EvalList(const Expr& e) {
    ValueList items;
    for (const auto& x : e.args) {
      WEIR_ASSIGN_OR_RETURN(Value v, Eval(*x));
      items.push_back(std::move(v));
    }
    return e.negate ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
  }

  [[gnu::noinline]] Result<Value> EvalDict(const Expr& e) {
    Value d = Value::Dict();
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      WEIR_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i]));
      WEIR_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
      if (!k.is_string()) return Error(e.line, "dict keys must be strings");
      d.Set(k.str(), std::move(v));
    }
    return d;
  }

  [[gnu::noinline]] Result<Value> EvalAttrOrIndex(const Expr& e) {
    WEIR_ASSIGN_OR_RETURN(Value base, Eval(*e.args[0]));
    if (e.type == Expr::Type::kAttr) return Attribute(base, e.name);
    WEIR_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
    return Index(base, key, e.line);
  }

  [[gnu::noinline]] Result<Value> EvalSlice(const Expr& e) {
    WEIR_ASSIGN_OR_RETURN(Value base, Eval(*e.args[0]));
    Value parts[3];
    for (int i = 0; i < 3; ++i) {
      if (e.args[i + 1]) {
        WEIR_ASSIGN_OR_RETURN(parts[i], Eval(*e.args[i + 1]));
      }
    }
    if (base.is_list()) {
      WEIR_RETURN_IF_ERROR(ChargeItems(base.list().size(), e.line));
      ValueList out;
      ForEachSliceIndex(base.list().size(), parts[0], parts[1], parts[2],
                        [&](size_t i) { out.push_back(base.list()[i]); });
      return Value::List(std::move(out));
    }
    if (base.is_string()) {
      const std::string& s = base.str();
      WEIR_RETURN_IF_ERROR(ChargeWalk(s, e.line));
      const std::vector<uint32_t> starts = CharStarts(s);
      std::string out;
      ForEachSliceIndex(starts.size() - 1, parts[0], parts[1], parts[2],
                        [&](size_t i) { out.append(s, starts[i], starts[i + 1] - starts[i]); });
      return Value::String(std::move(out));
    }
    return Error(e.line, StrFormat("cannot slice %s", base.TypeName()));
  }

  [[gnu::noinline]] Result<Value> EvalCall(const Expr& e) {
    WEIR_ASSIGN_OR_RETURN(Value f, Eval(*e.args[0]));
    if (f.is_undefined() && e.args[0]->type == Expr::Type::kName && e.args[0]->name == "caller") {
      return Error(e.line, "caller() needs a {% call %} block, which weir does not support");
    }
    if (!f.is_function()) {
      return Error(e.line, StrFormat("%s is not callable (unknown function or method?)",
                                     f.is_undefined() ? "an undefined value" : f.TypeName()));
    }
    WEIR_ASSIGN_OR_RETURN(CallArgs a, EvalArgs(e, 1));
    Result<Value> r = f.func()(a);
    if (!r.ok() && r.status().message().rfind("chat template", 0) != 0) {
      return Error(e.line, r.status().message());
    }
    // A macro's error already names its line inside the macro; a recursion would repeat it.
    if (!r.ok() && r.status().message().rfind("chat template line", 0) != 0) {
      return r.status().WithContext(StrFormat("line %d", e.line));
    }
    return r;
  }

  [[gnu::noinline]] Result<Value> EvalFilterOrTest(const Expr& e) {
    WEIR_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
    WEIR_ASSIGN_OR_RETURN(CallArgs a, EvalArgs(e, 1));
    if (e.type == Expr::Type::kFilter) return Filter(e.name, v, a, e.line);
    WEIR_ASSIGN_OR_RETURN(bool r, Test(e.name, v, a, e.line));
    return Value::Bool(r != e.negate);
  }

  [[gnu::noinline]] Result<Value> EvalUnary(const Expr& e) {
    WEIR_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
    if (e.name == "not") return Value::Bool(!v.Truthy());
    if (!v.is_number())
      return Error(e.line, StrFormat("bad operand %s for unary %s", v.TypeName(), e.name.c_str()));
    if (e.name == "+") return v;
    if (v.kind() == Value::Kind::kFloat) return Value::Float(-v.as_float());
    if (v.as_int() == std::numeric_limits<int64_t>::min()) return IntOverflow(e.line);
    return Value::Int(-v.as_int());
  }

  [[gnu::noinline]] Result<Value> EvalCond(const Expr& e) {
    WEIR_ASSIGN_OR_RETURN(Value c, Eval(*e.args[0]));
    if (c.Truthy()) return Eval(*e.args[1]);
    if (e.args[2]) return Eval(*e.args[2]);
    return Value();
  }

  [[gnu::noinline]] Result<Value> Binary(const Expr& e) {
    const std::string& op = e.name;
    WEIR_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
    if (op == "and") return a.Truthy() ? Eval(*e.args[1]) : Result<Value>(a);
    if (op == "or") return a.Truthy() ? Result<Value>(a) : Eval(*e.args[1]);
    WEIR_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
    if (op == "~") {
      WEIR_ASSIGN_OR_RETURN(std::string x, Text(a, e.line));
      WEIR_ASSIGN_OR_RETURN(std::string y, Text(b, e.line));
      if (x.size() + y.size() > kMaxStringBytes) return Error(e.line, TooLong("'~'"));
      return Value::String(x + y);
    }
    if (op == "==" || op == "!=") {
      WEIR_RETURN_IF_ERROR(ChargeCompare(a, b, e.line));
      return Value::Bool(a.Equals(b) == (op == "=="));
    }
    if (op == "in" || op == "not in") {
      WEIR_ASSIGN_OR_RETURN(bool in, Contains(b, a, e.line));
      return Value::Bool(in == (op == "in"));
    }
    auto type_error = [&]() {
      return Error(e.line, StrFormat("unsupported operand types for %s: '%s' and '%s'", op.c_str(),
                                     a.TypeName(), b.TypeName()));
    };
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.is_number() && b.is_number()) {
        double x = a.as_float(), y = b.as_float();
        cmp = x < y ? -1 : x > y ? 1 : 0;
      } else if (a.is_string() && b.is_string()) {
        WEIR_RETURN_IF_ERROR(Charge(Size(a) + Size(b), e.line));
        cmp = a.str().compare(b.str());
      } else {
        return type_error();
      }
      bool r = op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0;
      return Value::Bool(r);
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        if (a.str().size() + b.str().size() > kMaxStringBytes) {
          return Error(e.line, TooLong("'+'"));
        }
        return Value::String(a.str() + b.str());
      }
      if (a.is_list() && b.is_list()) {
        if (static_cast<int64_t>(a.list().size() + b.list().size()) > kMaxRange) {
          return Error(e.line, "'+' would make a list longer than 2^20 items");
        }
        ValueList items = a.list();
        items.insert(items.end(), b.list().begin(), b.list().end());
        return Value::List(std::move(items));
      }
    }
    if (op == "*" && ((a.is_string() && b.kind() == Value::Kind::kInt) ||
                      (b.is_string() && a.kind() == Value::Kind::kInt))) {
      const std::string& s = a.is_string() ? a.str() : b.str();
      int64_t n = a.is_string() ? b.as_int() : a.as_int();
      if (n > 0 && !s.empty() && static_cast<uint64_t>(n) > kMaxStringBytes / s.size()) {
        return Error(e.line, TooLong("'*'"));
      }
      std::string out;
      if (n > 0) {  // by doubling: a byte at a time is slow for n in the millions
        const size_t total = static_cast<size_t>(n) * s.size();
        out.reserve(total);
        out = s;
        while (out.size() * 2 <= total) out += out;
        out.append(out, 0, total - out.size());
      }
      return Value::String(std::move(out));
    }
    if (!a.is_number() || !b.is_number()) return type_error();
    const bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
    if (op == "/") {
      if (b.as_float() == 0) return Error(e.line, "division by zero");
      return Value::Float(a.as_float() / b.as_float());
    }
    if (op == "//" || op == "%") {
      if (b.as_float() == 0) return Error(e.line, "division by zero");
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (x == std::numeric_limits<int64_t>::min() && y == -1) return IntOverflow(e.line);
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // floor division
        return op == "//" ? Value::Int(q) : Value::Int(x - q * y);
      }
      double q = std::floor(a.as_float() / b.as_float());
      return op == "//" ? Value::Float(q) : Value::Float(a.as_float() - q * b.as_float());
    }
    if (op == "**") {
      if (ints && b.as_int() >= 0) {
        const int64_t x = a.as_int(), n = b.as_int();
        if (x == 0 || x == 1) return Value::Int(n == 0 ? 1 : x);
        if (x == -1) return Value::Int(n % 2 == 0 ? 1 : -1);
        int64_t r = 1;  // |x| >= 2: past the int64 range within 63 steps
        for (int64_t i = 0; i < n; ++i) {
          if (__builtin_mul_overflow(r, x, &r)) return IntOverflow(e.line);
        }
        return Value::Int(r);
      }
      return Value::Float(std::pow(a.as_float(), b.as_float()));
    }
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int(), r;
      const bool over = op == "+"   ? __builtin_add_overflow(x, y, &r)
                        : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                    : __builtin_mul_overflow(x, y, &r);
      if (over) return IntOverflow(e.line);
      return Value::Int(r);
    }
    double x = a.as_float(), y = b.as_float();
    return Value::Float(op == "+" ? x + y : op == "-" ? x - y : x * y);
  }

  // Python's ints have no range; weir's are int64 and refuse to overflow.
  static Status IntOverflow(int line) {
    return Error(line, "integer overflow (weir's integers are 64-bit)");
  }

  Result<bool> Contains(const Value& container, const Value& item, int line) {
    WEIR_RETURN_IF_ERROR(ChargeCompare(container, item, line));
    if (container.is_string()) {
      if (!item.is_string()) return Error(line, "'in <string>' requires a string on the left");
      return Find(container.str(), item.str()) != std::string::npos;
    }
    if (container.is_list()) {
      for (const Value& v : container.list()) {
        if (v.Equals(item)) return true;
      }
      return false;
    }
    if (container.is_dict()) return item.is_string() && container.Find(item.str()) != nullptr;
    if (container.is_undefined()) return false;
    return Error(line, StrFormat("argument of type '%s' is not iterable", container.TypeName()));
  }

  Result<Value> Index(const Value& base, const Value& key, int line) {
    if (base.is_dict()) {
      if (!key.is_string()) return Value();
      const Value* v = base.Find(key.str());
      return v ? *v : Attribute(base, key.str());
    }
    if (base.is_list() && key.kind() == Value::Kind::kInt) {
      size_t i;
      return NormIndex(key.as_int(), base.list().size(), &i) ? base.list()[i] : Value();
    }
    if (base.is_string() && key.kind() == Value::Kind::kInt) {
      const std::string& s = base.str();
      WEIR_RETURN_IF_ERROR(ChargeWalk(s, line));
      size_t i;
      if (!NormIndex(key.as_int(), CountChars(s), &i)) return Value();
      size_t at = 0;
      for (; i > 0; --i) at += CharBytes(s, at);
      return Value::String(s.substr(at, CharBytes(s, at)));
    }
    if (base.is_undefined()) return Value();
    if (key.is_string()) return Attribute(base, key.str());
    return Error(line, StrFormat("cannot index %s with %s", base.TypeName(), key.TypeName()));
  }

  // Methods of strings, dicts and lists, bound to their object. A dict's methods hold the dict,
  // so they hold a namespace when it is one (see Assign).
  Value Attribute(const Value& base, const std::string& name) {
    if (base.is_dict()) {
      if (const Value* v = base.Find(name)) return *v;
      const bool ns = base.holds_namespace();
      if (name == "items") {
        return Value::Func(ns, [base](const CallArgs&) -> Result<Value> {
          ValueList items;
          for (const auto& [k, v] : base.dict())
            items.push_back(Value::Tuple({Value::String(k), v}));
          return Value::List(std::move(items));
        });
      }
      if (name == "keys" || name == "values") {
        const bool keys = name == "keys";
        return Value::Func(ns, [base, keys](const CallArgs&) -> Result<Value> {
          ValueList items;
          for (const auto& [k, v] : base.dict()) items.push_back(keys ? Value::String(k) : v);
          return Value::List(std::move(items));
        });
      }
      if (name == "get") {
        return Value::Func(ns, [base](const CallArgs& a) -> Result<Value> {
          const Value* key = Arg(a, 0);
          const Value* v = key && key->is_string() ? base.Find(key->str()) : nullptr;
          if (v) return *v;
          const Value* dflt = Arg(a, 1);
          return dflt ? *dflt : Value::None();
        });
      }
      return Value();
    }
    if (base.is_string()) {
      // The method holds a copy of the string, and most walk it a byte at a time: charged here,
      // where its size is known (a method call has no line; an excess shows as an error at the
      // next charge). count, find, replace and startswith copy and search.
      const bool walks = name != "count" && name != "find" && name != "replace" &&
                         name != "startswith" && name != "endswith";
      work_ += (walks ? kWalkCost : 1) * static_cast<int64_t>(base.str().size());
      const std::string s = base.str();
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const bool l = name != "rstrip", r = name != "lstrip";
        return Value::Func([s, l, r](const CallArgs& a) -> Result<Value> {
          return Value::String(Strip(s, Arg(a, 0), l, r));
        });
      }
      if (name == "upper")
        return Value::Func(
            [s](const CallArgs&) -> Result<Value> { return Value::String(Upper(s)); });
      if (name == "lower")
        return Value::Func(
            [s](const CallArgs&) -> Result<Value> { return Value::String(Lower(s)); });
      if (name == "title")
        return Value::Func(
            [s](const CallArgs&) -> Result<Value> { return Value::String(Title(s)); });
      if (name == "capitalize") {
        return Value::Func(
            [s](const CallArgs&) -> Result<Value> { return Value::String(Capitalize(s)); });
      }
      if (name == "startswith" || name == "endswith") {
        const bool starts = name == "startswith";
        return Value::Func([s, starts](const CallArgs& a) -> Result<Value> {
          const Value* x = Arg(a, 0);
          if (!x) return Status::InvalidArgument("startswith/endswith need an argument");
          ValueList options = x->is_list() ? x->list() : ValueList{*x};
          for (const Value& o : options) {
            if (!o.is_string()) return Status::InvalidArgument("startswith/endswith need strings");
            const std::string& p = o.str();
            bool hit =
                p.size() <= s.size() && (starts ? s.compare(0, p.size(), p) == 0
                                                : s.compare(s.size() - p.size(), p.size(), p) == 0);
            if (hit) return Value::Bool(true);
          }
          return Value::Bool(false);
        });
      }
      if (name == "split") {
        return Value::Func([s](const CallArgs& a) -> Result<Value> {
          const Value* sep = Arg(a, 0, "sep");
          const Value* maxsplit = Arg(a, 1, "maxsplit");
          int64_t limit = maxsplit && maxsplit->is_number() ? maxsplit->as_int() : -1;
          ValueList parts;
          if (!sep || sep->is_none()) {  // runs of white space, none at the ends
            size_t i = 0;
            while (i < s.size()) {
              while (i < s.size() && IsPySpace(s[i])) ++i;
              if (i >= s.size()) break;
              if (limit >= 0 && static_cast<int64_t>(parts.size()) == limit) {
                parts.push_back(Value::String(Strip(s.substr(i), nullptr, false, true)));
                break;
              }
              size_t j = i;
              while (j < s.size() && !IsPySpace(s[j])) ++j;
              if (static_cast<int64_t>(parts.size()) >= kMaxRange) return TooManyParts();
              parts.push_back(Value::String(s.substr(i, j - i)));
              i = j;
            }
            return Value::List(std::move(parts));
          }
          if (!sep->is_string() || sep->str().empty()) {
            return Status::InvalidArgument("split needs a non-empty string separator");
          }
          size_t pos = 0;
          while (limit < 0 || static_cast<int64_t>(parts.size()) < limit) {
            size_t hit = Find(s, sep->str(), pos);
            if (hit == std::string::npos) break;
            if (static_cast<int64_t>(parts.size()) >= kMaxRange) return TooManyParts();
            parts.push_back(Value::String(s.substr(pos, hit - pos)));
            pos = hit + sep->str().size();
          }
          parts.push_back(Value::String(s.substr(pos)));
          return Value::List(std::move(parts));
        });
      }
      if (name == "replace") {
        return Value::Func([s](const CallArgs& a) -> Result<Value> {
          const Value* from = Arg(a, 0);
          const Value* to = Arg(a, 1);
          const Value* count = Arg(a, 2);
          if (!from || !to || !from->is_string() || !to->is_string()) {
            return Status::InvalidArgument("replace needs two strings");
          }
          WEIR_ASSIGN_OR_RETURN(std::string r,
                                Replace(s, from->str(), to->str(), count ? count->as_int() : -1));
          return Value::String(std::move(r));
        });
      }
      if (name == "count" || name == "find") {
        const bool count = name == "count";
        return Value::Func([s, count](const CallArgs& a) -> Result<Value> {
          const Value* x = Arg(a, 0);
          if (!x || !x->is_string()) return Status::InvalidArgument("count/find need a string");
          if (!count) {
            size_t hit = Find(s, x->str());
            return Value::Int(hit == std::string::npos ? -1 : static_cast<int64_t>(hit));
          }
          if (x->str().empty()) return Value::Int(static_cast<int64_t>(CountChars(s)) + 1);
          int64_t n = 0;
          for (size_t p = Find(s, x->str()); p != std::string::npos;
               p = Find(s, x->str(), p + x->str().size()))
            ++n;
          return Value::Int(n);
        });
      }
      return Value();
    }
    return Value();
  }

  Result<Value> Filter(const std::string& name, const Value& v, const CallArgs& a, int line) {
    auto need_string = [&]() -> Status {
      if (v.is_string()) return Status::Ok();
      return Error(line,
                   StrFormat("filter '%s' needs a string, got %s", name.c_str(), v.TypeName()));
    };
    // Filters that walk a string byte by byte.
    if ((name == "trim" || name == "upper" || name == "lower" || name == "capitalize" ||
         name == "title") &&
        v.is_string()) {
      WEIR_RETURN_IF_ERROR(ChargeWalk(v.str(), line));
    }
    if (name == "trim") {
      WEIR_RETURN_IF_ERROR(need_string());
      return Value::String(Strip(v.str(), Arg(a, 0, "chars"), true, true));
    }
    if (name == "length" || name == "count") {
      if (v.is_string()) {
        WEIR_RETURN_IF_ERROR(ChargeWalk(v.str(), line));
        return Value::Int(static_cast<int64_t>(CountChars(v.str())));
      }
      if (v.is_list()) return Value::Int(static_cast<int64_t>(v.list().size()));
      if (v.is_dict()) return Value::Int(static_cast<int64_t>(v.dict().size()));
      if (v.is_undefined()) return Value::Int(0);
      return Error(line, StrFormat("object of type '%s' has no len()", v.TypeName()));
    }
    if (name == "tojson") {
      const Value* indent = Arg(a, 0, "indent");
      const int64_t width =
          indent && indent->is_number() ? std::clamp<int64_t>(indent->as_int(), -1, 1 << 20) : -1;
      const int64_t left = std::max<int64_t>(kMaxWork - work_, 0) / kWalkCost + 1;
      WEIR_RETURN_IF_ERROR(Charge(kWalkCost * TextBytes(v, left), line));
      auto json = v.ToJson(static_cast<int>(width));
      if (!json.ok()) return Error(line, json.status().message());
      return Value::String(*json);
    }
    if (name == "string") {
      WEIR_ASSIGN_OR_RETURN(std::string text, Text(v, line));
      return Value::String(std::move(text));
    }
    if (name == "safe") return v;
    if (name == "upper") {
      WEIR_RETURN_IF_ERROR(need_string());
      return Value::String(Upper(v.str()));
    }
    if (name == "lower") {
      WEIR_RETURN_IF_ERROR(need_string());
      return Value::String(Lower(v.str()));
    }
    if (name == "capitalize") {
      WEIR_RETURN_IF_ERROR(need_string());
      return Value::String(Capitalize(v.str()));
    }
    if (name == "title") {
      WEIR_RETURN_IF_ERROR(need_string());
      return Value::String(Title(v.str()));
    }
    if (name == "replace") {
      WEIR_RETURN_IF_ERROR(need_string());
      const Value* from = Arg(a, 0);
      const Value* to = Arg(a, 1);
      if (!from || !to || !from->is_string() || !to->is_string()) {
        return Error(line, "filter 'replace' needs two strings");
      }
      const Value* count = Arg(a, 2);
      auto r = Replace(v.str(), from->str(), to->str(), count ? count->as_int() : -1);
      if (!r.ok()) return Error(line, r.status().message());
      return Value::String(std::move(*r));
    }
    if (name == "first" || name == "last") {
      WEIR_ASSIGN_OR_RETURN(ValueList items, Iterate(v, line));
      if (items.empty()) return Value();
      return name == "first" ? items.front() : items.back();
    }
    if (name == "default" || name == "d") {
      const Value* dflt = Arg(a, 0);
      const Value* boolean = Arg(a, 1, "boolean");
      bool use = v.is_undefined() || (boolean && boolean->Truthy() && !v.Truthy());
      return use ? (dflt ? *dflt : Value::String("")) : v;
    }
    if (name == "join") {
      const Value* sep = Arg(a, 0, "d");
      const Value* attr = Arg(a, 1, "attribute");
      WEIR_ASSIGN_OR_RETURN(ValueList items, Iterate(v, line));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i && sep) out += sep->ToString();
        WEIR_ASSIGN_OR_RETURN(std::string item,
                              Text(attr ? Attribute(items[i], attr->ToString()) : items[i], line));
        out += item;
        if (out.size() > kMaxStringBytes) return Error(line, TooLong("join()"));
      }
      return Value::String(std::move(out));
    }
    if (name == "int") {
      if (v.is_number()) return Value::Int(v.as_int());
      if (v.is_string()) {
        char* end = nullptr;
        long long x = std::strtoll(v.str().c_str(), &end, 10);
        return Value::Int(end && *end == 0 && !v.str().empty() ? x : 0);
      }
      return Value::Int(0);
    }
    if (name == "float") {
      if (v.is_number()) return Value::Float(v.as_float());
      if (v.is_string()) return Value::Float(std::strtod(v.str().c_str(), nullptr));
      return Value::Float(0);
    }
    if (name == "abs") {
      if (!v.is_number()) return Error(line, "filter 'abs' needs a number");
      if (v.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(v.as_float()));
      if (v.as_int() == std::numeric_limits<int64_t>::min()) return IntOverflow(line);
      return Value::Int(std::llabs(v.as_int()));
    }
    if (name == "round") {
      const Value* prec = Arg(a, 0, "precision");
      double scale = std::pow(10.0, prec ? static_cast<double>(prec->as_int()) : 0.0);
      return Value::Float(std::nearbyint(v.as_float() * scale) / scale);
    }
    if (name == "list") {
      WEIR_ASSIGN_OR_RETURN(ValueList items, Iterate(v, line));
      return Value::List(std::move(items));
    }
    if (name == "reverse") {
      if (v.is_string()) {
        const std::string& s = v.str();
        WEIR_RETURN_IF_ERROR(ChargeWalk(s, line));
        const std::vector<uint32_t> starts = CharStarts(s);
        std::string out;
        for (size_t i = starts.size() - 1; i > 0; --i) {
          out.append(s, starts[i - 1], starts[i] - starts[i - 1]);
        }
        return Value::String(std::move(out));
      }
      WEIR_ASSIGN_OR_RETURN(ValueList items, Iterate(v, line));
      std::reverse(items.begin(), items.end());
      return Value::List(std::move(items));
    }
    if (name == "items") {
      if (!v.is_dict()) return Error(line, "filter 'items' needs a dict");
      ValueList items;
      for (const auto& [k, x] : v.dict()) items.push_back(Value::Tuple({Value::String(k), x}));
      return Value::List(std::move(items));
    }
    if (name == "dictsort") {
      if (!v.is_dict()) return Error(line, "filter 'dictsort' needs a dict");
      ValueList items;
      for (const auto& [k, x] : v.dict()) items.push_back(Value::Tuple({Value::String(k), x}));
      std::stable_sort(items.begin(), items.end(), [](const Value& x, const Value& y) {
        return Lower(x.list()[0].str()) < Lower(y.list()[0].str());
      });
      return Value::List(std::move(items));
    }
    if (name == "selectattr" || name == "rejectattr") {
      const Value* attr = Arg(a, 0);
      if (!attr || !attr->is_string())
        return Error(line, "filter '" + name + "' needs an attribute name");
      WEIR_ASSIGN_OR_RETURN(ValueList items, Iterate(v, line));
      ValueList out;
      for (const Value& item : items) {
        Value field = Attribute(item, attr->str());
        bool keep;
        if (a.positional.size() >= 2) {
          CallArgs rest;
          rest.positional.assign(a.positional.begin() + 2, a.positional.end());
          WEIR_ASSIGN_OR_RETURN(keep, Test(a.positional[1].ToString(), field, rest, line));
        } else {
          keep = field.Truthy();
        }
        if (keep == (name == "selectattr")) out.push_back(item);
      }
      return Value::List(std::move(out));
    }
    if (name == "map") {
      WEIR_ASSIGN_OR_RETURN(ValueList items, Iterate(v, line));
      ValueList out;
      const Value* attr = Arg(a, 99, "attribute");
      for (const Value& item : items) {
        if (attr) {
          Value field = Attribute(item, attr->ToString());
          const Value* dflt = Arg(a, 99, "default");
          out.push_back(field.is_undefined() && dflt ? *dflt : field);
        } else if (!a.positional.empty()) {
          CallArgs rest;
          rest.positional.assign(a.positional.begin() + 1, a.positional.end());
          WEIR_ASSIGN_OR_RETURN(Value mapped, Filter(a.positional[0].ToString(), item, rest, line));
          out.push_back(std::move(mapped));
        } else {
          return Error(line, "filter 'map' needs a filter name or attribute=");
        }
      }
      return Value::List(std::move(out));
    }
    if (name == "unique") {
      WEIR_ASSIGN_OR_RETURN(ValueList items, Iterate(v, line));
      ValueList out;
      for (const Value& item : items) {
        // n^2 comparisons at worst, each a walk of the item at most
        const int64_t left = std::max<int64_t>(kMaxWork - work_, 0) + 1;
        WEIR_RETURN_IF_ERROR(Charge(
            (kBytesPerItem + TextBytes(item, left)) * static_cast<int64_t>(out.size()), line));
        bool seen = false;
        for (const Value& o : out) seen = seen || o.Equals(item);
        if (!seen) out.push_back(item);
      }
      return Value::List(std::move(out));
    }
    if (name == "sort" || name == "min" || name == "max" || name == "sum") {
      WEIR_ASSIGN_OR_RETURN(ValueList items, Iterate(v, line));
      const Value* attr = Arg(a, 99, "attribute");
      auto key = [&](const Value& x) { return attr ? Attribute(x, attr->ToString()) : x; };
      if (name == "sum") {
        Value total = Value::Int(0);
        for (const Value& x : items) {
          Value k = key(x);
          if (!k.is_number()) return Error(line, "filter 'sum' needs numbers");
          if (total.kind() == Value::Kind::kFloat || k.kind() == Value::Kind::kFloat) {
            total = Value::Float(total.as_float() + k.as_float());
          } else {
            int64_t r;
            if (__builtin_add_overflow(total.as_int(), k.as_int(), &r)) return IntOverflow(line);
            total = Value::Int(r);
          }
        }
        return total;
      }
      bool ok = true;
      // Each comparison of strings lowers both: charged, and once over the bound the
      // comparisons stop working (stable_sort is safe with any answers) and the filter fails.
      auto less = [&](const Value& x, const Value& y) {
        if (work_ > kMaxWork) return false;
        Value kx = key(x), ky = key(y);
        if (kx.is_number() && ky.is_number()) return kx.as_float() < ky.as_float();
        if (kx.is_string() && ky.is_string()) {
          work_ += 2 * (Size(kx) + Size(ky));
          return Lower(kx.str()) < Lower(ky.str());
        }
        ok = false;
        return false;
      };
      if (name == "sort") {
        const Value* rev = Arg(a, 0, "reverse");
        std::stable_sort(items.begin(), items.end(), less);
        WEIR_RETURN_IF_ERROR(Charge(0, line));
        if (!ok) return Error(line, "filter 'sort' needs comparable items");
        if (rev && rev->Truthy()) std::reverse(items.begin(), items.end());
        return Value::List(std::move(items));
      }
      if (items.empty()) return Value();
      auto it = name == "min" ? std::min_element(items.begin(), items.end(), less)
                              : std::max_element(items.begin(), items.end(), less);
      WEIR_RETURN_IF_ERROR(Charge(0, line));
      if (!ok) return Error(line, "filter '" + name + "' needs comparable items");
      return *it;
    }
    return Error(line, StrFormat("unknown filter '%s'", name.c_str()));
  }

  Result<bool> Test(const std::string& name, const Value& v, const CallArgs& a, int line) {
    const Value* arg = Arg(a, 0);
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "number") return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kFloat;
    if (name == "integer") return v.kind() == Value::Kind::kInt;
    if (name == "float") return v.kind() == Value::Kind::kFloat;
    if (name == "boolean") return v.kind() == Value::Kind::kBool;
    if (name == "true") return v.kind() == Value::Kind::kBool && v.as_bool();
    if (name == "false") return v.kind() == Value::Kind::kBool && !v.as_bool();
    if (name == "mapping") return v.is_dict();
    if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
    if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
    if (name == "callable") return v.is_function();
    if (name == "odd" || name == "even") {
      if (v.kind() != Value::Kind::kInt) return Error(line, "test '" + name + "' needs an integer");
      return (v.as_int() % 2 != 0) == (name == "odd");
    }
    if (name == "divisibleby") {
      if (!arg || arg->as_int() == 0) return Error(line, "test 'divisibleby' needs a divisor");
      if (arg->as_int() == -1) return true;  // INT64_MIN % -1 overflows
      return v.as_int() % arg->as_int() == 0;
    }
    if (name == "lower" || name == "upper") {
      if (!v.is_string()) return false;
      return name == "lower" ? Lower(v.str()) == v.str() : Upper(v.str()) == v.str();
    }
    if (!arg)
      return Error(line, StrFormat("unknown test '%s' (or it needs an argument)", name.c_str()));
    if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
      WEIR_RETURN_IF_ERROR(ChargeCompare(v, *arg, line));
      return v.Equals(*arg) == (name[0] == 'e' || name[0] == '=');
    }
    if (name == "in") return Contains(*arg, v, line);
    if (name == "lt" || name == "gt" || name == "le" || name == "ge") {
      if (!v.is_number() || !arg->is_number())
        return Error(line, "test '" + name + "' needs numbers");
      double x = v.as_float(), y = arg->as_float();
      return name == "lt" ? x < y : name == "gt" ? x > y : name == "le" ? x <= y : x >= y;
    }
    return Error(line, StrFormat("unknown test '%s'", name.c_str()));
  }

  // Loop iterations so far, across all loops: a template is a formatter, and nested loops over
  // large ranges would otherwise keep the chat from ever starting.
  static constexpr int64_t kMaxIterations = int64_t{1} << 18;
  // Bodies being executed plus expressions being evaluated, the recursion of this renderer:
  // macros calling macros multiply the nesting the parser bounds per template (blocks 128 deep,
  // expressions 64) by the call depth. At this bound the deepest templates we built (64 macro
  // levels of 120 blocks and 60 nested lists) rendered in 1 MiB of stack in a release build and
  // in 4 MiB under ASan+UBSan (clang 14, -O2), against the usual 8 MiB.
  static constexpr int kMaxNesting = 1024;
  // What an item of a list or dict counts for in the work bound: a Value is ~100 bytes, handled
  // by reference, so a few bytes' worth.
  static constexpr int64_t kBytesPerItem = 32;
  int nesting_ = 0;
  int64_t iterations_ = 0;
  int64_t work_ = 0;
  const Value& context_;
  // What a macro value holds instead of `this`: a template can store a macro in a dict of the
  // caller's context, which outlives the render; calling it later finds the renderer gone.
  std::shared_ptr<Renderer*> alive_;
  Scope frames_;  // innermost last
  int macro_depth_ = 0;
  std::string out_;
  // Output of enclosing renderings set aside while a macro or set block renders its own.
  size_t captured_bytes_ = 0;
  Flow flow_ = Flow::kNormal;
};

}  // namespace

Result<JinjaTemplate> JinjaTemplate::Parse(std::string_view source) {
  WEIR_ASSIGN_OR_RETURN(Body body, internal::ParseTemplate(source));
  JinjaTemplate t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

Result<std::string> JinjaTemplate::Render(const Value& context) const {
  if (!context.is_dict()) return Status::InvalidArgument("chat template context must be a dict");
  Renderer r(context);
  WEIR_RETURN_IF_ERROR(r.Exec(*body_));
  return std::move(r.out());
}

}  // namespace weir::chat
