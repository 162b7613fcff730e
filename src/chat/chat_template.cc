#include "chat/chat_template.h"

#include "chat/builtin_templates.h"

namespace weir::chat {
namespace {

constexpr std::string_view kTurnMarkers[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>",
                                             "<end_of_turn>", "<|end|>"};

// The built-in family of a file without a template, or "".
std::string GuessFamily(const std::string& arch,
                        const std::function<bool(std::string_view)>& has_token) {
  if (arch.rfind("gemma", 0) == 0) return "gemma";
  if (has_token("<start_of_turn>")) return "gemma";
  if (has_token("<|start_header_id|>")) return "llama3";
  if (has_token("<|im_start|>")) return "chatml";
  if (has_token("<|user|>") && has_token("<|end|>")) return "phi3";
  if (has_token("[INST]")) return "mistral";
  return "";
}

}  // namespace

Result<ChatTemplate> ChatTemplate::FromSource(const std::string& source, const std::string& name) {
  auto parsed = JinjaTemplate::Parse(source);
  if (!parsed.ok()) {
    return parsed.status().WithContext("cannot use the " + name + " chat template");
  }
  ChatTemplate t;
  t.name_ = name;
  t.source_ = source;
  t.jinja_ = std::move(*parsed);
  for (std::string_view m : kTurnMarkers) {
    if (source.find(m) != std::string::npos) t.end_of_turn_.emplace_back(m);
  }
  // A one-turn conversation must render: a template that fails on it would fail on every turn.
  auto probe = t.Apply({{"user", "Hello"}}, true, "<s>", "</s>");
  if (!probe.ok()) {
    return probe.status().WithContext("the " + name + " chat template cannot render a user turn");
  }
  return t;
}

Result<ChatTemplate> ChatTemplate::Select(const std::string& name, const std::string& file_template,
                                          const std::string& architecture,
                                          const std::function<bool(std::string_view)>& has_token) {
  std::string chosen = name, note;
  if (chosen.empty()) {
    if (!file_template.empty()) return FromSource(file_template, "file");
    chosen = GuessFamily(architecture, has_token);
    if (chosen.empty()) {
      return Status::InvalidArgument(StrFormat(
          "the model file has no chat template (tokenizer.chat_template) and its family is not "
          "recognisable from architecture '%s' or its special tokens; pass --chat-template NAME "
          "(%s)",
          architecture.c_str(), BuiltinTemplateNames().c_str()));
    }
    note = StrFormat("the file has no chat template; using the built-in %s template (%s)",
                     chosen.c_str(),
                     architecture.rfind("gemma", 0) == 0 ? ("architecture " + architecture).c_str()
                                                         : "from its special tokens");
  } else {
    note = "using the built-in " + chosen + " template (--chat-template)";
  }
  const BuiltinTemplate* b = FindBuiltinTemplate(chosen);
  if (!b) {
    return Status::InvalidArgument(StrFormat("--chat-template '%s' is not a built-in template (%s)",
                                             chosen.c_str(), BuiltinTemplateNames().c_str()));
  }
  WEIR_ASSIGN_OR_RETURN(ChatTemplate t, FromSource(std::string(b->source), chosen));
  t.note_ = note;
  t.end_of_turn_.clear();
  if (!b->end_of_turn.empty()) t.end_of_turn_.emplace_back(b->end_of_turn);
  return t;
}

Result<std::string> ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt, const std::string& bos_token,
                                        const std::string& eos_token) const {
  ValueList list;
  for (const ChatMessage& m : messages) {
    list.push_back(
        Value::Dict({{"role", Value::String(m.role)}, {"content", Value::String(m.content)}}));
  }
  Value ctx = Value::Dict({{"messages", Value::List(std::move(list))},
                           {"add_generation_prompt", Value::Bool(add_generation_prompt)},
                           {"bos_token", Value::String(bos_token)},
                           {"eos_token", Value::String(eos_token)}});
  auto out = jinja_.Render(ctx);
  if (!out.ok()) return out.status().WithContext(name_ + " chat template");
  return out;
}

}  // namespace weir::chat
