// Fuzz target "chat_template": the chat-template renderer (src/chat). The input is a Jinja
// template, the separator kNextFile, then a conversation, read leniently so that most mutations
// still give one:
//   a JSON array        the messages: objects with "role" and "content" (other keys are kept,
//                       so that templates reading tool_calls or name see them), or bare strings
//                       (user and assistant turns in turn);
//   a JSON object       the template's variables: its "messages" as above, any other key as is
//                       (tools, documents, ...);
//   anything else       one message a line, "role: content" or, without a colon, alternating
//                       user and assistant turns.
// The template is parsed once and rendered with add_generation_prompt false and true, bos_token
// "<s>" and eos_token "</s>" (the variables weir gives it); then, when one of those rendered,
// through ChatTemplate (FromSource, which renders a one-turn probe, and Apply) with the messages'
// role and content. Errors are Status; only a sanitizer finding (or libFuzzer's time and memory
// limits) ends a run.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "chat/jinja_template.h"
#include "fuzz_util.h"

namespace {

using nlohmann::json;
using weir::chat::ChatMessage;
using weir::chat::Value;
using weir::chat::ValueDict;
using weir::chat::ValueList;

volatile size_t g_sink = 0;

// A JSON value as a template value; deeper than a chat request gets is cut off (None).
Value FromJson(const json& j, int depth) {
  if (depth > 16) return Value::None();
  switch (j.type()) {
    case json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return Value::Int(j.get<int64_t>());
    case json::value_t::number_float:
      return Value::Float(j.get<double>());
    case json::value_t::string:
      return Value::String(j.get<std::string>());
    case json::value_t::array: {
      ValueList items;
      for (const json& x : j) items.push_back(FromJson(x, depth + 1));
      return Value::List(std::move(items));
    }
    case json::value_t::object: {
      ValueDict items;
      for (const auto& [k, v] : j.items()) items.emplace_back(k, FromJson(v, depth + 1));
      return Value::Dict(std::move(items));
    }
    default:
      return Value::None();
  }
}

std::string TextOf(const json& j) {
  return j.is_string() ? j.get<std::string>()
                       : j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The messages of a JSON array, as template values and as ChatMessages.
void MessagesFromJson(const json& arr, ValueList* values, std::vector<ChatMessage>* messages) {
  for (const json& m : arr) {
    ChatMessage msg;
    if (m.is_object()) {
      msg.role = m.contains("role") ? TextOf(m["role"]) : "user";
      msg.content = m.contains("content") ? TextOf(m["content"]) : "";
      Value v = FromJson(m, 1);
      if (!m.contains("role")) v.Set("role", Value::String(msg.role));
      values->push_back(std::move(v));
    } else {
      msg.role = messages->size() % 2 == 0 ? "user" : "assistant";
      msg.content = TextOf(m);
      values->push_back(Value::Dict(
          {{"role", Value::String(msg.role)}, {"content", Value::String(msg.content)}}));
    }
    messages->push_back(std::move(msg));
  }
}

// One message a line: "role: content", or alternating user / assistant turns.
void MessagesFromLines(std::string_view text, ValueList* values,
                       std::vector<ChatMessage>* messages) {
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ChatMessage msg;
    size_t colon = line.find(':');
    if (colon != std::string_view::npos && colon < 16) {
      msg.role = std::string(line.substr(0, colon));
      msg.content = std::string(line.substr(colon + 1));
    } else {
      msg.role = messages->size() % 2 == 0 ? "user" : "assistant";
      msg.content = std::string(line);
    }
    values->push_back(
        Value::Dict({{"role", Value::String(msg.role)}, {"content", Value::String(msg.content)}}));
    messages->push_back(std::move(msg));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::chat;
  auto [source, conversation] =
      weir::fuzz::SplitOnce(weir::fuzz::AsText(data, size), weir::fuzz::kNextFile);
  auto parsed = JinjaTemplate::Parse(source);
  if (!parsed.ok()) {
    g_sink = g_sink + parsed.status().message().size();
    return 0;
  }

  Value ctx = Value::Dict();
  ValueList values;
  std::vector<ChatMessage> messages;
  json j = json::parse(conversation, nullptr, /*allow_exceptions=*/false);
  if (j.is_array()) {
    MessagesFromJson(j, &values, &messages);
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k == "messages" && v.is_array()) {
        MessagesFromJson(v, &values, &messages);
      } else {
        ctx.Set(k, FromJson(v, 1));
      }
    }
  } else {
    MessagesFromLines(conversation, &values, &messages);
  }
  ctx.Set("messages", Value::List(std::move(values)));
  ctx.Set("bos_token", Value::String("<s>"));
  ctx.Set("eos_token", Value::String("</s>"));

  size_t sink = 0;
  bool rendered = false;
  for (bool gen : {false, true}) {
    ctx.Set("add_generation_prompt", Value::Bool(gen));
    auto out = parsed->Render(ctx);
    sink += out.ok() ? out->size() : out.status().message().size();
    rendered |= out.ok();
  }
  // The same through the ChatTemplate weir uses (its one-turn probe, then the conversation),
  // unless the template failed both times (most often at a bound, slowly: not twice more).
  if (!rendered) {
    g_sink = g_sink + sink;
    return 0;
  }
  if (auto t = ChatTemplate::FromSource(std::string(source), "fuzz"); t.ok()) {
    auto out = t->Apply(messages, /*add_generation_prompt=*/true, "<s>", "</s>");
    sink += out.ok() ? out->size() : out.status().message().size();
    sink += t->end_of_turn().size();
  }
  g_sink = g_sink + sink;
  return 0;
}
