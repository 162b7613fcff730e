// The chat-template renderer's errors and template selection. Rendering equality with jinja2 is
// tests/chat/jinja_oracle.py (ctest Chat.Jinja2Oracle).
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <string>

#include "chat/builtin_templates.h"
#include "chat/jinja_template.h"

namespace weir::chat {
namespace {

std::string Render(const std::string& source, const Value& ctx) {
  auto t = JinjaTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return "";
  auto out = t->Render(ctx);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : "";
}

TEST(JinjaTest, WhitespaceRulesOfTransformers) {
  Value ctx = Value::Dict({{"xs", Value::List({Value::Int(1), Value::Int(2)})}});
  // trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before one.
  EXPECT_EQ(Render("{% for x in xs %}\n  {% if x %}\n[{{ x }}]\n  {% endif %}\n{% endfor %}", ctx),
            "[1]\n[2]\n");
  EXPECT_EQ(Render("a  {{- ' b ' -}}  c", ctx), "a b c");
  EXPECT_EQ(Render("{# note #}\nx", ctx), "x");
}

TEST(JinjaTest, ScopingFollowsJinja2) {
  Value ctx = Value::Dict({{"xs", Value::List({Value::Int(1), Value::Int(2)})}});
  // A set inside a loop stays in that iteration; a namespace attribute survives it.
  EXPECT_EQ(
      Render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in xs %}{% set n = n + x %}"
             "{% set ns.n = ns.n + x %}{% endfor %}{{ n }} {{ ns.n }}",
             ctx),
      "0 3");
}

TEST(JinjaTest, ErrorsNameTheLineAndTheReason) {
  struct Case {
    std::string source;
    const char* needle;
  } cases[] = {
      {"ok\n{% include 'x' %}", "line 2: the tag {% include %} is not supported"},
      {"{% if x %}unclosed", "ends before {% elif or else or endif %}"},
      {"{{ 1 < 2 < 3 }}", "chained comparisons"},
      {"{{ x | nosuchfilter }}", "unknown filter 'nosuchfilter'"},
      {"{{ raise_exception('roles must alternate') }}", "roles must alternate"},
      {"{{ 'a' + 1 }}", "unsupported operand types for +: 'str' and 'int'"},
      {"{{ 'unterminated }}", "never closed"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "loop iterations"},
      {"{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "nested too deeply"},
      {std::string(20000, '{') + "% if x %}", "never closed"},
  };
  for (const Case& c : cases) {
    auto t = JinjaTemplate::Parse(c.source);
    Status st = t.ok() ? t->Render(Value::Dict()).status() : t.status();
    ASSERT_FALSE(st.ok()) << c.source;
    EXPECT_NE(st.ToString().find(c.needle), std::string::npos) << st.ToString();
  }
}

TEST(ChatTemplateTest, FileTemplateFirstThenFamilyBuiltinSayingSo) {
  auto none = [](std::string_view) { return false; };
  auto gemma_tokens = [](std::string_view p) { return p == "<start_of_turn>"; };
  const std::string file = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";

  auto t = ChatTemplate::Select("", file, "llama", none);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->name(), "file");
  EXPECT_TRUE(t->note().empty());

  t = ChatTemplate::Select("", "", "gemma3", none);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->name(), "gemma");
  EXPECT_NE(t->note().find("no chat template"), std::string::npos);
  EXPECT_EQ(t->end_of_turn(), std::vector<std::string>{"<end_of_turn>"});
  auto prompt = t->Apply({{"system", "Be brief."}, {"user", "Hi"}}, true, "<bos>", "<eos>");
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(*prompt,
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");

  t = ChatTemplate::Select("", "", "llama", gemma_tokens);  // recognised by its turn markers
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->name(), "gemma");

  t = ChatTemplate::Select("phi3", file, "llama", none);  // the flag wins over the file
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name(), "phi3");

  auto unknown = ChatTemplate::Select("nope", "", "llama", none);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("chatml, llama3, gemma, phi3, mistral"),
            std::string::npos);
  auto unrecognised = ChatTemplate::Select("", "", "llama", none);
  ASSERT_FALSE(unrecognised.ok());
  EXPECT_NE(unrecognised.status().message().find("--chat-template"), std::string::npos);

  auto broken = ChatTemplate::Select("", "{% for m in messages %}{{ m.content }", "llama", none);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("cannot use the file chat template"), std::string::npos)
      << broken.status().ToString();
}

TEST(ChatTemplateTest, EveryBuiltinRendersAConversationEndingInItsMarker) {
  for (const BuiltinTemplate& b : BuiltinTemplates()) {
    auto t = ChatTemplate::Select(std::string(b.name), "", "llama",
                                  [](std::string_view) { return false; });
    ASSERT_TRUE(t.ok()) << b.name << ": " << t.status().ToString();
    auto p = t->Apply({{"user", "a"}, {"assistant", "b"}, {"user", "c"}}, false, "<s>", "</s>");
    ASSERT_TRUE(p.ok()) << b.name << ": " << p.status().ToString();
    const std::string marker = b.end_of_turn.empty() ? "</s>" : std::string(b.end_of_turn);
    EXPECT_NE(p->find("b" + marker), std::string::npos) << b.name << ": " << *p;
  }
}

}  // namespace
}  // namespace weir::chat

namespace weir::chat {
namespace {

// Hostile input: every prefix and random byte edits of the built-in templates either render or
// fail with a Status; nothing crashes, loops or reads out of bounds (the sanitizer pass of CI
// runs this suite).
TEST(JinjaTest, MutatedTemplatesFailCleanly) {
  Value ctx =
      Value::Dict({{"messages", Value::List({Value::Dict({{"role", Value::String("user")},
                                                          {"content", Value::String("hi")}})})},
                   {"add_generation_prompt", Value::Bool(true)},
                   {"bos_token", Value::String("<s>")},
                   {"eos_token", Value::String("</s>")}});
  uint32_t state = 12345;
  auto next = [&]() {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  int rendered = 0, refused = 0;
  for (const BuiltinTemplate& b : BuiltinTemplates()) {
    const std::string src(b.source);
    for (size_t cut = 0; cut < src.size(); cut += 7) {
      auto t = JinjaTemplate::Parse(src.substr(0, cut));
      if (t.ok() && t->Render(ctx).ok()) {
        ++rendered;
      } else {
        ++refused;
      }
    }
    for (int trial = 0; trial < 300; ++trial) {
      std::string m = src;
      for (int k = 0; k < 3; ++k) {
        static const char kBytes[] = "{}%#-+|()[]'\".:~ \nab0";
        m[next() % m.size()] = kBytes[next() % (sizeof(kBytes) - 1)];
      }
      auto t = JinjaTemplate::Parse(m);
      if (t.ok() && t->Render(ctx).ok()) {
        ++rendered;
      } else {
        ++refused;
      }
    }
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace weir::chat

namespace weir::chat {
namespace {

TEST(JinjaTest, DeepBlockNestingIsRefused) {
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "{% if true %}";
  auto t = JinjaTemplate::Parse(deep);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nested more than"), std::string::npos)
      << t.status().ToString();
}

}  // namespace
}  // namespace weir::chat
