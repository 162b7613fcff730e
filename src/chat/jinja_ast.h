// The parsed form of a Jinja template (jinja_parser.h builds it, jinja_template.cc runs it):
// expressions and statements as small trees. Internal to the chat module.
//
// Thread safety: immutable after parsing.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace weir::chat::internal {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type {
    kLiteral,  // literal
    kName,     // name
    kList,     // args = items (negate: a tuple)
    kDict,     // args = key, value, key, value ...
    kAttr,     // args[0].name
    kIndex,    // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..]); negate
    kUnary,    // op args[0]: "-", "+", "not"
    kBinary,   // args[0] op args[1]: + - * / // % ** ~ == != < > <= >= in "not in" and or
    kCond,     // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Type type = Type::kLiteral;
  int line = 0;
  std::string name;  // kName, kAttr, kFilter, kTest; the operator of kUnary / kBinary
  bool negate = false;
  Value literal;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Type { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Type type = Type::kText;
  int line = 0;
  std::string text;  // kText
  ExprPtr expr;      // kOutput, kSet (value), kFor (iterable)
  // kIf: conditions[i] guards bodies[i]; a trailing body without condition is the else.
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  // kFor: loop variables, optional filter condition, body (bodies[0]) and else (bodies[1]).
  std::vector<std::string> targets;
  ExprPtr filter;
  // kSet: `set name = expr` or `set name.attr = expr` (attr non-empty).
  // kSetBlock: `set name[.attr] [| filter ...]` ... `endset`: the rendered body (bodies[0])
  // through `filters` (kFilter nodes whose args[0], the value filtered, is null).
  // kMacro: `macro set_name(targets...)` ... `endmacro`: parameters in targets, their defaults in
  // defaults (null: none), the body in bodies[0].
  std::string set_name, set_attr;
  std::vector<ExprPtr> filters;
  std::vector<ExprPtr> defaults;
  // kMacro: whether the body reads `varargs` / `kwargs`; then extra positional / keyword
  // arguments land there instead of being an error, as in jinja2.
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

}  // namespace weir::chat::internal
