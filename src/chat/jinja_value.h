// Value: the dynamic values a Jinja chat template computes with, modelled on the Python objects
// jinja2 uses (so that rendering matches it byte for byte): undefined, None, bool, int, float,
// str, list, dict (insertion-ordered, like Python's) and callables. Lists and dicts are shared by
// reference like Python's, which is what namespace() attribute assignment relies on. A namespace
// is the one value a template changes after making it; the renderer keeps namespaces out of
// namespaces, so values never form a cycle, and it bounds depth() (the nesting of lists and
// dicts) and the size of strings (kMaxStringBytes).
//
// Thread safety: a Value is not synchronized; a renderer owns its values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace weir::chat {

// The longest string a template may build, and so the longest that ToString() and ToJson() write.
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys
// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Result<Value>(const CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) {
    Value v(Kind::kBool);
    v.int_ = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Kind::kInt);
    v.int_ = i;
    return v;
  }
  static Value Float(double d) {
    Value v(Kind::kFloat);
    v.float_ = d;
    return v;
  }
  static Value String(std::string s) {
    Value v(Kind::kString);
    v.str_ = std::make_shared<std::string>(std::move(s));
    return v;
  }
  static Value List(ValueList items = {});
  // A Python tuple: a list that prints with parentheses (items(), dictsort, tuple literals).
  static Value Tuple(ValueList items) {
    Value v = List(std::move(items));
    v.tuple_ = true;
    return v;
  }
  static Value Dict(ValueDict items = {});
  // namespace(...): a dict whose attributes a template may set ({% set ns.x = ... %}).
  static Value Namespace(ValueDict items = {}) {
    Value v = Dict(std::move(items));
    v.namespace_ = true;
    v.holds_namespace_ = true;
    return v;
  }
  static Value Func(Function f) {
    Value v(Kind::kFunction);
    v.func_ = std::make_shared<Function>(std::move(f));
    return v;
  }
  // A function that holds a namespace (a method bound to one).
  static Value Func(bool holds_namespace, Function f) {
    Value v = Func(std::move(f));
    v.holds_namespace_ = holds_namespace;
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_tuple() const { return tuple_; }
  bool is_namespace() const { return namespace_; }
  // How deep lists and dicts nest in this value (0 for a scalar, 1 for a flat list). Exact for
  // values other than namespaces, which only ever hold values of bounded depth (the renderer's
  // rule), so a container made before a namespace inside it grew is off by that bound at most.
  int depth() const { return depth_; }
  // Whether this value is, or holds somewhere inside, a namespace.
  bool holds_namespace() const { return holds_namespace_; }

  bool as_bool() const { return int_ != 0; }
  // A float is truncated toward zero and saturates at the int64 range (NaN is 0): Python's ints
  // have no range, and a cast of an out-of-range double is undefined behaviour in C++.
  int64_t as_int() const { return kind_ == Kind::kFloat ? FloatToInt(float_) : int_; }
  double as_float() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *str_; }
  ValueList& list() const { return *list_; }
  ValueDict& dict() const { return *dict_; }
  const Function& func() const { return *func_; }

  // Dict lookup (nullptr when absent or not a dict).
  const Value* Find(std::string_view key) const;
  // Inserts or replaces a dict entry (and updates this handle's depth()).
  void Set(const std::string& key, Value v) const;

  // Python truthiness: undefined, None, False, 0, "", [] and {} are false.
  bool Truthy() const;
  // str(x) as jinja2 prints it: undefined as "", None, True/False, ints, floats as Python's
  // repr, lists and dicts as Python's repr. A list or dict whose text would pass kMaxStringBytes
  // is cut off just past it: callers refuse strings that long.
  std::string ToString() const;
  // repr(x): strings quoted as Python does.
  std::string Repr() const;
  // json.dumps(x, ensure_ascii=False) with Python's default separators, or with an indent
  // (at most kMaxJsonIndent); an error past kMaxStringBytes.
  static constexpr int kMaxJsonIndent = 64;
  Result<std::string> ToJson(int indent = -1) const;
  // Python ==, with Python's shortcut: a list or dict is equal to itself.
  bool Equals(const Value& other) const;
  // A type name for messages ("str", "int", "list", ...).
  const char* TypeName() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  static int64_t FloatToInt(double d);
  // The depth and namespace marks of a child, folded into this container's.
  void Adopt(const Value& child) const;

  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  bool namespace_ = false;
  mutable bool holds_namespace_ = false;  // mutable: Set() updates them on a const handle
  mutable int depth_ = 0;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<std::string> str_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Function> func_;
};

// Python's repr of a float (shortest round-trip digits, ".0" for integral values).
std::string FormatPythonFloat(double d);

}  // namespace weir::chat
