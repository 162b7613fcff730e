#include "serve/api.h"

#include <gtest/gtest.h>

namespace weir::serve {
namespace {

TEST(ServeApiTest, ParsesChatRequests) {
  GenerationRequest r;
  auto e = ParseGenerationRequest(
      R"({"model": "m", "messages": [{"role": "system", "content": "be brief"},
          {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
          "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "seed": 42,
          "presence_penalty": 0.5, "frequency_penalty": -1.25,
          "stop": ["\n", "END"], "stream": true, "stream_options": {"include_usage": true},
          "unknown_field": {"ignored": 1}})",
      true, &r);
  ASSERT_FALSE(e.has_value()) << e->message;
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "hi there");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(*r.temperature, 0.0f);
  EXPECT_EQ(*r.top_p, 0.5f);
  EXPECT_EQ(*r.top_k, 3);
  EXPECT_EQ(*r.seed, 42u);
  EXPECT_EQ(*r.presence_penalty, 0.5f);
  EXPECT_EQ(*r.frequency_penalty, -1.25f);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.model, "m");
}

TEST(ServeApiTest, ParsesCompletionRequests) {
  GenerationRequest r;
  ASSERT_FALSE(ParseGenerationRequest(R"({"prompt": "Once", "stop": "x"})", false, &r));
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.max_tokens, -1);
  ASSERT_FALSE(ParseGenerationRequest(R"({"prompt": ["Once"]})", false, &r));
  EXPECT_EQ(r.prompt, "Once");
}

TEST(ServeApiTest, BadRequestsNameTheField) {
  struct Case {
    const char* body;
    bool chat;
    const char* param;
  };
  const Case cases[] = {
      {"{", true, ""},
      {"[1]", true, ""},
      {R"({"messages": []})", true, "messages"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", true, "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", true, "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", true, "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})", true, "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", true, "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5})", true, "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 2})", true, "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", true, "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c","d","e"]})", true, "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", true, "stream"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": "high"})", true, "top_p"},
      {R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 2.5})", true, "presence_penalty"},
      {R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": "x"})", true, "frequency_penalty"},
      {R"({})", false, "prompt"},
      {R"({"prompt": ["a", "b"]})", false, "prompt"},
  };
  for (const Case& c : cases) {
    GenerationRequest r;
    auto e = ParseGenerationRequest(c.body, c.chat, &r);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->status, 400) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body;
    EXPECT_FALSE(e->message.empty());
    const nlohmann::json j = ErrorBody(*e);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
}

TEST(ServeApiTest, StopCutHoldsBackWhatMayBecomeAStopString) {
  bool hit = false;
  size_t held = 0;
  EXPECT_EQ(StopCut("hello END there", {"END"}, &hit, &held), 6u);
  EXPECT_TRUE(hit);
  EXPECT_EQ(StopCut("hello EN", {"END"}, &hit, &held), 8u);
  EXPECT_FALSE(hit);
  EXPECT_EQ(held, 2u);  // "EN" may become "END"
  StopCut("hello", {"END", "lo!"}, &hit, &held);
  EXPECT_EQ(held, 2u);  // "lo" may become "lo!"
  StopCut("abc", {}, &hit, &held);
  EXPECT_EQ(held, 0u);
  EXPECT_EQ(StopCut("a\nb\nc", {"\n", "b"}, &hit, &held), 1u);  // the first of any
}

TEST(ServeApiTest, Utf8PrefixNeverSplitsACharacter) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3"), 1u);              // first byte of é
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3\xA9"), 3u);          // é whole
  EXPECT_EQ(CompleteUtf8Prefix("a\xE2\x82"), 1u);          // 2 of €'s 3 bytes
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x98\x80"), 4u);   // an emoji whole
}

TEST(ServeApiTest, ChunksAndCompletionsHaveOpenAisShape) {
  GenerationRequest chat;
  chat.chat = true;
  const std::string text = "hi", reason = "stop";
  nlohmann::json first = ChunkBody(chat, "id", 1, "m", &text, true, nullptr, nullptr);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "hi");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  nlohmann::json last = ChunkBody(chat, "id", 1, "m", nullptr, false, &reason, nullptr);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("content"));
  const Usage u{5, 2};
  nlohmann::json usage = ChunkBody(chat, "id", 1, "m", nullptr, false, nullptr, &u);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  nlohmann::json done = CompletionBody(chat, "id", 1, "m", "hello", "length", u);
  EXPECT_EQ(done["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(done["choices"][0]["finish_reason"], "length");
  GenerationRequest comp;
  EXPECT_EQ(CompletionBody(comp, "id", 1, "m", "x", "stop", u)["choices"][0]["text"], "x");
}

// Found while writing fuzz/serve_request_fuzz.cc (which aborts when a parser throws): a content
// part whose "type" was not a string made nlohmann's value("type", "") throw out of the parser,
// and the server answered 500 instead of 400.
TEST(ServeApiTest, ContentPartOfTheWrongTypeIsA400) {
  for (const char* body : {R"({"messages": [{"role": "user", "content": [{"type": 5}]}]})",
                           R"({"messages": [{"role": "user", "content": [{"type": null}]}]})",
                           R"({"messages": [{"role": "user", "content": [{"type": ["text"]}]}]})",
                           R"({"messages": [{"role": "user", "content": [5]}]})"}) {
    GenerationRequest r;
    std::optional<ApiError> e;
    ASSERT_NO_THROW(e = ParseGenerationRequest(body, true, &r)) << body;
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, "messages[0].content") << body;
  }
}

// The /tokenize and /detokenize bodies; a flag of the wrong type is a 400 naming it (the server
// used to read the flags with value(), which throws).
TEST(ServeApiTest, TokenizeAndDetokenizeBodies) {
  TokenizeRequest t;
  ASSERT_FALSE(ParseTokenizeRequest(R"({"content": "hi", "with_pieces": true})", &t));
  EXPECT_EQ(t.content, "hi");
  EXPECT_FALSE(t.add_special);
  EXPECT_TRUE(t.with_pieces);
  for (auto [body, param] :
       {std::pair{R"({"content": "hi", "add_special": "yes"})", "add_special"},
        std::pair{R"({"content": "hi", "with_pieces": 1})", "with_pieces"},
        std::pair{R"({"content": 5})", "content"}, std::pair{R"([])", "content"}}) {
    std::optional<ApiError> e;
    ASSERT_NO_THROW(e = ParseTokenizeRequest(body, &t)) << body;
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->param, param) << body;
  }
  std::vector<int32_t> ids;
  ASSERT_FALSE(ParseDetokenizeRequest(R"({"tokens": [0, 5, 9]})", 10, &ids));
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 5, 9}));
  for (const char* body : {R"({"tokens": [10]})", R"({"tokens": [-1]})", R"({"tokens": [1.5]})",
                           R"({"tokens": [18446744073709551615]})", R"({"tokens": "1"})", "{"}) {
    EXPECT_TRUE(ParseDetokenizeRequest(body, 10, &ids).has_value()) << body;
  }
}

}  // namespace
}  // namespace weir::serve
