// The renderer's bounds on hostile templates (docs/reliability.md, fuzz/chat_template_fuzz.cc):
// integers that would overflow, namespaces that would hold themselves, values nested without
// end, strings past 64 MiB and work past 2^26 bytes are each an error naming the reason, quickly;
// and real templates on a long conversation stay well inside the bounds.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "chat/builtin_templates.h"
#include "chat/jinja_template.h"
#include "testing/testing.h"

namespace weir::chat {
namespace {

Value Context(int n_messages, size_t content_bytes) {
  ValueList messages;
  for (int i = 0; i < n_messages; ++i) {
    std::string content(content_bytes, static_cast<char>('a' + i % 26));
    messages.push_back(Value::Dict({{"role", Value::String(i % 2 == 0 ? "user" : "assistant")},
                                    {"content", Value::String(std::move(content))}}));
  }
  return Value::Dict({{"messages", Value::List(std::move(messages))},
                      {"add_generation_prompt", Value::Bool(true)},
                      {"bos_token", Value::String("<s>")},
                      {"eos_token", Value::String("</s>")}});
}

struct Outcome {
  bool ok = false;
  std::string text;  // the output, or the error
  double seconds = 0;
};

Outcome Render(const std::string& source, const Value& ctx = Context(1, 5)) {
  auto t0 = std::chrono::steady_clock::now();
  Outcome o;
  auto t = JinjaTemplate::Parse(source);
  if (!t.ok()) {
    o.text = t.status().ToString();
  } else if (auto out = t->Render(ctx); out.ok()) {
    o.ok = true;
    o.text = *out;
  } else {
    o.text = out.status().ToString();
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

void ExpectRefused(const std::string& source, const std::string& reason) {
  Outcome o = Render(source);
  EXPECT_FALSE(o.ok) << source << " rendered " << o.text.substr(0, 100);
  EXPECT_NE(o.text.find(reason), std::string::npos) << source << ": " << o.text;
  EXPECT_LT(o.seconds, 5.0) << source;
}

void ExpectRendered(const std::string& source, const std::string& want) {
  Outcome o = Render(source);
  EXPECT_TRUE(o.ok) << source << ": " << o.text;
  EXPECT_EQ(o.text, want) << source;
}

// Found with the chat_template fuzz target, on inputs written to probe it (UBSan: signed overflow,
// a negation of INT64_MIN). Python's ints have no range; weir's are int64 and say so.
TEST(JinjaLimitsTest, IntegersRefuseToOverflow) {
  const std::string min = "(-9223372036854775807 - 1)";
  for (const std::string& expr :
       std::vector<std::string>{"9223372036854775807 + 1", min + " - 1", "3037000500 * 3037000500",
                                "-" + min, min + " // -1", min + " % -1", "2 ** 63", "(-3) ** 41",
                                min + "|abs", "[9223372036854775807, 1]|sum"}) {
    ExpectRefused("{{ " + expr + " }}", "integer overflow");
  }
  ExpectRendered("{{ 2 ** 62 }} {{ (-1) ** 65 }} {{ 1 ** 1000 }} {{ 0 ** 0 }}",
                 "4611686018427387904 -1 1 1");
  ExpectRendered(
      "{{ " + min + " is divisibleby(-1) }} {{ (10.0 ** 300)|int }} {{ (0 - 10.0 ** 300)|int }}",
      "True 9223372036854775807 -9223372036854775808");
  // A step past the int64 range ends a range or a slice instead of wrapping around.
  ExpectRendered("{{ range(9223372036854775800, 9223372036854775807, 5)|list }}",
                 "[9223372036854775800, 9223372036854775805]");
  ExpectRendered("{{ 'abcdef'[1::9223372036854775807] }}{{ [1, 2, 3][2::-9223372036854775807] }}",
                 "b[3]");
}

// Found with the fuzz target on an input written to probe it: `set ns.x = ns` made a namespace
// that holds itself; printing it recursed until the stack overflowed (ASan), and it was never
// freed.
TEST(JinjaLimitsTest, NamespacesCannotHoldNamespaces) {
  const std::string ns = "{% set ns = namespace(n=1) %}";
  for (const char* set : {"{% set ns.x = ns %}", "{% set ns.x = [1, {'a': ns}] %}",
                          "{% set ns.f = ns.items %}", "{% set ns.x = namespace() %}"}) {
    ExpectRefused(ns + set + "{{ ns }}", "holding a namespace");
  }
  ExpectRefused("{% set ns = namespace(inner=namespace()) %}", "holds a namespace");
  // As in jinja2, only a namespace's attributes can be set (dict() is a plain dict).
  ExpectRefused("{% set d = {'a': 1} %}{% set d.x = 1 %}", "only of a namespace");
  ExpectRefused("{% set d = dict(a=1) %}{% set d.x = 1 %}", "only of a namespace");
  ExpectRefused("{% set m = messages[0] %}{% set m.content = 'x' %}", "only of a namespace");
  // A namespace may still be passed around and be in lists; its attributes hold other values.
  ExpectRendered(
      ns + "{% set ns.l = [1, [2]] %}{% set ns.d = messages[0] %}{% set pair = [ns, ns] %}"
           "{{ pair[1].n }} {{ ns.l }} {{ ns.d.role }}",
      "1 [1, [2]] user");
}

// A loop that wraps a value in a list each time builds a chain that printing, comparing and
// freeing walk recursively: stored values nest at most 256 deep.
TEST(JinjaLimitsTest, DeeplyNestedValuesAreRefused) {
  ExpectRefused(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}"
      "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
      "nested more than 256 deep");
  ExpectRendered(
      "{% set ns = namespace(x=0) %}{% for i in range(3) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x }}",
      "[[[0]]]");
}

// Strings past 64 MiB, lists past 2^20 items and work past 2^26 bytes are errors, found quickly
// (each of these ran for seconds to minutes, or allocated gigabytes, before the bounds).
TEST(JinjaLimitsTest, SizeAndWorkAreBounded) {
  ExpectRefused("{{ 'x' * 100000000 }}", "longer than 64 MiB");
  ExpectRefused("{% set a = 'x' * 1000 %}{{ a.replace('x', 'y' * 100000) }}", "longer than 64 MiB");
  ExpectRefused("{% set a = 'x' * 40000000 %}{{ a ~ a }}", "longer than 64 MiB");
  ExpectRefused("{% set l = range(600000) %}{{ (l + l)|length }}", "longer than 2^20 items");
  ExpectRefused("{{ ('a,' * 2000000).split(',')|length }}", "more than 1048576 parts");
  ExpectRefused("{{ range(1048576)|unique|length }}", "2^26 bytes");
  ExpectRefused(
      "{% set a = 'a' * 1000000 %}{% for i in range(200000) %}"
      "{% if 'b' in a %}{% endif %}{% endfor %}",
      "2^26 bytes");
  ExpectRefused("{% set a = 'a' * 1000000 %}{% for i in range(200000) %}{{ a[-1] }}{% endfor %}",
                "2^26 bytes");
  ExpectRefused("{% set a = 'a' * 10000000 %}{{ [a, a, a, a, a, a, a]|string|length }}",
                "2^26 bytes");
  ExpectRefused("{{ {'a': 1}|tojson(indent=100000) }}", "indent");
  // Two lists built alike, each holding the one before twice: 2^40 comparisons, or a text of
  // 2^40 items, from a few hundred bytes of template.
  std::string dag = "{% set x0 = [1] %}{% set y0 = [1] %}";
  for (int i = 1; i <= 40; ++i) {
    const std::string p = std::to_string(i - 1), n = std::to_string(i);
    dag += "{% set x" + n + " = [x" + p + ", x" + p + "] %}{% set y" + n + " = [y" + p + ", y" + p +
           "] %}";
  }
  ExpectRefused(dag + "{{ x40 == y40 }}", "2^26 bytes");
  ExpectRefused(dag + "{{ x40 in [y40] }}", "2^26 bytes");
  ExpectRefused(dag + "{{ x40|string|length }}", "2^26 bytes");
  ExpectRefused(dag + "{{ x40|tojson|length }}", "2^26 bytes");
  // Searches that are n * m steps with a naive find: linear now.
  Outcome o = Render(
      "{% set a = 'a' * 8000000 %}{% set b = 'a' * 100000 ~ 'b' %}{{ b in a }} "
      "{{ a.count(b) }} {% set c = 'b' * 1000000 %}"
      "{{ c.strip('c' * 1000000 ~ 'b')|length }}");
  EXPECT_TRUE(o.ok) << o.text;
  EXPECT_EQ(o.text, "False 0 0");
  EXPECT_LT(o.seconds, 5.0);
}

// What the bounds must not refuse: the built-in and real templates on a conversation of 1 MiB
// (2,000 messages of 512 bytes, the server's default body limit).
TEST(JinjaLimitsTest, LongConversationsRenderWithinTheBounds) {
  const Value ctx = Context(2000, 512);
  std::vector<std::pair<std::string, std::string>> templates;
  for (const BuiltinTemplate& b : BuiltinTemplates()) {
    templates.emplace_back(std::string(b.name), std::string(b.source));
  }
  for (const char* name : {"qwen2.5", "qwen3", "llama3.1", "smollm2"}) {
    templates.emplace_back(
        name, testing::ReadFile(testing::SourceDir() + "/tests/chat/templates/" + name + ".jinja"));
  }
  for (const auto& [name, source] : templates) {
    Outcome o = Render(source, ctx);
    EXPECT_TRUE(o.ok) << name << ": " << o.text;
    EXPECT_GT(o.text.size(), size_t{2000 * 512}) << name;
    EXPECT_LT(o.seconds, 5.0) << name;
  }
}

}  // namespace
}  // namespace weir::chat
