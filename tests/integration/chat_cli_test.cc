// weir chat and weir run --chat through a pipe, as a script runs them: a tiny model generated
// here (random weights, so only structure is checked), and SmolLM2-135M-Instruct from shared/
// when present (its replies with the KV cache kept equal those of a full re-prefill).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "testing/testing.h"

namespace weir {
namespace {

using testing::RunCommand;
using testing::WeirBin;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string TinyModel() {
  static std::string path;  // generated once per test binary run
  if (path.empty()) {
    path = testing::TempDir() + "/tiny.gguf";
    auto r = RunCommand(Quote(WeirBin()) + " gen --preset tiny --type f32 --no-progress -o " +
                        Quote(path));
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  return path;
}

std::vector<nlohmann::json> JsonLines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    v.push_back(nlohmann::json::parse(line, nullptr, false));
    EXPECT_FALSE(v.back().is_discarded()) << line;
  }
  return v;
}

std::string ChatJson(const std::string& model, const std::string& input, const std::string& flags) {
  const std::string dir = testing::TempDir();
  testing::WriteFile(dir + "/in.txt", input);
  auto r = RunCommand(Quote(WeirBin()) + " chat -m " + Quote(model) + " " + flags + " --json < " +
                      Quote(dir + "/in.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

TEST(ChatCliTest, PipeGivesOneTurnPerLineAndPrefillsOnlyTheNewTurn) {
  const std::string out = ChatJson(TinyModel(), "hello there\n\nsecond question\nthird\n",
                                   "--chat-template chatml -n 6 --temp 0 -t 1");
  std::vector<nlohmann::json> turns = JsonLines(out);
  ASSERT_EQ(turns.size(), 3u) << out;  // the empty line is no turn
  EXPECT_EQ(turns[0]["user"], "hello there");
  EXPECT_EQ(turns[0]["reused_tokens"], 0);
  for (size_t i = 1; i < turns.size(); ++i) {
    // Everything the previous turn fed stays in the KV cache; only the new turn is prefilled.
    const int fed_before = turns[i - 1]["reused_tokens"].get<int>() +
                           turns[i - 1]["prompt_tokens"].get<int>() +
                           turns[i - 1]["generated_tokens"].get<int>();
    EXPECT_EQ(turns[i]["reused_tokens"].get<int>(), fed_before) << turns[i].dump();
    EXPECT_LE(turns[i]["generated_tokens"].get<int>(), 6);
  }
  // Without reuse each turn prefills the whole conversation.
  std::vector<nlohmann::json> full =
      JsonLines(ChatJson(TinyModel(), "hello there\nsecond question\n",
                         "--chat-template chatml -n 6 --temp 0 -t 1 --no-cache-reuse"));
  ASSERT_EQ(full.size(), 2u);
  EXPECT_EQ(full[1]["reused_tokens"], 0);
  EXPECT_GT(full[1]["prompt_tokens"].get<int>(), turns[1]["prompt_tokens"].get<int>());
}

TEST(ChatCliTest, ARewritingTemplateKeepsTheSharedPrefix) {
  // A template that replaces earlier replies (as Qwen3 drops old reasoning): the rendered
  // conversation no longer extends the cached text, so the tokens it shares with the cache are
  // kept and the rest prefilled. The replies are those of a full re-prefill each turn.
  const std::string tmpl = testing::TempDir() + "/drops_old_replies.jinja";
  testing::WriteFile(tmpl,
                     "{%- for m in messages -%}<|im_start|>{{ m.role }}\n"
                     "{% if m.role == 'assistant' and not loop.last %}[an earlier reply]"
                     "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor -%}"
                     "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}");
  const std::string input = "hello there\nsecond question\nthird one\n";
  const std::string flags = "--chat-template-file " + Quote(tmpl) + " -n 6 --temp 0 -t 1";
  std::vector<nlohmann::json> kept = JsonLines(ChatJson(TinyModel(), input, flags));
  std::vector<nlohmann::json> full =
      JsonLines(ChatJson(TinyModel(), input, flags + " --no-cache-reuse"));
  ASSERT_EQ(kept.size(), 3u);
  ASSERT_EQ(full.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(kept[i]["reply"], full[i]["reply"]) << i;
    // Kept + prefilled = the whole conversation a full re-prefill feeds.
    EXPECT_EQ(kept[i]["reused_tokens"].get<int>() + kept[i]["prompt_tokens"].get<int>(),
              full[i]["prompt_tokens"].get<int>())
        << kept[i].dump();
    // Everything up to the first replaced reply is kept.
    if (i > 0) EXPECT_GT(kept[i]["reused_tokens"].get<int>(), 4) << kept[i].dump();
  }
}

TEST(ChatCliTest, ContextFullDropsOldestTurnsAndSaysSoOnce) {
  const std::string dir = testing::TempDir();
  std::string input;
  for (int i = 0; i < 8; ++i)
    input += "a fairly long user message number " + std::to_string(i) + " with padding words\n";
  testing::WriteFile(dir + "/in.txt", input);
  auto r = RunCommand(Quote(WeirBin()) + " chat -m " + Quote(TinyModel()) +
                      " --chat-template chatml -c 160 -n 8 --temp 0 -t 1 --json < " +
                      Quote(dir + "/in.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(JsonLines(r.out).size(), 8u);
  const std::string note = "the oldest turns are dropped";
  ASSERT_NE(r.err.find(note), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(note), r.err.rfind(note)) << "said more than once: " << r.err;
}

TEST(ChatCliTest, PlainPipeOutputAndOneShotRun) {
  const std::string dir = testing::TempDir();
  testing::WriteFile(dir + "/in.txt", "hi\n");
  auto r = RunCommand(Quote(WeirBin()) + " chat -m " + Quote(TinyModel()) +
                      " --chat-template gemma -n 4 --temp 0 -t 1 < " + Quote(dir + "/in.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_NE(r.err.find("using the built-in gemma template"), std::string::npos) << r.err;

  auto one = RunCommand(Quote(WeirBin()) + " run --chat -m " + Quote(TinyModel()) +
                        " --chat-template phi3 -p hi -n 4 --temp 0 -t 1 --json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto j = nlohmann::json::parse(one.out);
  // The prompt fed is the template's rendering, not the bare text.
  EXPECT_GT(j["prompt_tokens"].get<int>(), 8) << one.out;
}

TEST(ChatCliTest, ErrorsAreOneLineAndNameTheChoices) {
  auto r = RunCommand(Quote(WeirBin()) + " chat -m " + Quote(TinyModel()) +
                      " --chat-template nope < /dev/null");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("chatml, llama3, gemma, phi3, mistral"), std::string::npos) << r.err;
  // The generated model has no template and no recognisable turn markers.
  r = RunCommand(Quote(WeirBin()) + " chat -m " + Quote(TinyModel()) + " < /dev/null");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--chat-template"), std::string::npos) << r.err;
}

TEST(ChatCliTest, SmolLM2KeepsTheCacheWithoutChangingReplies) {
  const std::string model =
      testing::SharedPath("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
  if (!testing::FileExists(model)) GTEST_SKIP() << "no " << model;
  const std::string input = "Hi! Who are you?\nName three colours.\n";
  auto kept = JsonLines(ChatJson(model, input, "-n 16 --temp 0 -t 2"));
  auto full = JsonLines(ChatJson(model, input, "-n 16 --temp 0 -t 2 --no-cache-reuse"));
  ASSERT_EQ(kept.size(), 2u);
  ASSERT_EQ(full.size(), 2u);
  EXPECT_GT(kept[1]["reused_tokens"].get<int>(), 0);
  EXPECT_LT(kept[1]["prompt_tokens"].get<int>(), full[1]["prompt_tokens"].get<int>());
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(kept[i]["reply"], full[i]["reply"]) << i;
  EXPECT_FALSE(kept[0]["reply"].get<std::string>().empty());
}

// Gemma 3 270M ($WEIR_GEMMA3, else the model cache): no template in the file, so the built-in
// gemma one, said on stderr; the turn ends at <end_of_turn> or -n, and the second turn reuses the
// cache (the file is the pretrained model: its words are not checked).
TEST(ChatCliTest, Gemma3WithoutTemplateGetsItsFamilysBuiltin) {
  const char* env = std::getenv("WEIR_GEMMA3");
  const char* home = std::getenv("HOME");
  const std::string model = env ? env
                                : std::string(home ? home : "/root") +
                                      "/.cache/weir/models/gemma-3-270m-Q4_K_M.gguf";
  if (!testing::FileExists(model)) GTEST_SKIP() << model << " is absent";
  const std::string dir = testing::TempDir();
  testing::WriteFile(dir + "/in.txt", "Hello!\nHow are you?\n");
  auto r = RunCommand(Quote(WeirBin()) + " chat -m " + Quote(model) +
                      " -n 8 --temp 0 -t 2 --json < " + Quote(dir + "/in.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("the file has no chat template; using the built-in gemma template"),
            std::string::npos)
      << r.err;
  auto turns = JsonLines(r.out);
  ASSERT_EQ(turns.size(), 2u) << r.out;
  // Gemma's template trims a reply; only a reply with white space at an end is rendered
  // differently from what the cache holds, and then the conversation is prefilled again.
  const std::string first = turns[0]["reply"];
  const bool trims = !first.empty() && (std::isspace(static_cast<unsigned char>(first.front())) ||
                                        std::isspace(static_cast<unsigned char>(first.back())));
  EXPECT_TRUE(turns[1]["reused_tokens"].get<int>() > 0 || trims) << turns[1].dump();
  for (const auto& t : turns) {
    const std::string stop = t["stop"];
    EXPECT_TRUE(stop == "end_of_turn" || stop == "length") << t.dump();
  }
}

}  // namespace
}  // namespace weir
