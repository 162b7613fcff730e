// Parses the Jinja subset of chat templates into jinja_ast.h trees, with the whitespace rules of
// transformers' template environment (trim_blocks and lstrip_blocks on, as apply_chat_template
// sets them) and the "-" modifiers of tags.
//
// Tags: {{ expr }}, {# comment #}, {% if %}/{% elif %}/{% else %}/{% endif %},
// {% for a[, b] in expr [if cond] %}/{% else %}/{% endfor %}, {% set x = expr %},
// {% set ns.attr = expr %}, {% set x[ | filter] %}...{% endset %} (also ns.attr),
// {% macro name(a, b=default) %}...{% endmacro %}, {% break %} and {% continue %} (inside a loop,
// as jinja2 requires). Anything else (call, block, include, import, raw, filter, with) is an
// error naming the tag and the line.
//
// Thread safety: pure function.
#pragma once

#include <string_view>

#include "base/status.h"
#include "chat/jinja_ast.h"

namespace weir::chat::internal {

Result<Body> ParseTemplate(std::string_view source);

}  // namespace weir::chat::internal
