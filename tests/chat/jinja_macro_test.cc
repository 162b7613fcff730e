// {% set %} blocks and {% macro %}s: each construct rendered by weir and by jinja2 3.1.6
// (tests/chat/jinja_oracle.py --render, configured as transformers configures it) on the same
// template and context, equal byte for byte; then the errors for what goes wrong or stays
// unsupported. The comparisons skip when Debian's python3 has no jinja2.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/jinja_template.h"
#include "testing/testing.h"

namespace weir::chat {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Paths and commands are built by appending: GCC 12 warns (-Wrestrict, a known false positive)
// on "literal" + std::string&&.
std::string TemplatePath(const std::string& dir, size_t i) {
  std::string path = dir;
  path += "/t";
  path += std::to_string(i);
  path += ".jinja";
  return path;
}

struct Rendering {
  bool ok = false;
  std::string text;  // the output, or why it failed
};

Rendering RenderWithWeir(const std::string& source, const Value& ctx) {
  auto t = JinjaTemplate::Parse(source);
  if (!t.ok()) return {false, t.status().ToString()};
  auto out = t->Render(ctx);
  if (!out.ok()) return {false, out.status().ToString()};
  return {true, *out};
}

// jinja2's renderings of `sources` with `ctx`, in one Python run; empty when jinja2 is missing.
std::vector<Rendering> RenderWithJinja2(const std::vector<std::string>& sources, const Value& ctx) {
  if (testing::RunCommand(Quote(testing::Python()) + " -c 'import jinja2'").exit_code != 0) {
    return {};
  }
  const std::string dir = testing::TempDir();
  auto json = ctx.ToJson();
  EXPECT_TRUE(json.ok()) << json.status().ToString();
  testing::WriteFile(dir + "/ctx.json", json.ok() ? *json : "{}");
  std::string cmd = Quote(testing::Python()) + " " +
                    Quote(testing::SourceDir() + "/tests/chat/jinja_oracle.py") + " --context " +
                    Quote(dir + "/ctx.json") + " --render";
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string path = TemplatePath(dir, i);
    testing::WriteFile(path, sources[i]);
    cmd += ' ';
    cmd += Quote(path);
  }
  testing::CommandResult r = testing::RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<Rendering> out;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string path = TemplatePath(dir, i);
    if (testing::FileExists(path + ".out")) {
      out.push_back({true, testing::ReadFile(path + ".out")});
    } else {
      out.push_back({false, testing::ReadFile(path + ".err")});
    }
  }
  return out;
}

// Every source renders, and weir's output equals jinja2's.
void ExpectSameAsJinja2(const std::vector<std::string>& sources, const Value& ctx) {
  std::vector<Rendering> want = RenderWithJinja2(sources, ctx);
  if (want.empty()) GTEST_SKIP() << testing::Python() << " has no jinja2 (pip install jinja2)";
  for (size_t i = 0; i < sources.size(); ++i) {
    SCOPED_TRACE(sources[i]);
    ASSERT_TRUE(want[i].ok) << "jinja2 refused: " << want[i].text;
    Rendering got = RenderWithWeir(sources[i], ctx);
    ASSERT_TRUE(got.ok) << got.text;
    EXPECT_EQ(got.text, want[i].text);
  }
}

Value Message(const char* role, const char* content) {
  return Value::Dict({{"role", Value::String(role)}, {"content", Value::String(content)}});
}

Value Conversation() {
  return Value::Dict(
      {{"messages", Value::List({Message("system", "Be brief."), Message("user", "Hi"),
                                 Message("assistant", "Hello.")})},
       {"add_generation_prompt", Value::Bool(true)}});
}

TEST(JinjaSetBlockTest, MatchesJinja2) {
  ExpectSameAsJinja2(
      {
          // The body's output is the value; its own sets stay inside it.
          "{% set x %}a{{ 1 }}b{% set y = 2 %}{% endset %}[{{ x }}][{{ y }}]",
          "{% set y = 1 %}{% set x %}{% set y = 2 %}{{ y }}{% endset %}{{ y }}{{ x }}",
          "{% set x %}{% endset %}[{{ x }}] {{ x is string }} {{ x | length }}",
          // A namespace attribute, and filters on the block.
          "{% set ns = namespace(a=1) %}{% set ns.a %}was {{ ns.a }}{% endset %}{{ ns.a }}",
          "{% set x | upper | replace('B', '-') %}abc{% endset %}{{ x }}",
          "{% set x | trim %}\n  padded  \n{% endset %}[{{ x }}]",
          // Whitespace rules, as around any block tag.
          "  {% set x %}\n  v\n  {% endset %}\n[{{ x }}]",
          "{%- set x -%}\n  v  \n{%- endset -%}\n[{{ x }}]",
          "{%+ set x +%}\n  v\n  {%+ endset %}[{{ x }}]",
          // In a loop, a block assigns in the iteration's scope.
          "{% for m in messages %}{% set line %}{{ loop.index }}:{{ m.role }}{% endset %}"
          "{{ line | length }} {% endfor %}{{ line is defined }}",
      },
      Conversation());
}

// Not about macros, but found by the comparisons above: jinja2 reads "\r\n" and "\r" as "\n" and
// drops one newline at the end of the source.
TEST(JinjaSourceTest, NewlinesMatchJinja2) {
  ExpectSameAsJinja2({"a\r\nb\rc\n", "x\n\n", "{{ 1 }}\n", "{{ 'q\r\n' }}|\r\n", ""},
                     Value::Dict());
}

TEST(JinjaMacroTest, ArgumentsMatchJinja2) {
  ExpectSameAsJinja2(
      {
          // Positional, keyword and default arguments; a missing one is undefined.
          "{% macro m(a, b='d', c=none) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}"
          "{{ m(1) }} {{ m(1, 2) }} {{ m(b=3, a=4) }} {{ m(1, c=[1]) }} [{{ m() }}]",
          // A default may use the parameters before it; it is evaluated at each call.
          "{% macro m(a, b=a * 2, c=[]) %}{{ b }}{{ c }}{% endmacro %}{{ m(3) }} {{ m(3, 1) }}",
          // A parameter shadows the template's variable even when not given.
          "{% set x = 'outer' %}{% macro m(x) %}[{{ x }}]{% endmacro %}{{ m() }}{{ m('in') }}{{ x "
          "}}",
          // Extra arguments land in varargs / kwargs when the body reads them.
          "{% macro m(a) %}{{ a }} {{ varargs }} {{ kwargs }}{% endmacro %}{{ m(1, 2, 3, z=4) }}|"
          "{{ m(0) }}",
          "{% macro tag(name) %}<{{ name }}{% for k, v in kwargs.items() %} {{ k }}=\"{{ v }}\""
          "{% endfor %}>{% endmacro %}{{ tag('a', href='x', id=2) }}{{ tag('br') }}",
          "{% macro m() %}{{ varargs | length }}{% endmacro %}{{ m() }}{{ m(1, 2) }}",
      },
      Conversation());
}

TEST(JinjaMacroTest, ScopesMatchJinja2) {
  ExpectSameAsJinja2(
      {
          // A macro reads the template's variables when it is called (jinja2 closures bind
          // late), including ones set after its definition, and the context's.
          "{% set g = 1 %}{% macro m() %}{{ g }}/{{ messages | length }}{% endmacro %}"
          "{% set g = 2 %}{{ m() }}",
          "{% macro m() %}[{{ later }}]{% endmacro %}{{ m() }}{% set later = 1 %}{{ m() }}",
          // Its scope is where it was defined, not where it is called.
          "{% macro m() %}[{{ v }}{{ loop is defined }}]{% endmacro %}"
          "{% for v in [1, 2] %}{{ m() }}{% endfor %}",
          "{% for v in [1, 2] %}{% macro m() %}[{{ v }}]{% endmacro %}{{ m() }}{% endfor %}"
          "{{ m is defined }}",
          // It cannot assign the template's variables; a namespace passed in is mutable.
          "{% set x = 1 %}{% macro m() %}{% set x = 5 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}",
          "{% macro bump(ns, by=1) %}{% set ns.n = ns.n + by %}{% endmacro %}"
          "{% set ns = namespace(n=0) %}{{ bump(ns) }}{{ bump(ns, by=5) }}{{ ns.n }}",
          "{% macro m() %}{% set q = 3 %}{% endmacro %}{{ m() }}[{{ q }}]",
          // Nested definitions, and a macro defined inside a set block.
          "{% macro outer(x) %}{% macro inner(y) %}{{ x }}+{{ y }}{% endmacro %}{{ inner(1) }}"
          "{% endmacro %}{{ outer(2) }} {{ inner is defined }}",
          "{% set t %}{% macro m() %}in{% endmacro %}{{ m() }}{% endset %}{{ t }} {{ m is defined "
          "}}",
          // Loops (and break) inside a macro called from a loop.
          "{% macro first_user(ms) %}{% for m in ms %}{% if m.role == 'user' %}{{ m.content }}"
          "{% break %}{% endif %}{% endfor %}{% endmacro %}"
          "{% for i in [1, 2] %}{{ loop.index }}{{ first_user(messages) }}{% endfor %}",
      },
      Conversation());
}

TEST(JinjaMacroTest, ResultsAndRecursionMatchJinja2) {
  ExpectSameAsJinja2(
      {
          // A call is a string in any expression.
          "{% macro m(s) %}  {{ s }}  {% endmacro %}[{{ m('a') | trim }}] {{ m('b') | length }} "
          "{{ m('c') ~ '!' }} {{ (m('d') + 'e') | upper }} {{ m('x') is string }} "
          "{{ 'a' in m('a') }} {{ m('q') == '  q  ' }}",
          "{% macro m(a) %}<{{ a }}>{% endmacro %}{% set f = m %}{{ f(1) }} {{ m is callable }}",
          "{% macro m(a) %}{% set s %}<{{ a }}>{% endset %}{{ s ~ s }}{% endmacro %}"
          "{% set t %}{{ m(1) }}{{ m(2) }}{% endset %}{{ t }}",
          // Whitespace control around macro tags.
          "{%- macro m(a) -%}\n  [{{ a }}]\n{%- endmacro -%}\n{{ m(1) }}\n",
          "{% macro m(a) %}\n  [{{ a }}]\n{% endmacro %}\n{{ m(1) }}\n",
          // Recursion, and macros calling one defined after them.
          "{% macro count(n) %}{% if n > 0 %}{{ n }},{{ count(n - 1) }}{% else %}go{% endif %}"
          "{% endmacro %}{{ count(10) }}",
          "{% macro even(n) %}{{ 'even' if n == 0 else odd(n - 1) }}{% endmacro %}"
          "{% macro odd(n) %}{{ 'odd' if n == 0 else even(n - 1) }}{% endmacro %}"
          "{{ even(7) }} {{ even(4) }}",
          "{% macro show(m) %}{{ m.role }}: {{ m.content }}{% endmacro %}"
          "{% for m in messages %}{{ show(m) }}\n{% endfor %}",
      },
      Conversation());
}

// tests/chat/templates/tool_macros.jinja (also in the Chat.Jinja2Oracle conversations) on tools
// whose schemas nest objects and arrays, so that its recursive macro goes several levels down.
TEST(JinjaMacroTest, ToolCallingTemplateMatchesJinja2) {
  auto str = [](const char* s) { return Value::String(s); };
  auto type = [&](const char* t) { return Value::Dict({{"type", str(t)}}); };
  Value address = Value::Dict(
      {{"type", str("object")},
       {"properties", Value::Dict({{"street", type("string")}, {"zip", type("integer")}})},
       {"required", Value::List({str("street")})}});
  Value params = Value::Dict(
      {{"type", str("object")},
       {"properties",
        Value::Dict({{"name", type("string")},
                     {"tags", Value::Dict({{"type", str("array")}, {"items", type("string")}})},
                     {"addresses", Value::Dict({{"type", str("array")}, {"items", address}})},
                     {"note", Value::Dict()}})},
       {"required", Value::List({str("name"), str("addresses")})}});
  Value tools =
      Value::List({Value::Dict({{"type", str("function")},
                                {"function", Value::Dict({{"name", str("add_contact")},
                                                          {"description", str("Store a contact")},
                                                          {"parameters", params}})}}),
                   Value::Dict({{"name", str("list_contacts")}})});
  Value call = Value::Dict(
      {{"type", str("function")},
       {"function",
        Value::Dict({{"name", str("add_contact")},
                     {"arguments", Value::Dict({{"name", str("Zoë \"Z\"")},
                                                {"tags", Value::List({str("a"), str("b")})},
                                                {"addresses", Value::List()}})}})}});
  Value calling = Message("assistant", "  Saving it.\n");
  calling.Set("tool_calls", Value::List({call, call}));
  Value ctx = Value::Dict(
      {{"messages", Value::List({Message("user", "Add Zoë."), calling, Message("tool", "ok"),
                                 Message("tool", "ok again"), Message("assistant", "Done.")})},
       {"tools", tools},
       {"add_generation_prompt", Value::Bool(true)}});
  const std::string source =
      testing::ReadFile(testing::SourceDir() + "/tests/chat/templates/tool_macros.jinja");
  ASSERT_FALSE(source.empty());
  ExpectSameAsJinja2({source}, ctx);
  Rendering got = RenderWithWeir(source, ctx);
  EXPECT_NE(got.text.find("add_contact({ name: string, tags?: string[], addresses: { street: "
                          "string, zip?: integer }[], note?: any })"),
            std::string::npos)
      << got.text;
}

TEST(JinjaMacroTest, ErrorsNameTheReason) {
  struct Case {
    std::string source;
    const char* needle;
    bool jinja2_refuses;  // asked of jinja2 too where it finishes quickly
  } cases[] = {
      {"{% macro m() %}x", "ends before {% endmacro %}", true},
      {"{% set x %}x", "ends before {% endset %}", true},
      {"x\n{% endmacro %}", "line 2: {% endmacro %} without an open block", true},
      {"{% set x = 1 %}x{% endset %}", "{% endset %} without an open block", true},
      {"{% macro m() %}{% endif %}{% endmacro %}", "{% endif %} without an open block", true},
      {"{% set x y %}{% endset %}", "expected '=', '|' or the end of the tag", true},
      {"{% macro m %}{% endmacro %}", "expected '('", true},
      {"{% macro m(a,) %}{% endmacro %}", "expected a name", true},
      {"{% macro m(a=1, b) %}{% endmacro %}", "without a default follows one with a default", true},
      {"{% macro m(a, a) %}{% endmacro %}", "duplicate parameter 'a'", true},
      {"{% macro m() %}{% break %}{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}",
       "'break' outside a loop", true},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
       "line 1: macro 'm' takes not more than 1 argument(s)", true},
      {"{% macro m(a) %}{% endmacro %}\n{{ m(1, z=2) }}",
       "line 2: macro 'm' takes no keyword argument 'z'", true},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}", "takes no keyword argument 'a'", true},
      // An error inside a macro names its line there.
      {"{% macro m() %}\n{{ 1 + 'a' }}\n{% endmacro %}\n{{ m() }}",
       "line 2: unsupported operand types for +: 'int' and 'str'", true},
      {"{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
       "more than 64 macro calls nested (a recursion without an end?)", true},
      // Two calls per level: the call budget ends it long before 2^40 calls.
      {"{% macro m(n) %}{% if n %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}"
       "{{ m(40) }}",
       "more than 2^18 loop iterations and macro calls", false},
      {"{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}",
       "caller() needs a {% call %} block, which weir does not support", true},
      {"{% macro m() %}x{% endmacro %}{% call m() %}y{% endcall %}",
       "the tag {% call %} is not supported", false},
  };
  std::vector<std::string> asked;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    Rendering got = RenderWithWeir(c.source, Value::Dict());
    ASSERT_FALSE(got.ok) << got.text;
    EXPECT_NE(got.text.find(c.needle), std::string::npos) << got.text;
    if (c.jinja2_refuses) asked.push_back(c.source);
  }
  std::vector<Rendering> jinja2 = RenderWithJinja2(asked, Value::Dict());
  for (size_t i = 0; i < jinja2.size(); ++i) {
    EXPECT_FALSE(jinja2[i].ok) << asked[i] << "\njinja2 rendered: " << jinja2[i].text;
  }
}

// Macros calling macros multiply the nesting the parser bounds per template; the renderer's own
// bound turns that into an error, not a stack overflow (this suite also runs under sanitizers).
TEST(JinjaMacroTest, DeepNestingThroughMacrosIsRefused) {
  std::string body;
  for (int i = 0; i < 100; ++i) body += "{% if true %}";
  body += "{% if n > 0 %}{{ " + std::string(50, '[') + "m(n - 1)" + std::string(50, ']') +
          " }}{% endif %}";
  for (int i = 0; i < 100; ++i) body += "{% endif %}";
  Rendering got =
      RenderWithWeir("{% macro m(n) %}" + body + "{% endmacro %}{{ m(60) }}", Value::Dict());
  ASSERT_FALSE(got.ok);
  EXPECT_NE(got.text.find("nested more than 1024 deep"), std::string::npos) << got.text;
}

// Hostile input, as JinjaTest.MutatedTemplatesFailCleanly does for the built-ins: prefixes and
// byte edits of the macro template render or fail with a Status, never crash or hang.
TEST(JinjaMacroTest, MutatedMacroTemplateFailsCleanly) {
  const std::string src =
      testing::ReadFile(testing::SourceDir() + "/tests/chat/templates/tool_macros.jinja");
  ASSERT_FALSE(src.empty());
  Value tools = Value::List({Value::Dict(
      {{"name", Value::String("f")},
       {"parameters",
        Value::Dict({{"type", Value::String("object")},
                     {"properties",
                      Value::Dict({{"x", Value::Dict({{"type", Value::String("array")}})}})}})}})});
  Value ctx = Value::Dict({{"messages", Value::List({Message("user", "hi"), Message("tool", "r")})},
                           {"tools", tools},
                           {"add_generation_prompt", Value::Bool(true)}});
  uint32_t state = 777;
  auto next = [&]() {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  int rendered = 0, refused = 0;
  auto attempt = [&](const std::string& source) {
    auto t = JinjaTemplate::Parse(source);
    if (t.ok() && t->Render(ctx).ok()) {
      ++rendered;
    } else {
      ++refused;
    }
  };
  for (size_t cut = 0; cut < src.size(); cut += 5) attempt(src.substr(0, cut));
  for (int trial = 0; trial < 600; ++trial) {
    std::string m = src;
    for (int k = 0; k < 3; ++k) {
      static const char kBytes[] = "{}%#-+|()[]'\".:~ \n,=ab0";
      m[next() % m.size()] = kBytes[next() % (sizeof(kBytes) - 1)];
    }
    attempt(m);
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(refused, 0);
}

// A template can store a macro in a namespace of the caller's context (only a namespace's
// attributes can be set, as in jinja2), which outlives the rendering; calling it afterwards is an
// error, not a call into a renderer that is gone.
TEST(JinjaMacroTest, MacroOutlivingItsRenderingFailsCleanly) {
  Value ctx = Value::Dict({{"holder", Value::Namespace()}});
  Rendering stored = RenderWithWeir(
      "{% macro m() %}x{% endmacro %}{% set h = holder %}{% set h.f = m %}{{ holder.f() }}", ctx);
  ASSERT_TRUE(stored.ok) << stored.text;
  EXPECT_EQ(stored.text, "x");
  Rendering later = RenderWithWeir("{{ holder.f() }}", ctx);
  ASSERT_FALSE(later.ok);
  EXPECT_NE(later.text.find("called after its template finished rendering"), std::string::npos)
      << later.text;
}

}  // namespace
}  // namespace weir::chat
