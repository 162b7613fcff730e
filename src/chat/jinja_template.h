// JinjaTemplate: renders the Jinja subset that chat templates use (jinja_parser.h lists the tags)
// the way transformers' apply_chat_template does with jinja2: trim_blocks and lstrip_blocks on,
// raise_exception(msg), namespace(...), range(...), strftime_now(fmt), tojson as
// json.dumps(ensure_ascii=False). Expressions: literals, lists, dicts, attribute and item access,
// slices with steps, calls, the string / dict methods templates call (strip, lstrip, rstrip, split,
// startswith, endswith, upper, lower, replace, title, capitalize, items, keys, values, get),
// filters (trim, length, count, tojson, string, upper, lower, capitalize, title, first, last,
// default, join, int, float, list, reverse, items, selectattr, rejectattr, map, replace, abs,
// round, safe, unique, sort, sum, min, max, dictsort), tests (defined, undefined, none, string,
// number, integer, float, mapping, iterable, sequence, boolean, true, false, odd, even,
// divisibleby, eq, ne, lt, gt, in) and Python operators with Python's results. Macros are
// jinja2's: called with positional, keyword and default arguments (varargs / kwargs when the body
// reads them), they see the scopes where they were defined as they are at the call, cannot
// assign outer variables, and return their output as a string; at most 64 calls nest. A
// construct outside the subset, or a runtime error (raise_exception, a type error, a wrong
// call), is a Status naming the template line; nothing is guessed.
//
// Thread safety: immutable after Parse; Render is const and may run on many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "chat/jinja_value.h"

namespace weir::chat {

namespace internal {
struct Node;
}

class JinjaTemplate {
 public:
  static Result<JinjaTemplate> Parse(std::string_view source);

  // Renders with the variables of `context` (a dict: messages, add_generation_prompt,
  // bos_token, ...) and the built-in functions.
  Result<std::string> Render(const Value& context) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<internal::Node>>> body_;
};

}  // namespace weir::chat
