// Value: the dynamic values a Jinja chat template computes with, modelled on the Python objects
// jinja2 uses (so that rendering matches it byte for byte): undefined, None, bool, int, float,
// str, list, dict (insertion-ordered, like Python's) and callables. Lists and dicts are shared by
// reference like Python's, which is what namespace() attribute assignment relies on.
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
  static Value List(ValueList items = {}) {
    Value v(Kind::kList);
    v.list_ = std::make_shared<ValueList>(std::move(items));
    return v;
  }
  // A Python tuple: a list that prints with parentheses (items(), dictsort, tuple literals).
  static Value Tuple(ValueList items) {
    Value v = List(std::move(items));
    v.tuple_ = true;
    return v;
  }
  static Value Dict(ValueDict items = {}) {
    Value v(Kind::kDict);
    v.dict_ = std::make_shared<ValueDict>(std::move(items));
    return v;
  }
  static Value Func(Function f) {
    Value v(Kind::kFunction);
    v.func_ = std::make_shared<Function>(std::move(f));
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

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return kind_ == Kind::kFloat ? static_cast<int64_t>(float_) : int_; }
  double as_float() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *str_; }
  ValueList& list() const { return *list_; }
  ValueDict& dict() const { return *dict_; }
  const Function& func() const { return *func_; }

  // Dict lookup (nullptr when absent or not a dict).
  const Value* Find(std::string_view key) const;
  // Inserts or replaces a dict entry.
  void Set(const std::string& key, Value v) const;

  // Python truthiness: undefined, None, False, 0, "", [] and {} are false.
  bool Truthy() const;
  // str(x) as jinja2 prints it: undefined as "", None, True/False, ints, floats as Python's
  // repr, lists and dicts as Python's repr.
  std::string ToString() const;
  // repr(x): strings quoted as Python does.
  std::string Repr() const;
  // json.dumps(x, ensure_ascii=False) with Python's default separators, or with an indent.
  Result<std::string> ToJson(int indent = -1) const;
  // Python ==.
  bool Equals(const Value& other) const;
  // A type name for messages ("str", "int", "list", ...).
  const char* TypeName() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
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
